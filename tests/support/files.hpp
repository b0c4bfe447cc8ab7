// SPDX-License-Identifier: Apache-2.0
// Files for tests: a scratch directory per test, reading a file back, splitting it into lines.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace prsgd::test {

/// Returns the whole file ("" when it cannot be read).
[[nodiscard]] std::string read_file(const std::filesystem::path& path);

/// Returns the non-empty lines of `text`.
[[nodiscard]] std::vector<std::string> lines_of(const std::string& text);

/// Owns a fresh directory <tmp>/<prefix>-<pid>-<n>-<current test name>, removed with everything inside on
/// destruction; with `keep_on_failure`, a failed test's directory is kept and named on stderr.
/// Not thread-safe; made and destroyed by one test thread.
class scratch_dir {
 public:
  explicit scratch_dir(const std::string& prefix, bool keep_on_failure = false);
  ~scratch_dir();
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;

  /// Returns the directory.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// Returns the path of `name` inside, as a string.
  [[nodiscard]] std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
  bool keep_on_failure_;
};

}  // namespace prsgd::test
