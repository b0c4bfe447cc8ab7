// SPDX-License-Identifier: Apache-2.0
// The shared Fashion-MNIST byte cache under concurrency: two processes that start loading at the same moment
// build the cache file once between them (the other waits for the lock, then maps the finished file), and
// both see the same data. Uses the Fashion-MNIST files of the host (Debian's dataset-fashion-mnist, or
// $PRSGD_FMNIST_DIR).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "files.hpp"
#include "prsgd/algorithms/fashion_mnist.hpp"

namespace {

using namespace prsgd::algorithms;
namespace fs = std::filesystem;

// Exit statuses of a racing child.
constexpr int built_it = 10;
constexpr int mapped_it = 11;

// In the child: waits for the parent's go (one byte on `go`), loads, exits with what happened.
[[noreturn]] void race(int go, const fs::path& cache) {
  char byte = 0;
  if (::read(go, &byte, 1) != 1) {
    ::_exit(2);
  }
  auto loaded = load_fashion_mnist_shared({}, split::test, cache);
  if (!loaded || loaded->cache_file.empty() || loaded->data.size() != 10000) {
    ::_exit(1);
  }
  ::_exit(loaded->built ? built_it : mapped_it);
}

TEST(ByteCacheRaceTest, TwoProcessesBuildTheCacheOnce) {
  if (!fs::exists(fs::path{fashion_mnist_default_dir()} / "t10k-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "no Fashion-MNIST files in " << fashion_mnist_default_dir();
  }
  prsgd::test::scratch_dir scratch{"prsgd-byte-cache-race"};
  const fs::path cache = scratch.path() / "cache";
  for (int attempt = 0; attempt < 3; ++attempt) {
    fs::remove_all(cache);
    int pipe_fds[2];
    ASSERT_EQ(::pipe(pipe_fds), 0);
    std::vector<pid_t> children;
    for (int i = 0; i < 2; ++i) {
      const pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        ::close(pipe_fds[1]);
        race(pipe_fds[0], cache);
      }
      children.push_back(pid);
    }
    ::close(pipe_fds[0]);
    const char go[2] = {'g', 'g'};
    ASSERT_EQ(::write(pipe_fds[1], go, 2), 2);  // both start now
    ::close(pipe_fds[1]);
    std::vector<int> statuses;
    for (const pid_t pid : children) {
      int status = 0;
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      ASSERT_TRUE(WIFEXITED(status));
      statuses.push_back(WEXITSTATUS(status));
    }
    std::sort(statuses.begin(), statuses.end());
    EXPECT_EQ(statuses, (std::vector<int>{built_it, mapped_it})) << "attempt " << attempt;
    // The file they agreed on is whole: a third load maps it.
    auto third = load_fashion_mnist_shared({}, split::test, cache);
    ASSERT_TRUE(third.has_value()) << third.error().message();
    EXPECT_FALSE(third->built);
    auto floats = load_fashion_mnist({}, split::test);
    ASSERT_TRUE(floats.has_value());
    EXPECT_EQ(third->data.labels, floats->labels);
    // Nothing but the cache, its lock and no temporary file is left behind.
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(cache)) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"fashion-mnist-test.u8", "fashion-mnist-test.u8.lock"}));
  }
}

}  // namespace
