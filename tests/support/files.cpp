// SPDX-License-Identifier: Apache-2.0
#include "files.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace prsgd::test {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in{path, std::ios::binary};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) {
      out.push_back(line);
    }
  }
  return out;
}

scratch_dir::scratch_dir(const std::string& prefix, bool keep_on_failure) : keep_on_failure_(keep_on_failure) {
  static std::atomic<int> made{0};  // several directories in one test (or none running) stay apart
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  path_ = std::filesystem::temp_directory_path() /
          (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(made++) + "-" +
           (info != nullptr ? info->name() : "no-test"));
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

scratch_dir::~scratch_dir() {
  if (keep_on_failure_ && ::testing::Test::HasFailure()) {
    std::fprintf(stderr, "files kept in %s\n", path_.c_str());
    return;
  }
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace prsgd::test
