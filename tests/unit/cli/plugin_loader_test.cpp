// SPDX-License-Identifier: Apache-2.0
#include "prsgd/cli/plugin_loader.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

#include "prsgd/algorithms/dataset_registry.hpp"
#include "prsgd/algorithms/model_registry.hpp"

namespace {

using prsgd::errc;
using prsgd::cli::load_plugin;
using prsgd::cli::load_plugins;

TEST(PluginLoaderTest, LoadsGoodPluginAndRecordsWhatItProvides) {
  int registry_sentinel = 42;
  auto p = load_plugin(PRSGD_TEST_PLUGIN_GOOD, &registry_sentinel);
  ASSERT_TRUE(p.has_value()) << p.error().message();
  EXPECT_EQ(p->abi_version, PRSGD_PLUGIN_ABI_VERSION);
  ASSERT_EQ(p->provides.size(), 1u);  // the duplicate announcement was refused
  EXPECT_EQ(p->provides[0].first, "model");
  EXPECT_EQ(p->provides[0].second, "test-tiny-mlp");
  EXPECT_EQ(registry_sentinel, 43) << "the host's registry pointer did not reach the plugin";
}

TEST(PluginLoaderTest, PluginRegistersModelInHostRegistry) {
  prsgd::algorithms::model_registry registry;
  auto p = load_plugin(PRSGD_TEST_PLUGIN_REGISTERS_MODEL, &registry);
  ASSERT_TRUE(p.has_value()) << p.error().message();
  ASSERT_TRUE(registry.contains("plugin-mlp"));
  ASSERT_EQ(p->provides.size(), 1u);
  EXPECT_EQ(p->provides[0].second, "plugin-mlp");
  auto m = registry.make("plugin-mlp", prsgd::algorithms::model_config{});
  ASSERT_TRUE(m.has_value()) << m.error().message();
  EXPECT_NE(*m, nullptr);

  // Loading it again into the same registry is refused with the registry's own error.
  auto again = load_plugin(PRSGD_TEST_PLUGIN_REGISTERS_MODEL, &registry);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, errc::handler_failed);
  EXPECT_NE(again.error().context.find("already_exists"), std::string::npos) << again.error().context;

  // Without a registry the plugin refuses, and says why.
  auto none = load_plugin(PRSGD_TEST_PLUGIN_REGISTERS_MODEL, nullptr);
  ASSERT_FALSE(none.has_value());
  EXPECT_NE(none.error().context.find("model registry"), std::string::npos) << none.error().context;
}

TEST(PluginLoaderTest, PluginRegistersDataSetInHostRegistry) {
  prsgd::algorithms::dataset_registry datasets;
  auto p = load_plugin(PRSGD_TEST_PLUGIN_REGISTERS_DATASET, nullptr, &datasets);
  ASSERT_TRUE(p.has_value()) << p.error().message();
  ASSERT_EQ(p->provides.size(), 1u);
  EXPECT_EQ(p->provides[0], (std::pair<std::string, std::string>{"dataset", "plugin-set"}));
  prsgd::algorithms::dataset_request r;
  r.parts = prsgd::algorithms::dataset_parts::test_and_train_size;
  auto d = datasets.load("plugin-set", r);
  ASSERT_TRUE(d.has_value()) << d.error().message();
  EXPECT_EQ(d->train_size, 4u);
  ASSERT_TRUE(d->test);
  EXPECT_EQ(d->test->labels, (std::vector<std::int32_t>{0, 0}));

  // Without a data set registry the plugin refuses, and says why.
  auto none = load_plugin(PRSGD_TEST_PLUGIN_REGISTERS_DATASET, nullptr, nullptr);
  ASSERT_FALSE(none.has_value());
  EXPECT_NE(none.error().context.find("data set registry"), std::string::npos) << none.error().context;
}

TEST(PluginLoaderTest, KeepsGoodPluginLoadedAfterInit) {
  ASSERT_TRUE(load_plugin(PRSGD_TEST_PLUGIN_GOOD).has_value());
  void* h = ::dlopen(PRSGD_TEST_PLUGIN_GOOD, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(h, nullptr) << "a plugin that initialised must stay loaded";
  auto calls = reinterpret_cast<int (*)()>(::dlsym(h, "prsgd_test_plugin_init_calls"));  // NOLINT
  ASSERT_NE(calls, nullptr);
  EXPECT_GE(calls(), 1);
  ::dlclose(h);  // drops only the reference taken by RTLD_NOLOAD
}

TEST(PluginLoaderTest, RefusesLibraryWithoutEntryPoint) {
  auto p = load_plugin(PRSGD_TEST_PLUGIN_NO_ENTRY);
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().code, errc::invalid_argument);
  EXPECT_NE(p.error().context.find("prsgd_plugin_init"), std::string::npos) << p.error().context;
  EXPECT_EQ(::dlopen(PRSGD_TEST_PLUGIN_NO_ENTRY, RTLD_NOW | RTLD_NOLOAD), nullptr) << "refused plugin stays loaded";
}

TEST(PluginLoaderTest, RefusesWrongAbiVersionWithoutCallingInit) {
  auto p = load_plugin(PRSGD_TEST_PLUGIN_WRONG_ABI);  // its init aborts if called
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().code, errc::unsupported);
  EXPECT_NE(p.error().context.find("ABI version " + std::to_string(PRSGD_PLUGIN_ABI_VERSION + 1)), std::string::npos)
      << p.error().context;
}

TEST(PluginLoaderTest, ReportsInitFailureWithPluginMessage) {
  auto p = load_plugin(PRSGD_TEST_PLUGIN_FAILING_INIT);
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().code, errc::handler_failed);
  EXPECT_NE(p.error().context.find("needs a GPU that is not there"), std::string::npos) << p.error().context;
  EXPECT_NE(p.error().context.find("code 7"), std::string::npos) << p.error().context;
}

TEST(PluginLoaderTest, RefusesMissingFileAndNonLibrary) {
  auto missing = load_plugin("/nonexistent/plugin.so");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, errc::not_found);

  auto not_a_library = load_plugin("/etc/hostname");
  ASSERT_FALSE(not_a_library.has_value());
  EXPECT_EQ(not_a_library.error().code, errc::decode_failed);
}

TEST(PluginLoaderTest, LoadPluginsStopsAtFirstFailure) {
  auto all = load_plugins({PRSGD_TEST_PLUGIN_GOOD, PRSGD_TEST_PLUGIN_WRONG_ABI});
  ASSERT_FALSE(all.has_value());
  EXPECT_EQ(all.error().code, errc::unsupported);
  auto good = load_plugins({PRSGD_TEST_PLUGIN_GOOD});
  ASSERT_TRUE(good.has_value());
  EXPECT_EQ(good->size(), 1u);
}

}  // namespace
