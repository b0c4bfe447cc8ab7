// SPDX-License-Identifier: Apache-2.0
// CURVE for zmq_transport: Z85 keys, key pairs, and the ZAP handler (on the I/O thread) that admits only
// the allowed client keys.
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "zmq_transport_impl.hpp"

#include "prsgd/common/log.hpp"

namespace prsgd {

using transport_detail::curve_key_size;
using transport_detail::curve_key_z85_size;
using transport_detail::log_component;
using transport_detail::recv_batch;

namespace transport_detail {

expected<std::string> z85_to_binary(std::string_view z85) {
  if (z85.size() != curve_key_z85_size) {
    return fail(errc::invalid_argument, "CURVE key must be 40 Z85 characters");
  }
  std::string text(z85);
  std::array<std::uint8_t, curve_key_size> out{};
  if (zmq_z85_decode(out.data(), text.c_str()) == nullptr) {
    return fail(errc::invalid_argument, "malformed Z85 CURVE key");
  }
  return std::string(reinterpret_cast<const char*>(out.data()), out.size());
}

}  // namespace transport_detail

using transport_detail::z85_to_binary;

// Checks the configured CURVE keys and keeps the allowed client keys, in binary, for the ZAP handler.
expected<void> zmq_transport::impl::load_curve_keys() {
  PRSGD_TRY(z85_to_binary(cfg_.curve->public_key));
  PRSGD_TRY(z85_to_binary(cfg_.curve->secret_key));
  for (const auto& key : cfg_.curve->allowed_client_keys) {
    auto bin = z85_to_binary(key);
    if (!bin) {
      return fail(errc::invalid_argument, "allowed_client_keys: " + bin.error().context);
    }
    allowed_keys_.push_back(std::move(*bin));
  }
  if (zmq_has("curve") == 0) {
    return fail(errc::unsupported, "libzmq was built without CURVE");
  }
  return {};
}

void zmq_transport::impl::answer_zap() {
  std::vector<zmq::message_t> parts;
  for (int n = 0; n < recv_batch; ++n) {
    try {
      if (receive_parts(*zap_, parts, 16) != received::message) {
        return;
      }
      // ZAP request (RFC 27): version, request id, domain, address, routing id, mechanism, credentials...
      std::string request_id = parts.size() > 1 ? parts[1].to_string() : std::string{};
      bool allowed = false;
      std::string user_id;  // the client key in Z85: libzmq attaches it to every message of the connection
      if (parts.size() >= 7 && parts[0].to_string_view() == "1.0" && parts[5].to_string_view() == "CURVE" &&
          parts[6].size() == curve_key_size) {
        const std::string key = parts[6].to_string();
        allowed =
            allowed_keys_.empty() || std::find(allowed_keys_.begin(), allowed_keys_.end(), key) != allowed_keys_.end();
        std::array<char, curve_key_z85_size + 1> z85{};
        if (allowed &&
            zmq_z85_encode(z85.data(), static_cast<const std::uint8_t*>(parts[6].data()), curve_key_size) != nullptr) {
          user_id.assign(z85.data(), curve_key_z85_size);
        }
      }
      if (!allowed) {
        zap_denied_.fetch_add(1, std::memory_order_relaxed);
        if (zap_warnings_.allow(clock_.now())) {
          PRSGD_LOG(warn, log_component) << cfg_.node_name << ": refused a CURVE client"
                                         << (parts.size() > 3 ? " from " + parts[3].to_string() : std::string{})
                                         << ": its key is not on the allow list" << zap_warnings_.suffix();
        }
      }
      std::array<std::string, 6> reply{
          "1.0", request_id, allowed ? "200" : "400", allowed ? "OK" : "client key not allowed", user_id, ""};
      for (std::size_t i = 0; i < reply.size(); ++i) {
        zmq::message_t m(reply[i].data(), reply[i].size());
        (void)zap_->send(m, i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
    } catch (const zmq::error_t& e) {
      PRSGD_LOG(warn, log_component) << "ZAP handler: " << e.what();
      return;
    }
  }
  zap_ready_ = true;  // batch used up
}

expected<curve_keypair> generate_curve_keypair() {
  if (zmq_has("curve") == 0) {
    return fail(errc::unsupported, "libzmq was built without CURVE");
  }
  std::array<char, 41> pub{};
  std::array<char, 41> sec{};
  if (zmq_curve_keypair(pub.data(), sec.data()) != 0) {
    return fail(errc::io_error, std::string("zmq_curve_keypair: ") + zmq_strerror(zmq_errno()));
  }
  return curve_keypair{std::string(pub.data(), 40), std::string(sec.data(), 40)};
}

expected<std::string> curve_public_key(std::string_view secret_key) {
  PRSGD_TRY(z85_to_binary(secret_key));
  std::string sec(secret_key);
  std::array<char, 41> pub{};
  if (zmq_curve_public(pub.data(), sec.c_str()) != 0) {
    return fail(errc::invalid_argument, std::string("zmq_curve_public: ") + zmq_strerror(zmq_errno()));
  }
  return std::string(pub.data(), 40);
}

}  // namespace prsgd
