// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>

namespace prsgd::test {

/// An HTTP response: status code (0 when the connection or the answer failed) and body.
struct http_response {
  int status = 0;
  std::string body;
};

/// Sends `request` as it is to 127.0.0.1:`port` and reads until the server closes (at most scaled 10 s).
http_response http_exchange(int port, const std::string& request);

/// GETs `path` from 127.0.0.1:`port` (HTTP/1.0: the server closes after answering).
http_response http_get(int port, const std::string& path);

}  // namespace prsgd::test
