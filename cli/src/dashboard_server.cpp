// SPDX-License-Identifier: Apache-2.0
// The averager's dashboard: a small HTTP/1.1 server on Boost.Asio (one io_context on one thread) that
// serves the page compiled into the binary and the JSON the page reads.
#include "dashboard_server.hpp"

#include <boost/asio.hpp>

#include <array>
#include <charconv>
#include <thread>

#include "prsgd/common/file_io.hpp"
#include "prsgd/common/json_quote.hpp"
#include "prsgd/common/log.hpp"

namespace prsgd::cli {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

void metrics_feed::add_round(std::uint64_t round, std::string json) {
  std::lock_guard lock(mu_);
  rounds_.emplace_back(round, std::move(json));
}

void metrics_feed::add_event(std::string json) {
  std::lock_guard lock(mu_);
  events_.push_back(std::move(json));
}

std::string metrics_feed::json_since(std::uint64_t since) const {
  std::lock_guard lock(mu_);
  std::string out = R"({"rounds":[)";
  bool first = true;
  std::uint64_t next = 0;
  for (const auto& [round, line] : rounds_) {
    next = std::max(next, round + 1);
    if (round < since) {
      continue;
    }
    if (!first) {
      out += ',';
    }
    first = false;
    out += line;
  }
  out += R"(],"events":[)";
  for (std::size_t i = 0; i < events_.size(); ++i) {
    if (i > 0) {
      out += ',';
    }
    out += events_[i];
  }
  out += R"(],"next":)" + std::to_string(std::max(next, since)) + "}";
  return out;
}

expected<http_bind> parse_http_bind(const std::string& text) {
  http_bind b;
  std::string port = text;
  if (const auto colon = text.rfind(':'); colon != std::string::npos) {
    b.address = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (b.address.size() >= 2 && b.address.front() == '[' && b.address.back() == ']') {
      b.address = b.address.substr(1, b.address.size() - 2);
    }
  }
  unsigned value = 0;
  const auto r = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || r.ec != std::errc{} || r.ptr != port.data() + port.size() || value > 65535) {
    return fail(errc::invalid_argument, "--http-bind takes PORT or ADDR:PORT (port 0..65535), not '" + text + "'");
  }
  boost::system::error_code ec;
  (void)asio::ip::make_address(b.address, ec);
  if (ec || b.address.empty()) {
    return fail(errc::invalid_argument, "--http-bind: '" + b.address + "' is not an IP address");
  }
  b.port = static_cast<std::uint16_t>(value);
  return b;
}

expected<std::string> read_token_file(const std::string& path) {
  auto bytes = read_whole_file(path);
  PRSGD_TRY(bytes);
  std::string token(bytes->begin(), bytes->end());
  const auto first = token.find_first_not_of(" \t\r\n");
  const auto last = token.find_last_not_of(" \t\r\n");
  token = first == std::string::npos ? std::string{} : token.substr(first, last - first + 1);
  if (token.size() < 16) {
    return fail(errc::invalid_argument, path + ": the token must have at least 16 characters");
  }
  for (char c : token) {
    if (c <= ' ' || c > '~') {
      return fail(errc::invalid_argument, path + ": the token must be printable ASCII without spaces");
    }
  }
  return token;
}

namespace {

constexpr std::size_t max_request_bytes = 8192;

std::string response(int code, const char* reason, const char* type, const std::string& body) {
  std::string out = "HTTP/1.1 " + std::to_string(code) + " " + reason + "\r\n";
  out += std::string{"Content-Type: "} + type + "\r\n";
  out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  out += "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n";
  out += body;
  return out;
}

std::string json_error(const std::string& why) { return R"({"error":)" + json_quote(why) + "}"; }

// Decodes application/x-www-form-urlencoded `text` field `name` ("" when absent).
std::string form_field(std::string_view text, std::string_view name) {
  while (!text.empty()) {
    const auto amp = text.find('&');
    const auto pair = text.substr(0, amp);
    text = amp == std::string_view::npos ? std::string_view{} : text.substr(amp + 1);
    const auto eq = pair.find('=');
    if (pair.substr(0, eq) != name) {
      continue;
    }
    std::string out;
    const auto v = eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1);
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i] == '+') {
        out += ' ';
      } else if (v[i] == '%' && i + 2 < v.size()) {
        unsigned byte = 0;
        std::from_chars(v.data() + i + 1, v.data() + i + 3, byte, 16);
        out += static_cast<char>(byte);
        i += 2;
      } else {
        out += v[i];
      }
    }
    return out;
  }
  return {};
}

