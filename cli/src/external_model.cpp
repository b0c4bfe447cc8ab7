// SPDX-License-Identifier: Apache-2.0
#include "external_model.hpp"

#include <yaml-cpp/yaml.h>

#include <cstring>
#include <set>
#include <utility>

#include "prsgd/algorithms/safetensors.hpp"

namespace prsgd::cli {
namespace {

expected<std::vector<external_tensor>> read_spec(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);  // JSON is YAML: one reader for both
  } catch (const YAML::BadFile&) {
    return fail(errc::io_error, "--model-spec: cannot read '" + path + "'");
  } catch (const YAML::Exception& e) {
    return fail(errc::invalid_argument, "--model-spec " + path + ": not JSON or YAML: " + e.msg);
  }
  if (root.IsMap() && root["tensors"]) {
    root = root["tensors"];
  }
  const std::string want = "--model-spec " + path + ": expected a list of {name, shape} in flat order";
  if (!root.IsSequence() || root.size() == 0) {
    return fail(errc::invalid_argument, want);
  }
  std::vector<external_tensor> out;
  std::set<std::string> names;
  try {
    for (const auto& t : root) {
      if (!t.IsMap() || !t["name"] || !t["shape"] || !t["shape"].IsSequence()) {
        return fail(errc::invalid_argument, want);
      }
      external_tensor e;
      e.name = t["name"].as<std::string>();
      for (const auto& d : t["shape"]) {
        const auto v = d.as<std::int64_t>();
        if (v <= 0) {
          return fail(errc::invalid_argument,
                      "--model-spec " + path + ": tensor '" + e.name + "' has a dimension " + std::to_string(v));
        }
        e.shape.push_back(v);
      }
      if (e.name.empty() || !names.insert(e.name).second) {
        return fail(errc::invalid_argument,
                    "--model-spec " + path + ": tensor names must be unique and not empty ('" + e.name + "')");
      }
      out.push_back(std::move(e));
    }
  } catch (const YAML::Exception& e) {
    return fail(errc::invalid_argument, want + " (" + e.msg + ")");
  }
  return out;
}

std::size_t elements(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (const auto d : shape) {
    n *= static_cast<std::size_t>(d);
  }
  return n;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
  }
  return s + "]";
}

void append_floats(std::vector<float>& out, const algorithms::st_tensor& t) {
  const std::size_t n = t.data.size() / sizeof(float);
  const std::size_t at = out.size();
  out.resize(at + n);
  if (n > 0) {
    std::memcpy(out.data() + at, t.data.data(), t.data.size());
  }
}

// x̄_0 from a safetensors file: the spec's tensors by name, in spec order; without a spec every tensor in
// the file's order.
expected<std::vector<float>> read_initial(const std::string& path, const std::vector<external_tensor>& spec) {
  auto file = algorithms::read_safetensors(path);
  if (!file) {
    return fail(file.error().code, "--init-model: " + file.error().message());
  }
  std::vector<float> out;
  if (spec.empty()) {
    for (const auto& t : file->tensors) {
      if (t.dtype != algorithms::st_dtype::f32) {
        return fail(errc::invalid_argument, "--init-model " + path + ": tensor '" + t.name + "' is " +
                                                std::string{algorithms::to_string(t.dtype)} + ", not F32");
      }
      append_floats(out, t);
    }
    return out;
  }
  for (const auto& want : spec) {
    const auto* t = file->find(want.name);
    if (t == nullptr) {
      return fail(errc::invalid_argument, "--init-model " + path + " has no tensor '" + want.name + "'");
    }
    if (t->dtype != algorithms::st_dtype::f32 || t->shape != want.shape) {
      return fail(errc::invalid_argument, "--init-model " + path + ": tensor '" + want.name + "' is " +
                                              std::string{algorithms::to_string(t->dtype)} + " " +
                                              shape_text(t->shape) + ", the spec says F32 " + shape_text(want.shape));
    }
    append_floats(out, *t);
  }
  return out;
}

}  // namespace

expected<external_model> load_external_model(const external_options& o) {
  external_model m;
  m.size = static_cast<std::size_t>(o.model_size);
  if (!o.model_spec.empty()) {
    auto spec = read_spec(o.model_spec);
    PRSGD_TRY(spec);
    m.tensors = std::move(*spec);
    std::size_t total = 0;
    for (const auto& t : m.tensors) {
      total += elements(t.shape);
    }
    if (m.size != 0 && m.size != total) {
      return fail(errc::invalid_argument, "--model-spec " + o.model_spec + " describes " + std::to_string(total) +
                                              " floats, --model-size says " + std::to_string(m.size));
    }
    m.size = total;
  }
  if (!o.init_model.empty()) {
    auto initial = read_initial(o.init_model, m.tensors);
    PRSGD_TRY(initial);
    if (initial->size() != m.size) {
      return fail(errc::invalid_argument, "--init-model " + o.init_model + " holds " + std::to_string(initial->size()) +
                                              " floats, the model has " + std::to_string(m.size));
    }
    m.initial = std::move(*initial);
  }
  return m;
}

std::string external_model_fingerprint(std::size_t size) {
  return std::string{external_model_name} + " params=" + std::to_string(size);
}

std::string external_data_fingerprint(std::uint64_t train_size) {
  return std::string{external_model_name} + " n=" + std::to_string(train_size);
}

expected<void> write_external(const std::string& path, const external_model& model, std::span<const float> params,
                              std::map<std::string, std::string> metadata) {
  if (params.size() != model.size) {
    return fail(errc::invalid_argument,
                "the model has " + std::to_string(params.size()) + " floats, expected " + std::to_string(model.size));
  }
  algorithms::st_file file;
  file.metadata = std::move(metadata);
  const auto add = [&](std::string name, std::vector<std::int64_t> shape, std::size_t offset) {
    algorithms::st_tensor t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    const std::size_t n = elements(t.shape);
    t.data.resize(n * sizeof(float));
    std::memcpy(t.data.data(), params.data() + offset, t.data.size());
    file.tensors.push_back(std::move(t));
    return offset + n;
  };
  if (model.tensors.empty()) {
    add("flat", {static_cast<std::int64_t>(model.size)}, 0);
  } else {
    std::size_t offset = 0;
    for (const auto& t : model.tensors) {
      offset = add(t.name, t.shape, offset);
    }
  }
  return algorithms::write_safetensors(path, file);
}

}  // namespace prsgd::cli
