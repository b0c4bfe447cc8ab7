// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <filesystem>
#include <vector>

#include "prsgd/common/expected.hpp"

/// Whole-file reads and crash-safe writes, shared by checkpoints and exported models.
namespace prsgd {

/// Writes `bytes` to `path` atomically: temp file in the same directory, fsync, rename, fsync directory.
/// A reader sees the old file or the new one, never a mix. Returns io_error on any failure (the temp
/// file is removed).
[[nodiscard]] expected<void> write_file_atomically(const std::filesystem::path& path,
                                                   const std::vector<unsigned char>& bytes);

/// Reads the whole of `path`. Returns io_error naming the file when it cannot be opened or read.
[[nodiscard]] expected<std::vector<unsigned char>> read_whole_file(const std::filesystem::path& path);

}  // namespace prsgd
