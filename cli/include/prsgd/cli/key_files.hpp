// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "prsgd/cli/options.hpp"
#include "prsgd/common/expected.hpp"
#include "prsgd/transport/transport.hpp"

namespace prsgd::cli {

/// Returns true when `key` is a 40-character Z85 text (a 32-byte CURVE key).
[[nodiscard]] bool is_z85_key(const std::string& key);

/// Names the two files `prsgd keygen` writes.
struct key_file_paths {
  /// `<out_dir>/<name>.public`, mode 0644.
  std::string public_path;
  /// `<out_dir>/<name>.secret`, mode 0600.
  std::string secret_path;
};

/// Returns where `o` says the key files go.
[[nodiscard]] key_file_paths key_paths(const keygen_options& o);

/// Writes a key pair as two one-line Z85 files (creating out_dir). The secret file is created with mode 0600.
/// Returns invalid_argument for a key that is not Z85, already_exists when a file exists and `o.force` is false,
/// io_error when a file cannot be written.
[[nodiscard]] expected<key_file_paths> write_key_files(const keygen_options& o, const std::string& public_z85,
                                                       const std::string& secret_z85);

/// Reads a key file written by write_key_files (surrounding whitespace ignored). Returns not_found, io_error or
/// decode_failed (not a 40-character Z85 key).
[[nodiscard]] expected<std::string> read_key_file(const std::string& path);

/// Holds the CURVE settings a process reads from its --curve-* key files.
struct curve_setup {
  /// This process's key pair and the clients it lets in; empty when it runs without CURVE.
  std::optional<curve_options> own;
  /// The public key of the servers it connects to: --curve-server-key, else its own public key (a server
  /// such as the averager reaching the head, which share the server key pair). "" without CURVE.
  std::string server_public_key;
};

/// Returns the key files an allow-list entry (`--curve-allow`) names: the file itself, or every `*.public`
/// file of a directory, sorted. Fails with not_found for a directory without any.
[[nodiscard]] expected<std::vector<std::string>> allow_list_files(const std::string& path);

/// Reads the key files named in `sec` (an allow-list directory contributes each of its .public files).
/// Fails like read_key_file.
[[nodiscard]] expected<curve_setup> load_curve(const security_options& sec);

}  // namespace prsgd::cli