// Compares in time independent of where the first difference is.
bool same_token(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

// One connection: read one request, answer, close.
class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket socket, const dashboard_sources& sources) : socket_(std::move(socket)), sources_(sources) {}

  void start() { read_head(); }

 private:
  void read_head() {
    auto self = shared_from_this();
    asio::async_read_until(socket_, buffer_, "\r\n\r\n", [self](boost::system::error_code ec, std::size_t n) {
      if (ec) {
        if (ec == asio::error::not_found) {
          self->reply(response(431, "Request Header Fields Too Large", "text/plain", "request too large\n"));
        }
        return;
      }
      self->parse_head(n);
    });
  }

  void parse_head(std::size_t head_bytes) {
    std::string head(asio::buffers_begin(buffer_.data()),
                     asio::buffers_begin(buffer_.data()) + static_cast<std::ptrdiff_t>(head_bytes));
    buffer_.consume(head_bytes);
    const auto line_end = head.find("\r\n");
    const std::string line = head.substr(0, line_end);
    const auto sp1 = line.find(' ');
    const auto sp2 = line.find(' ', sp1 + 1);
    if (sp1 == std::string::npos || sp2 == std::string::npos) {
      reply(response(400, "Bad Request", "text/plain", "bad request line\n"));
      return;
    }
    method_ = line.substr(0, sp1);
    target_ = line.substr(sp1 + 1, sp2 - sp1 - 1);
    std::size_t content_length = 0;
    std::size_t pos = line_end + 2;
    while (pos < head.size()) {
      const auto end = head.find("\r\n", pos);
      const std::string h = head.substr(pos, end - pos);
      pos = end == std::string::npos ? head.size() : end + 2;
      const auto colon = h.find(':');
      if (colon == std::string::npos) {
        continue;
      }
      std::string name = h.substr(0, colon);
      for (auto& c : name) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      }
      std::string value = h.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      if (name == "content-length") {
        std::from_chars(value.data(), value.data() + value.size(), content_length);
      } else if (name == "authorization") {
        authorization_ = value;
      }
    }
    if (content_length > max_request_bytes) {
      reply(response(413, "Payload Too Large", "text/plain", "body too large\n"));
      return;
    }
    const std::size_t have = buffer_.size();
    if (have >= content_length) {
      body_.assign(asio::buffers_begin(buffer_.data()),
                   asio::buffers_begin(buffer_.data()) + static_cast<std::ptrdiff_t>(content_length));
      handle();
      return;
    }
    auto self = shared_from_this();
    asio::async_read(socket_, buffer_, asio::transfer_exactly(content_length - have),
                     [self, content_length](boost::system::error_code ec, std::size_t) {
                       if (ec) {
                         return;
                       }
                       self->body_.assign(
                           asio::buffers_begin(self->buffer_.data()),
                           asio::buffers_begin(self->buffer_.data()) + static_cast<std::ptrdiff_t>(content_length));
                       self->handle();
                     });
  }

  void handle() {
    const auto q = target_.find('?');
    const std::string path = target_.substr(0, q);
    const std::string query = q == std::string::npos ? std::string{} : target_.substr(q + 1);
    if (method_ == "GET" && (path == "/" || path == "/index.html")) {
      reply(response(200, "OK", "text/html; charset=utf-8", dashboard_page()));
    } else if (method_ == "GET" && path == "/api/status") {
      const std::string s = sources_.status_json ? sources_.status_json() : std::string{};
      reply(s.empty()
                ? response(503, "Service Unavailable", "application/json", json_error("the averager did not answer"))
                : response(200, "OK", "application/json", s));
    } else if (method_ == "GET" && path == "/api/metrics") {
      std::uint64_t since = 0;
      const std::string v = form_field(query, "since");
      if (!v.empty() && std::from_chars(v.data(), v.data() + v.size(), since).ec != std::errc{}) {
        reply(response(400, "Bad Request", "application/json", json_error("since must be a round number")));
        return;
      }
      reply(response(200, "OK", "application/json", sources_.metrics ? sources_.metrics->json_since(since) : "{}"));
    } else if (path == "/api/control") {
      control();
    } else if (method_ != "GET" && method_ != "POST") {
      reply(response(405, "Method Not Allowed", "text/plain", "GET only\n"));
    } else {
      reply(response(404, "Not Found", "text/plain", "not found\n"));
    }
  }

  void control() {
    if (method_ != "POST") {
      reply(response(405, "Method Not Allowed", "application/json", json_error("POST only")));
      return;
    }
    if (sources_.token.empty() || !sources_.control) {
      reply(response(403, "Forbidden", "application/json",
                     json_error("this dashboard is read-only (the averager has no --http-token-file)")));
      return;
    }
    const std::string expected_auth = "Bearer " + sources_.token;
    if (!same_token(authorization_, expected_auth)) {
      reply(response(401, "Unauthorized", "application/json", json_error("a valid bearer token is needed")));
      return;
    }
    const auto [ok, text] = sources_.control(form_field(body_, "action"), form_field(body_, "arg"));
    reply(response(ok ? 200 : 409, ok ? "OK" : "Conflict", "application/json",
                   std::string{R"({"ok":)"} + (ok ? "true" : "false") + R"(,"result":)" + json_quote(text) + "}"));
  }

  void reply(std::string text) {
    auto self = shared_from_this();
    auto out = std::make_shared<std::string>(std::move(text));
    asio::async_write(socket_, asio::buffer(*out), [self, out](boost::system::error_code, std::size_t) {
      boost::system::error_code ignored;
      self->socket_.shutdown(tcp::socket::shutdown_both, ignored);
    });
  }

  tcp::socket socket_;
  const dashboard_sources& sources_;
  asio::streambuf buffer_{max_request_bytes};
  std::string method_;
  std::string target_;
  std::string authorization_;
  std::string body_;
};

}  // namespace

