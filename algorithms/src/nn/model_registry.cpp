// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/model_registry.hpp"

#include "prsgd/algorithms/models.hpp"

namespace prsgd::algorithms {

model_registry& model_registry::instance() {
  // Built on first use (thread-safe static init); defined out of line so one copy exists per process
  // even when plugins are loaded with dlopen.
  static model_registry* registry = [] {
    auto* r = new model_registry();  // never destroyed: plugins may still use it during exit
    register_builtin_models(*r);
    return r;
  }();
  return *registry;
}

expected<void> model_registry::add(std::string name, std::string description, model_factory factory) {
  if (name.empty() || !factory) {
    return fail(errc::invalid_argument, "a model needs a name and a factory");
  }
  const mutex_lock lock(mutex_);
  if (entries_.contains(name)) {
    return fail(errc::already_exists, "model '" + name + "' is already registered");
  }
  entries_.emplace(std::move(name), entry{std::move(description), std::move(factory)});
  return {};
}

expected<void> model_registry::remove(std::string_view name) {
  const mutex_lock lock(mutex_);
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return fail(errc::not_found, "no model '" + std::string(name) + "'");
  }
  entries_.erase(it);
  return {};
}

expected<std::unique_ptr<model>> model_registry::make(std::string_view name, const model_config& config) const {
  model_factory factory;
  {
    const mutex_lock lock(mutex_);
    auto it = entries_.find(name);
    if (it == entries_.end()) {
      return fail(errc::not_found, "no model '" + std::string(name) + "'");
    }
    factory = it->second.factory;
  }
  return factory(config);
}

bool model_registry::contains(std::string_view name) const {
  const mutex_lock lock(mutex_);
  return entries_.find(name) != entries_.end();
}

std::vector<std::string> model_registry::names() const {
  const mutex_lock lock(mutex_);
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, e] : entries_) {
    out.push_back(name);
  }
  return out;
}

expected<std::string> model_registry::description(std::string_view name) const {
  const mutex_lock lock(mutex_);
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return fail(errc::not_found, "no model '" + std::string(name) + "'");
  }
  return it->second.description;
}

}  // namespace prsgd::algorithms
