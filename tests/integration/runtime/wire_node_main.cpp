// SPDX-License-Identifier: Apache-2.0
// A prsgd node process for the remote-actor integration tests: serves the test actor types over
// zmq on tcp://127.0.0.1 (OS-chosen port), prints "ENDPOINT <endpoint>" and runs until stdin closes.
//   prsgd_wire_test_node <node-name> [<initial value of the named actor "counter">] [--head] [--join <head>]
// --head serves the head directory; --join registers with a head and names the local counter
// "counter@<node-name>" there.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "prsgd/runtime/actor_system.hpp"
#include "prsgd/runtime/node.hpp"
#include "wire_test_actors.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: " << argv[0] << " <node-name> [counter-start]\n";
    return 2;
  }
  prsgd::wire::remote_registry reg;
  prsgd::wire::testing::register_test_types(reg);
  prsgd::config cfg;
  cfg.threads = 2;
  cfg.compute_threads = 1;
  prsgd::actor_system system{cfg};
  prsgd::wire::node_config ncfg;
  ncfg.name = argv[1];
  ncfg.transport.heartbeat_interval = std::chrono::milliseconds(100);
  ncfg.transport.heartbeat_timeout = std::chrono::milliseconds(1000);
  for (int i = 3; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--head") {
      ncfg.head_service = true;
    } else if (arg == "--join" && i + 1 < argc) {
      ncfg.head = argv[++i];
    }
  }
  auto node = prsgd::wire::node::make(system, reg, ncfg, prsgd::wire::testing::zmq_factory());
  if (!node) {
    std::cerr << "node: " << node.error().message() << "\n";
    return 1;
  }
  const int start = argc > 2 ? std::atoi(argv[2]) : 0;
  auto named = system.spawn<prsgd::wire::testing::counter>(prsgd::named{"counter"}, start);
  if (!named) {
    std::cerr << "spawn: " << named.error().message() << "\n";
    return 1;
  }
  if (!ncfg.head.empty()) {
    auto reg_name = (*node)->register_name("counter@" + ncfg.name, named->addr()).get(std::chrono::seconds(10));
    if (!reg_name) {
      std::cerr << "register_name: " << reg_name.error().message() << "\n";
      return 1;
    }
  }
  std::cout << "ENDPOINT " << (*node)->endpoint() << std::endl;
  // Serve until the parent closes our stdin (or kills us).
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  (*node)->stop();
  system.shutdown(std::chrono::seconds(2));
  return 0;
}
