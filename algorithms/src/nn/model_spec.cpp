// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/model_spec.hpp"

#include <charconv>

namespace prsgd::algorithms {

namespace {

constexpr int max_number = 65536;
constexpr std::size_t max_params = std::size_t{1} << 28U;

std::string shape_text(shape3 s) {
  return std::to_string(s.channels) + "x" + std::to_string(s.height) + "x" + std::to_string(s.width);
}

/// Reads a number in 1..max_number at the front of `s`, advancing it; nullopt if there is none.
std::optional<int> take_number(std::string_view& s) {
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end == s.data() || v < 1 || v > max_number) {
    return std::nullopt;
  }
  s.remove_prefix(static_cast<std::size_t>(end - s.data()));
  return v;
}

/// Parses "c16k5", "c16k5s2p2" etc.; `t` starts after the 'c'.
std::optional<spec_layer> conv(std::string_view t) {
  spec_layer l{spec_layer_kind::conv};
  auto n = take_number(t);
  if (!n || t.empty() || t.front() != 'k') {
    return std::nullopt;
  }
  t.remove_prefix(1);
  auto k = take_number(t);
  if (!k) {
    return std::nullopt;
  }
  l.out = *n;
  l.kernel = *k;
  if (!t.empty() && t.front() == 's') {
    t.remove_prefix(1);
    auto s = take_number(t);
    if (!s) {
      return std::nullopt;
    }
    l.stride = *s;
  }
  if (!t.empty() && t.front() == 'p') {
    t.remove_prefix(1);
    if (t == "0") {
      return l;
    }
    auto p = take_number(t);
    if (!p) {
      return std::nullopt;
    }
    l.padding = *p;
  }
  return t.empty() ? std::optional<spec_layer>{l} : std::nullopt;
}

std::optional<spec_layer> cnn_layer(std::string_view t) {
  if (t == "r") {
    return spec_layer{spec_layer_kind::relu};
  }
  if (t == "bn") {
    return spec_layer{spec_layer_kind::batch_norm};
  }
  if (t == "gap") {
    return spec_layer{spec_layer_kind::global_avg_pool};
  }
  if (t.empty()) {
    return std::nullopt;
  }
  const char head = t.front();
  t.remove_prefix(1);
  if (head == 'c') {
    return conv(t);
  }
  if (head == 'm' || head == 'f') {
    auto n = take_number(t);
    if (!n || !t.empty()) {
      return std::nullopt;
    }
    spec_layer l{head == 'm' ? spec_layer_kind::max_pool : spec_layer_kind::linear};
    (head == 'm' ? l.kernel : l.out) = *n;
    return l;
  }
  return std::nullopt;
}

std::vector<std::string_view> split_dashes(std::string_view s) {
  std::vector<std::string_view> out;
  for (;;) {
    const auto dash = s.find('-');
    out.push_back(s.substr(0, dash));
    if (dash == std::string_view::npos) {
      return out;
    }
    s.remove_prefix(dash + 1);
  }
}

}  // namespace

bool is_model_spec(std::string_view name) noexcept { return name.starts_with("mlp:") || name.starts_with("cnn:"); }

expected<model_spec> parse_model_spec(std::string_view name) {
  const std::string quoted = "model spec '" + std::string(name) + "'";
  if (!is_model_spec(name)) {
    return fail(errc::invalid_argument, quoted + " must start with mlp: or cnn:");
  }
  model_spec out;
  out.name = std::string(name);
  const bool mlp = name.starts_with("mlp:");
  const auto tokens = split_dashes(name.substr(4));
  if (mlp) {
    if (tokens.size() < 2) {
      return fail(errc::invalid_argument, quoted + ": an mlp needs at least IN-OUT, e.g. mlp:64-128-10");
    }
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string_view t = tokens[i];
      auto n = take_number(t);
      if (!n || !t.empty()) {
        return fail(errc::invalid_argument, quoted + ": '" + std::string(tokens[i]) + "' is not a layer size in 1.." +
                                                std::to_string(max_number));
      }
      if (i == 0) {
        out.input_size = *n;
        continue;
      }
      if (i > 1) {
        out.layers.push_back({spec_layer_kind::relu});
      }
      out.layers.push_back({spec_layer_kind::linear, *n});
    }
    return out;
  }
  for (const auto t : tokens) {
    auto l = cnn_layer(t);
    if (!l) {
      return fail(errc::invalid_argument,
                  quoted + ": bad layer '" + std::string(t) +
                      "' (layers: cNkK[sS][pP] conv, r ReLU, mK max pool, bn batch norm, gap global average pool, "
                      "fN fully connected)");
    }
    out.layers.push_back(*l);
  }
  if (out.layers.back().kind != spec_layer_kind::linear) {
    return fail(errc::invalid_argument, quoted + ": the last layer must be fN, N = the number of classes");
  }
  return out;
}

