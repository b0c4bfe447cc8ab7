// SPDX-License-Identifier: Apache-2.0
// launch_local_cluster with real children (/bin/sh and the prsgd binary itself).
#include "prsgd/cli/launcher.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "child_process.hpp"

namespace {

using namespace prsgd::cli;
using namespace std::chrono_literals;

class LauncherTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_ / name; }

  static child_spec sh(const std::string& name, const std::string& script, child_role role = child_role::normal) {
    return child_spec{name, {"/bin/sh", "-c", script}, role};
  }

  // Waits until every file exists (children signal readiness by creating one); fails after 10 s.
  static bool wait_for_files(const std::vector<std::string>& files) {
    return prsgd::test::wait_until(
        [&] { return std::all_of(files.begin(), files.end(), [](const auto& f) { return std::filesystem::exists(f); }); },
        10s, 5ms);
  }

  static std::string read(const std::string& p) { return prsgd::test::read_file(p); }

  prsgd::test::scratch_dir dir_{"prsgd-launcher"};
};

TEST_F(LauncherTest, FailingCriticalChildFailsTheLaunch) {
  launch_options o;
  o.log_dir = path("logs");
  auto r = launch_local_cluster(o, {sh("averager", "exit 3", child_role::critical), sh("worker-0", "exit 0")});
  ASSERT_TRUE(r.has_value()) << r.error().message();
  EXPECT_EQ(r->exit_code, 3);
  ASSERT_EQ(r->children.size(), 2u);
  EXPECT_EQ(r->children[0].name, "averager");
  EXPECT_EQ(r->children[0].exit_code, 3);
  EXPECT_TRUE(r->children[1].ok());
  EXPECT_EQ(r->received_signal, 0);
}

TEST_F(LauncherTest, SuccessfulRunAndChildOutputGoesToLogFiles) {
  launch_options o;
  o.log_dir = path("logs");
  auto r = launch_local_cluster(o, {sh("averager", "echo to-stdout; echo to-stderr >&2", child_role::critical),
                                    sh("worker-0", "read x; echo \"stdin:$x:\"")});
  ASSERT_TRUE(r.has_value()) << r.error().message();
  EXPECT_EQ(r->exit_code, 0);
  const auto log = read(path("logs/averager.log"));
  EXPECT_NE(log.find("to-stdout"), std::string::npos);
  EXPECT_NE(log.find("to-stderr"), std::string::npos);
  EXPECT_NE(read(path("logs/worker-0.log")).find("stdin::"), std::string::npos) << "stdin must be /dev/null";
}

TEST_F(LauncherTest, WorkersGetGraceThenSigtermAfterCriticalExit) {
  launch_options o;
  o.grace = 100ms;
  o.kill_after = 5s;
  const auto start = std::chrono::steady_clock::now();
  auto r = launch_local_cluster(o, {sh("averager", "exit 0", child_role::critical),
                                    child_spec{"worker-0", {"sleep", "30"}, child_role::normal}});
  ASSERT_TRUE(r.has_value()) << r.error().message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_EQ(r->exit_code, 0) << "a worker stopped after the averager finished is not a failure";
  EXPECT_TRUE(r->children[1].forced);
  EXPECT_EQ(r->children[1].signal, SIGTERM);
}

TEST_F(LauncherTest, ServiceChildIsStoppedWhenTheOthersAreDone) {
  launch_options o;
  o.grace = 30s;  // must not be waited for: services stop as soon as the others end
  const auto start = std::chrono::steady_clock::now();
  auto r = launch_local_cluster(o, {child_spec{"head", {"sleep", "30"}, child_role::service},
                                    sh("averager", "exit 0", child_role::critical), sh("worker-0", "exit 0")});
  ASSERT_TRUE(r.has_value()) << r.error().message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_EQ(r->children[0].signal, SIGTERM);
  EXPECT_FALSE(r->children[0].forced);
  EXPECT_EQ(r->exit_code, 0);
}

