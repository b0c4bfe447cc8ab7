// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "prsgd/runtime/runtime.hpp"
#include "test_actors.hpp"

namespace prsgd {
namespace {

using namespace std::chrono_literals;
using test::counter;

TEST(DeterministicSystemTest, AskRepliesAfterDispatch) {
  deterministic_system sys;
  auto c = sys.spawn<counter>(named{"counter"}, 0);
  ASSERT_TRUE(c.has_value());
  auto f = c->ask(&counter::add, 5);
  EXPECT_FALSE(f.ready());
  sys.dispatch_all();
  auto r = f.try_get();
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ(**r, 5);
}

TEST(DeterministicSystemTest, GetDispatchesUntilReady) {
  deterministic_system sys;
  auto c = *sys.spawn<counter>(1);
  c.tell(&counter::add, 2);
  auto v = c.ask(&counter::get).get();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(*v, 3);
}

TEST(DeterministicSystemTest, DispatchOneRunsOneMessageAtATime) {
  deterministic_system sys;
  auto c = *sys.spawn<counter>(0);
  auto f1 = c.ask(&counter::add, 1);
  auto f2 = c.ask(&counter::add, 10);
  EXPECT_TRUE(sys.dispatch_one());  // on_start + first message
  EXPECT_TRUE(f1.ready());
  EXPECT_FALSE(f2.ready());
  EXPECT_TRUE(sys.dispatch_one());
  EXPECT_TRUE(f2.ready());
  EXPECT_EQ(*f2.get(), 11);
  EXPECT_FALSE(sys.dispatch_one());
}

}  // namespace
}  // namespace prsgd
