// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <filesystem>
#include <vector>

#include "prsgd/common/expected.hpp"

/// Whole-file reads and crash-safe writes, shared by checkpoints and exported models.
namespace prsgd {

/// Writes `bytes` to `path` atomically: a temp file in the same directory, fsync, rename, fsync of the
/// directory. A reader sees the old file or the new one, never a mix. The temp file has a name no other
/// writer uses (process id, a counter and random bits), is created with O_EXCL | O_NOFOLLOW (so a file or
/// symlink planted under that name is never written through) and gets permission bits `mode` (before the
/// umask). Returns io_error on any failure (the temp file is removed).
[[nodiscard]] expected<void> write_file_atomically(const std::filesystem::path& path,
                                                   const std::vector<unsigned char>& bytes, unsigned mode = 0644);

/// Reads the whole of `path`. Returns io_error naming the file when it cannot be opened or read.
[[nodiscard]] expected<std::vector<unsigned char>> read_whole_file(const std::filesystem::path& path);

}  // namespace prsgd