TEST_F(LauncherTest, ForwardsSigtermToEveryChild) {
  launch_options o;
  o.log_dir = path("logs");
  std::vector<child_spec> kids;
  std::vector<std::string> ready;
  for (int i = 0; i < 3; ++i) {
    ready.push_back(path("ready-" + std::to_string(i)));
    kids.push_back(sh("child-" + std::to_string(i),
                      "trap 'exit 7' TERM; touch " + ready.back() + "; while :; do sleep 0.05; done",
                      i == 0 ? child_role::critical : child_role::normal));
  }
  bool all_ready = false;
  o.on_started = [&](const std::vector<pid_t>& pids) {
    EXPECT_EQ(pids.size(), 3u);
    all_ready = wait_for_files(ready);
    ::raise(SIGTERM);  // blocked while the launcher runs: it arrives as if sent from outside
  };
  auto r = launch_local_cluster(o, kids);
  ASSERT_TRUE(all_ready);
  ASSERT_TRUE(r.has_value()) << r.error().message();
  EXPECT_EQ(r->received_signal, SIGTERM);
  EXPECT_EQ(r->exit_code, 128 + SIGTERM);
  for (const auto& c : r->children) {
    EXPECT_EQ(c.exit_code, 7) << c.name << " " << c.describe();
    EXPECT_FALSE(c.forced);
  }
  // The signal was consumed by the launcher, not left pending for the test process.
  sigset_t pending;
  sigpending(&pending);
  EXPECT_EQ(sigismember(&pending, SIGTERM), 0);
}

TEST_F(LauncherTest, ChildIgnoringSigtermIsKilledAfterKillAfter) {
  launch_options o;
  o.kill_after = 200ms;
  const auto ready = path("ready");
  o.on_started = [&](const std::vector<pid_t>&) {
    ASSERT_TRUE(wait_for_files({ready}));
    ::raise(SIGINT);
  };
  auto r = launch_local_cluster(o, {sh("stubborn", "trap '' TERM INT; touch " + ready + "; exec sleep 30",
                                       child_role::critical)});
  ASSERT_TRUE(r.has_value()) << r.error().message();
  EXPECT_EQ(r->received_signal, SIGINT);
  EXPECT_EQ(r->children[0].signal, SIGKILL);
  EXPECT_TRUE(r->children[0].forced);
  EXPECT_EQ(r->exit_code, 128 + SIGINT);
}

TEST_F(LauncherTest, UnstartableChildStopsTheOnesAlreadyStarted) {
  launch_options o;
  o.log_dir = path("logs");
  auto r = launch_local_cluster(o, {child_spec{"first", {"sleep", "30"}, child_role::critical},
                                    child_spec{"second", {"/nonexistent/prsgd-nope"}, child_role::normal}});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, prsgd::errc::io_error);
  EXPECT_NE(r.error().context.find("/nonexistent/prsgd-nope"), std::string::npos) << r.error().context;
  int status = 0;
  EXPECT_EQ(::waitpid(-1, &status, WNOHANG), -1) << "a started child was left behind";
}

TEST_F(LauncherTest, RejectsBadSpecs) {
  EXPECT_EQ(launch_local_cluster({}, {}).error().code, prsgd::errc::invalid_argument);
  EXPECT_EQ(launch_local_cluster({}, {sh("a", "true"), sh("a", "true")}).error().code,
            prsgd::errc::invalid_argument);
  EXPECT_EQ(launch_local_cluster({}, {child_spec{"a", {}, child_role::normal}}).error().code,
            prsgd::errc::invalid_argument);
  launch_options bad_dir;
  bad_dir.log_dir = "/proc/prsgd-cannot-create";
  EXPECT_EQ(launch_local_cluster(bad_dir, {sh("a", "true")}).error().code, prsgd::errc::io_error);
}

TEST_F(LauncherTest, RunsThePrsgdBinaryAsAChild) {
  launch_options o;
  o.log_dir = path("logs");
  auto r = launch_local_cluster(o, {child_spec{"version", {PRSGD_BINARY, "--version"}, child_role::critical},
                                    child_spec{"bad", {PRSGD_BINARY, "local", "--workers", "0"}, child_role::normal}});
  ASSERT_TRUE(r.has_value()) << r.error().message();
  EXPECT_EQ(r->children[0].exit_code, 0);
  EXPECT_EQ(r->children[1].exit_code, 2);
  EXPECT_EQ(read(path("logs/version.log")).rfind("prsgd ", 0), 0u);
}

TEST_F(LauncherTest, PicksAFreePort) {
  auto p = pick_free_tcp_port();
  ASSERT_TRUE(p.has_value()) << p.error().message();
  EXPECT_GT(*p, 0);
  EXPECT_LT(*p, 65536);
}

}  // namespace
