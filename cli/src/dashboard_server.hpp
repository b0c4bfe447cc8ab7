// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "prsgd/common/expected.hpp"

namespace prsgd::cli {

/// Keeps what /api/metrics serves: the metrics lines of the rounds closed so far and the event lines
/// (operator requests), as the averager wrote them. Thread-safe: the averager's strand adds, the HTTP
/// thread reads.
class metrics_feed {
 public:
  /// Adds the JSON line of round `round`.
  void add_round(std::uint64_t round, std::string json);
  /// Adds an event line.
  void add_event(std::string json);
  /// Returns {"rounds":[lines of rounds >= since],"events":[every event line],"next":<last round + 1>}.
  [[nodiscard]] std::string json_since(std::uint64_t since) const;

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<std::uint64_t, std::string>> rounds_;
  std::vector<std::string> events_;
};

/// Where the dashboard listens: an IPv4/IPv6 address and a port (0: the system picks one).
struct http_bind {
  std::string address = "127.0.0.1";
  std::uint16_t port = 0;
};

/// Parses --http-bind: "PORT" (127.0.0.1), "ADDR:PORT" or "[V6ADDR]:PORT". invalid_argument otherwise.
[[nodiscard]] expected<http_bind> parse_http_bind(const std::string& text);

/// What the dashboard server reads and (with a token) asks for.
struct dashboard_sources {
  /// Returns the job's status as JSON (actors::to_json); empty when the averager cannot answer.
  std::function<std::string()> status_json;
  /// The metrics lines.
  std::shared_ptr<const metrics_feed> metrics;
  /// Carries out an operator request and returns {ok, one-line result}. Only called with the token.
  std::function<std::pair<bool, std::string>(const std::string& action, const std::string& arg)> control;
  /// The bearer token that allows POST /api/control (empty: the server is read-only).
  std::string token;
};

/// Serves the averager's dashboard over HTTP/1.1 on Boost.Asio, on a thread of its own:
///   GET /                      the page (HTML, JS and CSS in the binary; no external resources)
///   GET /api/status            the job status as JSON (what `prsgd status --json` prints)
///   GET /api/metrics?since=R   the metrics lines of rounds >= R and the event lines
///   POST /api/control          action=ACTION&arg=ARG with "Authorization: Bearer TOKEN" (only with a token)
/// One request per connection (Connection: close); requests are small and bounded (8 KiB).
class dashboard_server {
 public:
  /// Binds `where` and starts serving. Returns the bind error (address in use, bad address).
  [[nodiscard]] static expected<std::unique_ptr<dashboard_server>> start(const http_bind& where,
                                                                         dashboard_sources sources);
  dashboard_server(const dashboard_server&) = delete;
  dashboard_server& operator=(const dashboard_server&) = delete;
  /// Stops serving and joins the thread.
  ~dashboard_server();

  /// Returns the URL it serves, e.g. "http://127.0.0.1:43117/".
  [[nodiscard]] const std::string& url() const noexcept { return url_; }

 private:
  struct impl;
  explicit dashboard_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
  std::string url_;
};

/// Reads a bearer token file (--http-token-file): its content without surrounding whitespace, at least 16
/// characters of printable ASCII. Returns not_found / io_error, or invalid_argument for a short or odd token.
[[nodiscard]] expected<std::string> read_token_file(const std::string& path);

/// Returns the dashboard page (one self-contained HTML document).
[[nodiscard]] const std::string& dashboard_page();

}  // namespace prsgd::cli
