// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/model_registry.hpp"

#include "prsgd/algorithms/model_spec.hpp"
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
  return entries_.add(std::move(name), std::move(description), std::move(factory));
}

expected<void> model_registry::remove(std::string_view name) { return entries_.remove(name); }

expected<std::unique_ptr<model>> model_registry::make(std::string_view name, const model_config& config) const {
  if (auto factory = entries_.find(name)) {
    return (*factory)(config);
  }
  if (is_model_spec(name)) {
    auto spec = parse_model_spec(name);
    PRSGD_TRY(spec);
    return make_spec_model(*spec, config);
  }
  return entries_.missing(name);
}

bool model_registry::contains(std::string_view name) const {
  return entries_.contains(name) || (is_model_spec(name) && parse_model_spec(name).has_value());
}

std::vector<std::string> model_registry::names() const { return entries_.names(); }

expected<std::string> model_registry::description(std::string_view name) const { return entries_.description(name); }

}  // namespace prsgd::algorithms