expected<std::unique_ptr<model>> make_spec_model(const model_spec& spec, const model_config& config) {
  const std::string quoted = "model '" + spec.name + "'";
  const shape3 in = config.input;
  if (in.channels <= 0 || in.height <= 0 || in.width <= 0 || config.num_classes <= 0 || spec.layers.empty()) {
    return fail(errc::invalid_argument, quoted + " needs a positive input shape and class count");
  }
  if (spec.input_size && static_cast<std::size_t>(*spec.input_size) != in.size()) {
    return fail(errc::invalid_argument, quoted + " takes " + std::to_string(*spec.input_size) +
                                            " inputs, but the data set's samples have " + std::to_string(in.size()) +
                                            " (" + shape_text(in) + ")");
  }
  const int out = spec.layers.back().out;
  if (out != config.num_classes) {
    return fail(errc::invalid_argument, quoted + " has " + std::to_string(out) + " outputs, but the data set has " +
                                            std::to_string(config.num_classes) + " classes");
  }
  // Walk the shapes first: the layer constructors treat a geometry that does not fit as a bug.
  shape3 s = in;
  std::size_t params = 0;
  for (const spec_layer& l : spec.layers) {
    const std::string at = quoted + ": at " + shape_text(s) + ", ";
    switch (l.kind) {
      case spec_layer_kind::conv: {
        if (s.height + 2 * l.padding < l.kernel || s.width + 2 * l.padding < l.kernel) {
          return fail(errc::invalid_argument, at + "a " + std::to_string(l.kernel) + "x" + std::to_string(l.kernel) +
                                                  " convolution with padding " + std::to_string(l.padding) +
                                                  " does not fit");
        }
        params += static_cast<std::size_t>(l.out) *
                  (static_cast<std::size_t>(s.channels) * static_cast<std::size_t>(l.kernel * l.kernel) + 1);
        s = {l.out, (s.height + 2 * l.padding - l.kernel) / l.stride + 1,
             (s.width + 2 * l.padding - l.kernel) / l.stride + 1};
        break;
      }
      case spec_layer_kind::max_pool:
        if (s.height < l.kernel || s.width < l.kernel) {
          return fail(errc::invalid_argument,
                      at + "a " + std::to_string(l.kernel) + "x" + std::to_string(l.kernel) + " max pool does not fit");
        }
        s = {s.channels, s.height / l.kernel, s.width / l.kernel};
        break;
      case spec_layer_kind::linear:
        params += (s.size() + 1) * static_cast<std::size_t>(l.out);
        s = {l.out, 1, 1};
        break;
      case spec_layer_kind::batch_norm: params += 2 * static_cast<std::size_t>(s.channels); break;
      case spec_layer_kind::global_avg_pool: s = {s.channels, 1, 1}; break;
      case spec_layer_kind::relu: break;
    }
    if (params > max_params) {
      return fail(errc::invalid_argument,
                  quoted + " would have more than " + std::to_string(max_params) + " parameters");
    }
  }
  network_builder b(in);
  for (const spec_layer& l : spec.layers) {
    switch (l.kind) {
      case spec_layer_kind::conv: b.conv2d(l.out, l.kernel, l.stride, l.padding); break;
      case spec_layer_kind::relu: b.relu(); break;
      case spec_layer_kind::max_pool: b.max_pool(l.kernel); break;
      case spec_layer_kind::batch_norm: b.batch_norm(); break;
      case spec_layer_kind::global_avg_pool: b.global_avg_pool(); break;
      case spec_layer_kind::linear: b.linear(l.out); break;
    }
  }
  return model::make(spec.name, in, config.num_classes, b.take(), config.seed);
}

}  // namespace prsgd::algorithms