struct dashboard_server::impl {
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  dashboard_sources sources;
  std::thread thread;

  void accept() {
    acceptor.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) {
        return;
      }
      if (!ec) {
        std::make_shared<session>(std::move(socket), sources)->start();
      }
      accept();
    });
  }
};

dashboard_server::dashboard_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

dashboard_server::~dashboard_server() {
  asio::post(impl_->io, [this] {
    boost::system::error_code ignored;
    impl_->acceptor.close(ignored);
    impl_->io.stop();
  });
  if (impl_->thread.joinable()) {
    impl_->thread.join();
  }
}

expected<std::unique_ptr<dashboard_server>> dashboard_server::start(const http_bind& where, dashboard_sources sources) {
  auto p = std::make_unique<impl>();
  p->sources = std::move(sources);
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(where.address, ec);
  if (ec) {
    return fail(errc::invalid_argument, "--http-bind: '" + where.address + "' is not an IP address");
  }
  const tcp::endpoint ep{address, where.port};
  p->acceptor.open(ep.protocol(), ec);
  if (!ec) {
    p->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  }
  if (!ec) {
    p->acceptor.bind(ep, ec);
  }
  if (!ec) {
    p->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  }
  if (ec) {
    return fail(errc::io_error, "cannot serve the dashboard on " + where.address + ":" + std::to_string(where.port) +
                                    ": " + ec.message());
  }
  const auto bound = p->acceptor.local_endpoint(ec);
  std::string host = bound.address().to_string();
  if (bound.address().is_v6()) {
    host = "[" + host + "]";
  }
  std::unique_ptr<dashboard_server> server{new dashboard_server(std::move(p))};
  server->url_ = "http://" + host + ":" + std::to_string(bound.port()) + "/";
  server->impl_->accept();
  server->impl_->thread = std::thread([s = server.get()] {
    try {
      s->impl_->io.run();
    } catch (const std::exception& e) {
      PRSGD_LOG(error, "dashboard") << "stopped: " << e.what();
    }
  });
  return server;
}

}  // namespace prsgd::cli
