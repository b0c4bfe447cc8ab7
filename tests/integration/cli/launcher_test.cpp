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
#include <optional>

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

  // Waits until every file exists (children signal readiness by creating one); fails after 10 s (scaled).
  static bool wait_for_files(const std::vector<std::string>& files) {
    return prsgd::test::wait_until(
        [&] {
          return std::all_of(files.begin(), files.end(), [](const auto& f) { return std::filesystem::exists(f); });
        },
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
  o.kill_after = 1h;
  const auto start = std::chrono::steady_clock::now();
  auto r = launch_local_cluster(o, {sh("averager", "exit 0", child_role::critical),
                                    child_spec{"worker-0", {"sleep", "3600"}, child_role::normal}});
  ASSERT_TRUE(r.has_value()) << r.error().message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, prsgd::test::scaled(10s));
  EXPECT_EQ(r->exit_code, 0) << "a worker stopped after the averager finished is not a failure";
  EXPECT_TRUE(r->children[1].forced);
  EXPECT_EQ(r->children[1].signal, SIGTERM);
}

TEST_F(LauncherTest, ServiceChildIsStoppedWhenTheOthersAreDone) {
  launch_options o;
  o.grace = 1h;  // must not be waited for: services stop as soon as the others end
  const auto start = std::chrono::steady_clock::now();
  auto r = launch_local_cluster(o, {child_spec{"head", {"sleep", "3600"}, child_role::service},
                                    sh("averager", "exit 0", child_role::critical), sh("worker-0", "exit 0")});
  ASSERT_TRUE(r.has_value()) << r.error().message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, prsgd::test::scaled(10s));
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
  auto r = launch_local_cluster(
      o, {sh("stubborn", "trap '' TERM INT; touch " + ready + "; exec sleep 30", child_role::critical)});
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
  EXPECT_EQ(launch_local_cluster({}, {sh("a", "true"), sh("a", "true")}).error().code, prsgd::errc::invalid_argument);
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

TEST_F(LauncherTest, NextChildStartsWithTheEndpointTheFirstAnnounced) {
  launch_options o;
  o.log_dir = path("logs");
  child_launcher launcher{o};
  const auto file = path("first.endpoint");
  // The first child announces an endpoint the way --endpoint-file does (written aside, then renamed) and
  // runs until the second child, started with that endpoint, has seen it.
  ASSERT_TRUE(launcher.start(sh("first",
                                "printf 'tcp://127.0.0.1:4242\\n' > " + file + ".tmp && mv " + file + ".tmp " + file +
                                    "; while [ ! -e " + path("go") + " ]; do sleep 0.05; done",
                                child_role::critical)));
  auto endpoint = launcher.wait_for_endpoint("first", file);
  ASSERT_TRUE(endpoint) << endpoint.error().message();
  EXPECT_EQ(*endpoint, "tcp://127.0.0.1:4242");
  ASSERT_TRUE(
      launcher.start(child_spec{"second", {"/bin/sh", "-c", "echo \"got $0\"; touch " + path("go"), *endpoint}}));
  const auto report = launcher.finish();
  EXPECT_EQ(report.exit_code, 0);
  ASSERT_EQ(report.children.size(), 2U);
  EXPECT_TRUE(report.children[0].ok()) << report.children[0].describe();
  EXPECT_NE(read(path("logs/second.log")).find("got tcp://127.0.0.1:4242"), std::string::npos);
}

TEST_F(LauncherTest, ChildExitingBeforeItsEndpointIsReportedWithItsLogTail) {
  launch_options o;
  o.log_dir = path("logs");
  child_launcher launcher{o};
  ASSERT_TRUE(
      launcher.start(sh("averager", "echo loading; echo 'cannot bind: address in use'; exit 3", child_role::critical)));
  auto endpoint = launcher.wait_for_endpoint("averager", path("never.endpoint"));
  ASSERT_FALSE(endpoint);
  EXPECT_EQ(endpoint.error().code, prsgd::errc::io_error);
  EXPECT_EQ(endpoint.error().context, "averager exited with status 3 before it listened; the end of " +
                                          path("logs/averager.log") + ":\n  loading\n  cannot bind: address in use");
  const auto report = launcher.finish();
  EXPECT_EQ(report.exit_code, 3);
}

TEST_F(LauncherTest, StopSignalWhileWaitingForAnEndpointIsForwarded) {
  launch_options o;
  const auto ready = path("ready");
  child_launcher launcher{o};
  ASSERT_TRUE(launcher.start(
      sh("averager", "trap 'exit 7' TERM; touch " + ready + "; while :; do sleep 0.05; done", child_role::critical)));
  ASSERT_TRUE(wait_for_files({ready}));
  ::raise(SIGTERM);  // blocked while the launcher exists: taken by the wait below
  auto endpoint = launcher.wait_for_endpoint("averager", path("never.endpoint"));
  ASSERT_FALSE(endpoint);
  EXPECT_EQ(endpoint.error().code, prsgd::errc::shutting_down);
  const auto report = launcher.finish();
  EXPECT_EQ(report.received_signal, SIGTERM);
  EXPECT_EQ(report.exit_code, 128 + SIGTERM);
  ASSERT_EQ(report.children.size(), 1U);
  EXPECT_EQ(report.children[0].exit_code, 7) << report.children[0].describe();
}

TEST_F(LauncherTest, DestroyedLauncherKillsWhatItStarted) {
  pid_t pid = -1;
  {
    child_launcher launcher{launch_options{}};
    auto started = launcher.start(child_spec{"sleeper", {"sleep", "3600"}});
    ASSERT_TRUE(started) << started.error().message();
    pid = *started;
  }
  EXPECT_EQ(::kill(pid, 0), -1) << "the child outlived its launcher";
  int status = 0;
  EXPECT_EQ(::waitpid(-1, &status, WNOHANG), -1) << "a child was left unreaped";
}

TEST_F(LauncherTest, EndpointFileIsReadBackWhole) {
  const auto file = path("x.endpoint");
  EXPECT_FALSE(read_endpoint_file(file));
  ASSERT_TRUE(write_endpoint_file(file, "tcp://127.0.0.1:5555"));
  EXPECT_EQ(read(file), "tcp://127.0.0.1:5555\n");
  EXPECT_EQ(read_endpoint_file(file), std::optional<std::string>{"tcp://127.0.0.1:5555"});
  EXPECT_FALSE(std::filesystem::exists(file + ".tmp"));
  auto bad = write_endpoint_file(path("no-such-dir/x.endpoint"), "tcp://127.0.0.1:5555");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, prsgd::errc::io_error);
  EXPECT_NE(bad.error().context.find("no-such-dir/x.endpoint.tmp"), std::string::npos) << bad.error().context;
}

}  // namespace
