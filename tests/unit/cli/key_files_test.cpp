// SPDX-License-Identifier: Apache-2.0
#include "prsgd/cli/key_files.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "files.hpp"

namespace {

using namespace prsgd::cli;
using prsgd::errc;

// Example Z85 key texts in the style of the zmq_curve man page (only their format matters here).
const std::string pub = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID";
const std::string sec = "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs";

class KeyFilesTest : public ::testing::Test {
 protected:
  prsgd::test::scratch_dir scratch_{"prsgd-keys"};
  std::filesystem::path dir_ = scratch_.path() / "keys";  // not there yet: the tests create it
};

TEST_F(KeyFilesTest, RecognisesZ85Keys) {
  EXPECT_TRUE(is_z85_key(pub));
  EXPECT_TRUE(is_z85_key(sec));
  EXPECT_FALSE(is_z85_key(pub.substr(1)));
  EXPECT_FALSE(is_z85_key(std::string(39, 'a') + " "));
  EXPECT_FALSE(is_z85_key(std::string(39, 'a') + "\""));
}

TEST_F(KeyFilesTest, WritesReadableFilesWithPrivateSecret) {
  keygen_options o;
  o.out_dir = (dir_ / "sub").string();
  o.name = "averager";
  auto paths = write_key_files(o, pub, sec);
  ASSERT_TRUE(paths.has_value()) << paths.error().message();
  EXPECT_EQ(paths->public_path, (dir_ / "sub" / "averager.public").string());
  EXPECT_EQ(*read_key_file(paths->public_path), pub);
  EXPECT_EQ(*read_key_file(paths->secret_path), sec);
  struct stat st {};
  ASSERT_EQ(::stat(paths->secret_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(KeyFilesTest, RefusesToOverwriteWithoutForce) {
  keygen_options o;
  o.out_dir = dir_.string();
  ASSERT_TRUE(write_key_files(o, pub, sec).has_value());
  auto again = write_key_files(o, sec, pub);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, errc::already_exists);
  EXPECT_EQ(*read_key_file(key_paths(o).public_path), pub);
  o.force = true;
  ASSERT_TRUE(write_key_files(o, sec, pub).has_value());
  EXPECT_EQ(*read_key_file(key_paths(o).public_path), sec);
}

TEST_F(KeyFilesTest, RejectsBadKeysAndBadFiles) {
  keygen_options o;
  o.out_dir = dir_.string();
  EXPECT_EQ(write_key_files(o, "short", sec).error().code, errc::invalid_argument);
  EXPECT_EQ(read_key_file((dir_ / "none").string()).error().code, errc::not_found);
  std::filesystem::create_directories(dir_);
  std::ofstream{dir_ / "garbage"} << "not a key\n";
  EXPECT_EQ(read_key_file((dir_ / "garbage").string()).error().code, errc::decode_failed);
}

TEST_F(KeyFilesTest, AnAllowListDirectoryAdmitsEachOfItsPublicKeys) {
  const std::string other = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";
  for (const auto& [name, key] : {std::pair{"worker-a", pub}, std::pair{"worker-b", other}}) {
    keygen_options o;
    o.out_dir = (dir_ / "allowed").string();
    o.name = name;
    ASSERT_TRUE(write_key_files(o, key, sec));  // the .secret files beside them are not keys to admit
  }
  keygen_options own;
  own.out_dir = dir_.string();
  own.name = "server";
  auto server = write_key_files(own, pub, sec);
  ASSERT_TRUE(server);

  security_options s;
  s.curve_public_key = server->public_path;
  s.curve_secret_key = server->secret_path;
  s.curve_allow = {(dir_ / "allowed").string()};
  auto setup = load_curve(s);
  ASSERT_TRUE(setup) << setup.error().message();
  ASSERT_TRUE(setup->own.has_value());
  EXPECT_EQ(setup->own->allowed_client_keys, (std::vector<std::string>{pub, other}));

  std::filesystem::create_directories(dir_ / "empty");
  s.curve_allow = {(dir_ / "empty").string()};
  auto none = load_curve(s);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, errc::not_found);
  EXPECT_NE(none.error().message().find("holds no .public files"), std::string::npos) << none.error().message();
}

}  // namespace
