// SPDX-License-Identifier: Apache-2.0
// A separate process for the transport integration tests: binds, prints its endpoint, echoes every
// message back to its sender, and runs until killed or until its stdin closes.
//   transport_peer_helper <bind-endpoint> <node-name> [heartbeat-ms timeout-ms]
//   transport_peer_helper --connect <endpoint> <node-name> [heartbeat-ms timeout-ms]   (sends "hello" once)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "prsgd/transport/zmq_transport.hpp"

int main(int argc, char** argv) {
  const bool connect_mode = argc > 1 && std::string(argv[1]) == "--connect";
  if (connect_mode) {
    ++argv;
    --argc;
  }
  if (argc < 3) {
    std::cerr << "usage: transport_peer_helper <bind-endpoint> <node-name> [heartbeat-ms timeout-ms]\n";
    return 2;
  }
  prsgd::transport_config cfg;
  cfg.node_name = argv[2];
  if (argc >= 5) {
    cfg.heartbeat_interval = std::chrono::milliseconds(std::atoi(argv[3]));
    cfg.heartbeat_timeout = std::chrono::milliseconds(std::atoi(argv[4]));
  }
  prsgd::transport* self = nullptr;
  prsgd::transport_handlers handlers{[&self](prsgd::peer_id peer, prsgd::multipart msg) {
                                       // Runs on the I/O thread; `self` is set before bind, so before any peer can
                                       // send.
                                       (void)self->send(peer, std::move(msg));
                                     },
                                     [](const prsgd::peer_event& ev) {
                                       // Runs on the I/O thread; the netns test reads these lines.
                                       std::cout << (ev.up ? "UP " : "DOWN ") << ev.node << std::endl;
                                     }};
  auto t = prsgd::zmq_transport::make(cfg, handlers);
  if (!t) {
    std::cerr << "make: " << t.error().message() << "\n";
    return 1;
  }
  self = t->get();
  if (connect_mode) {
    auto peer = (*t)->connect(argv[1], {});
    if (!peer || !(*t)->send(*peer, {prsgd::frame::copy("hello"), prsgd::frame::copy(cfg.node_name)})) {
      std::cerr << "connect/send failed\n";
      return 1;
    }
    std::cout << "CONNECTED " << argv[1] << std::endl;
    std::string line;
    while (std::getline(std::cin, line)) {
    }
    (*t)->stop();
    return 0;
  }
  auto ep = (*t)->bind(argv[1]);
  if (!ep) {
    std::cerr << "bind: " << ep.error().message() << "\n";
    return 1;
  }
  std::cout << "ENDPOINT " << *ep << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  (*t)->stop();
  return 0;
}
