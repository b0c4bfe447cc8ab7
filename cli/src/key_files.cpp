// SPDX-License-Identifier: Apache-2.0
#include "prsgd/cli/key_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

namespace prsgd::cli {
namespace {

constexpr std::string_view z85_alphabet =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

// Writes `text` + "\n" to `path` with `mode`, refusing to replace an existing file unless `force`.
expected<void> write_one(const std::string& path, const std::string& text, mode_t mode, bool force) {
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (force ? O_TRUNC : O_EXCL);
  if (force) {
    ::unlink(path.c_str());  // a fresh inode gets `mode` even if the old file was wider
  }
  const int fd = ::open(path.c_str(), flags, mode);
  if (fd < 0) {
    if (errno == EEXIST) {
      return fail(errc::already_exists, "'" + path + "' exists; use --force to overwrite it");
    }
    return fail(errc::io_error, "cannot create '" + path + "': " + std::strerror(errno));
  }
  const std::string line = text + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) {
    return fail(errc::io_error, "cannot write '" + path + "': " + std::strerror(err));
  }
  return {};
}

}  // namespace

bool is_z85_key(const std::string& key) {
  return key.size() == 40 && key.find_first_not_of(z85_alphabet) == std::string::npos;
}

key_file_paths key_paths(const keygen_options& o) {
  const std::filesystem::path dir{o.out_dir};
  return {(dir / (o.name + ".public")).string(), (dir / (o.name + ".secret")).string()};
}

expected<key_file_paths> write_key_files(const keygen_options& o, const std::string& public_z85,
                                         const std::string& secret_z85) {
  if (!is_z85_key(public_z85) || !is_z85_key(secret_z85)) {
    return fail(errc::invalid_argument, "a CURVE key must be 40 Z85 characters");
  }
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) {
    return fail(errc::io_error, "cannot create '" + o.out_dir + "': " + ec.message());
  }
  const auto paths = key_paths(o);
  if (!o.force) {
    for (const auto* p : {&paths.public_path, &paths.secret_path}) {
      if (std::filesystem::exists(*p, ec)) {
        return fail(errc::already_exists, "'" + *p + "' exists; use --force to overwrite it");
      }
    }
  }
  PRSGD_TRY(write_one(paths.secret_path, secret_z85, 0600, o.force));
  PRSGD_TRY(write_one(paths.public_path, public_z85, 0644, o.force));
  return paths;
}

expected<std::string> read_key_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return fail(errc::not_found, "key file '" + path + "' does not exist");
  }
  std::ifstream in{path};
  if (!in) {
    return fail(errc::io_error, "cannot read key file '" + path + "'");
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  std::string text = buf.str();
  const auto first = text.find_first_not_of(" \t\r\n");
  const auto last = text.find_last_not_of(" \t\r\n");
  text = first == std::string::npos ? std::string{} : text.substr(first, last - first + 1);
  if (!is_z85_key(text)) {
    return fail(errc::decode_failed, "key file '" + path + "' does not hold a 40-character Z85 key");
  }
  return text;
}

expected<std::vector<std::string>> allow_list_files(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) {
    return std::vector<std::string>{path};
  }
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(path, ec)) {
    if (e.path().extension() == ".public" && e.is_regular_file(ec)) {
      files.push_back(e.path().string());
    }
  }
  if (ec) {
    return fail(errc::io_error, "cannot list '" + path + "': " + ec.message());
  }
  if (files.empty()) {
    return fail(errc::not_found, "key directory '" + path + "' holds no .public files");
  }
  std::sort(files.begin(), files.end());
  return files;
}

expected<curve_setup> load_curve(const security_options& sec) {
  curve_setup out;
  if (sec.curve_public_key.empty()) {
    return out;
  }
  auto pub = read_key_file(sec.curve_public_key);
  PRSGD_TRY(pub);
  auto secret = read_key_file(sec.curve_secret_key);
  PRSGD_TRY(secret);
  curve_options curve;
  curve.public_key = *pub;
  curve.secret_key = *secret;
  for (const auto& entry : sec.curve_allow) {
    auto files = allow_list_files(entry);
    PRSGD_TRY(files);
    for (const auto& file : *files) {
      auto key = read_key_file(file);
      PRSGD_TRY(key);
      curve.allowed_client_keys.push_back(*key);
    }
  }
  out.server_public_key = curve.public_key;
  if (!sec.curve_server_key.empty()) {
    auto key = read_key_file(sec.curve_server_key);
    PRSGD_TRY(key);
    out.server_public_key = *key;
  }
  out.own = std::move(curve);
  return out;
}

}  // namespace prsgd::cli
