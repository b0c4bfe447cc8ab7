// SPDX-License-Identifier: Apache-2.0
// Model spec strings (mlp:..., cnn:...): the parser on good and bad strings, and the checks against the data.
#include "prsgd/algorithms/model_spec.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "prsgd/algorithms/models.hpp"

namespace prsgd::algorithms {
namespace {

using kind = spec_layer_kind;

std::string parse_error(const std::string& spec) {
  auto s = parse_model_spec(spec);
  return s ? std::string{"(parsed)"} : s.error().context;
}

std::string make_error(const std::string& spec, shape3 in, int classes) {
  auto s = parse_model_spec(spec);
  if (!s) {
    return "(bad spec) " + s.error().context;
  }
  auto m = make_spec_model(*s, {in, classes, 1});
  return m ? std::string{"(built)"} : m.error().context;
}

TEST(ModelSpecTest, ParsesMlpSpecs) {
  auto s = parse_model_spec("mlp:64-128-10");
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(s->name, "mlp:64-128-10");
  EXPECT_EQ(s->input_size, 64);
  EXPECT_EQ(s->layers, (std::vector<spec_layer>{{kind::linear, 128}, {kind::relu}, {kind::linear, 10}}));
  s = parse_model_spec("mlp:2-3");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->layers, (std::vector<spec_layer>{{kind::linear, 3}}));
}

TEST(ModelSpecTest, ParsesCnnSpecs) {
  auto s = parse_model_spec("cnn:c16k5p2-r-m2-c32k3s2p1-bn-r-gap-f10");
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_FALSE(s->input_size);
  EXPECT_EQ(s->layers, (std::vector<spec_layer>{{kind::conv, 16, 5, 1, 2},
                                                {kind::relu},
                                                {kind::max_pool, 0, 2},
                                                {kind::conv, 32, 3, 2, 1},
                                                {kind::batch_norm},
                                                {kind::relu},
                                                {kind::global_avg_pool},
                                                {kind::linear, 10}}));
  ASSERT_TRUE(parse_model_spec("cnn:f3"));
  ASSERT_TRUE(parse_model_spec("cnn:c4k3p0-f3"));
}

TEST(ModelSpecTest, RefusesBadStringsNamingTheToken) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"mlp:64", "at least IN-OUT"},
      {"mlp:", "at least IN-OUT"},
      {"mlp:64-x-10", "'x' is not a layer size"},
      {"mlp:64--10", "'' is not a layer size"},
      {"mlp:64-0-10", "'0' is not a layer size"},
      {"mlp:64-128-10-", "'' is not a layer size"},
      {"mlp:64-99999999-10", "is not a layer size in 1..65536"},
      {"mlp:64-1.5-10", "'1.5' is not a layer size"},
      {"cnn:c16-f10", "bad layer 'c16'"},
      {"cnn:c16k-f10", "bad layer 'c16k'"},
      {"cnn:c16k5q2-f10", "bad layer 'c16k5q2'"},
      {"cnn:c16k5p2s1-f10", "bad layer 'c16k5p2s1'"},
      {"cnn:relu-f10", "bad layer 'relu'"},
      {"cnn:m-f10", "bad layer 'm'"},
      {"cnn:c8k3-r", "the last layer must be fN"},
      {"cnn:", "bad layer ''"},
      {"rnn:64-10", "must start with mlp: or cnn:"},
  };
  for (const auto& [spec, needle] : cases) {
    const auto e = parse_error(spec);
    EXPECT_NE(e.find(needle), std::string::npos) << spec << " -> " << e;
    EXPECT_NE(e.find(spec), std::string::npos) << "the error names the spec: " << e;
  }
}

TEST(ModelSpecTest, ChecksTheSpecAgainstTheData) {
  EXPECT_EQ(make_error("mlp:64-128-10", {1, 8, 8}, 10), "(built)");
  EXPECT_EQ(make_error("mlp:784-10", {1, 8, 8}, 10),
            "model 'mlp:784-10' takes 784 inputs, but the data set's samples have 64 (1x8x8)");
  EXPECT_EQ(make_error("mlp:64-10-5", {1, 8, 8}, 10),
            "model 'mlp:64-10-5' has 5 outputs, but the data set has 10 classes");
  EXPECT_EQ(make_error("cnn:c8k3-r-m2-f10", {1, 8, 8}, 10), "(built)");
  EXPECT_NE(make_error("cnn:c8k9-f10", {1, 8, 8}, 10).find("at 1x8x8, a 9x9 convolution with padding 0 does not fit"),
            std::string::npos);
  EXPECT_EQ(make_error("cnn:c8k9p1-f10", {1, 8, 8}, 10), "(built)");
  EXPECT_NE(make_error("cnn:c8k3-m4-m2-f10", {1, 8, 8}, 10).find("at 8x1x1, a 2x2 max pool does not fit"),
            std::string::npos)
      << make_error("cnn:c8k3-m4-m2-f10", {1, 8, 8}, 10);
  EXPECT_NE(make_error("cnn:f3", {1, 8, 8}, 10).find("has 3 outputs"), std::string::npos);
  EXPECT_NE(make_error("mlp:65536-65536-65536-10", {1, 256, 256}, 10).find("parameters"), std::string::npos);
}

TEST(ModelSpecTest, CnnSpecRebuildsFmnistCnnExactly) {
  const model_config c{{1, 28, 28}, 10, 7};
  auto builtin = make_fmnist_cnn(c);
  auto spec = model_registry::instance().make("cnn:c16k5p2-r-m2-c32k5p2-r-m2-f10", c);
  ASSERT_TRUE(builtin && spec) << (spec ? "" : spec.error().message());
  EXPECT_EQ((*spec)->name(), "cnn:c16k5p2-r-m2-c32k5p2-r-m2-f10");
  ASSERT_EQ((*spec)->num_params(), (*builtin)->num_params());
  const auto a = (*spec)->params();
  const auto b = (*builtin)->params();
  EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << "same layers and seed, same initial values";
}

TEST(ModelSpecTest, RegistryResolvesSpecsItHasNotRegistered) {
  auto& r = model_registry::instance();
  EXPECT_TRUE(r.contains("mlp:4-3"));
  EXPECT_FALSE(r.contains("mlp:4"));
  EXPECT_FALSE(r.contains("gru:4-3"));
  auto m = r.make("mlp:4-8-3", {{1, 1, 4}, 3, 1});
  ASSERT_TRUE(m) << m.error().message();
  EXPECT_EQ((*m)->num_params(), 4U * 8 + 8 + 8 * 3 + 3);
  EXPECT_EQ(r.make("mlp:4-8-3", {{1, 1, 5}, 3, 1}).error().code, errc::invalid_argument);
  EXPECT_EQ(r.make("mlp:4-x", {{1, 1, 4}, 3, 1}).error().code, errc::invalid_argument);
  EXPECT_EQ(r.make("no-such-model", {}).error().code, errc::not_found);
}

}  // namespace
}  // namespace prsgd::algorithms
