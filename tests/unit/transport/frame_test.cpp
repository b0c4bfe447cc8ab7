// SPDX-License-Identifier: Apache-2.0
#include "prsgd/transport/frame.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace prsgd {
namespace {

TEST(FrameTest, CopyOwnsPrivateBytes) {
  std::string text = "hello";
  frame f = frame::copy(text);
  text[0] = 'j';
  EXPECT_EQ(f.view(), "hello");
  EXPECT_EQ(f.size(), 5U);
  EXPECT_FALSE(f.empty());
  EXPECT_TRUE(frame::copy("").empty());
  EXPECT_TRUE(frame{}.empty());
  EXPECT_EQ(frame{}.data(), nullptr);
}

TEST(FrameTest, ShareViewsModelWithoutCopyAndKeepsItAlive) {
  auto model = std::make_shared<std::vector<float>>(1024, 1.5F);
  const float* raw = model->data();
  std::weak_ptr<std::vector<float>> watch = model;
  frame f = frame::share(std::shared_ptr<const std::vector<float>>(std::move(model)));
  EXPECT_EQ(static_cast<const void*>(f.data()), static_cast<const void*>(raw));
  EXPECT_EQ(f.size(), 1024 * sizeof(float));
  frame copy_of_ref = f;  // copies the reference, not the bytes
  EXPECT_EQ(copy_of_ref.data(), f.data());
  f = frame{};
  EXPECT_FALSE(watch.expired());
  copy_of_ref = frame{};
  EXPECT_TRUE(watch.expired());
}

TEST(FrameTest, TakeMovesBufferIn) {
  std::string big(1000, 'x');
  const char* p = big.data();
  frame f = frame::take(std::move(big));
  EXPECT_EQ(reinterpret_cast<const char*>(f.data()), p);
  std::vector<std::byte> bytes(16, std::byte{7});
  frame g = frame::take(std::move(bytes));
  EXPECT_EQ(g.size(), 16U);
  EXPECT_EQ(g.bytes()[3], std::byte{7});
  EXPECT_EQ(total_size(multipart{f, g, frame{}}), 1016U);
}

}  // namespace
}  // namespace prsgd
