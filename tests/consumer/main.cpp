// SPDX-License-Identifier: Apache-2.0
// Embeds the installed runtime: spawns an actor and reads its answer through a future.
#include <chrono>
#include <cstdio>

#include "prsgd/runtime/runtime.hpp"

namespace {

class counter : public prsgd::actor {
 public:
  explicit counter(int start) : value_(start) {}
  int add(int n) { return value_ += n; }

 private:
  int value_;
};

}  // namespace

int main() {
  prsgd::actor_system system{prsgd::config{.threads = 2, .compute_threads = 1}};
  auto c = system.spawn<counter>(prsgd::named{"counter"}, 40);
  if (!c) {
    std::fprintf(stderr, "spawn failed: %s\n", c.error().message().c_str());
    return 1;
  }
  auto v = c->ask(&counter::add, 2).get(std::chrono::seconds(10));
  if (!v) {
    std::fprintf(stderr, "ask failed: %s\n", v.error().message().c_str());
    return 1;
  }
  std::printf("prsgd consumer: find_package(prsgd) works, counter says %d\n", *v);
  return *v == 42 ? 0 : 1;
}
