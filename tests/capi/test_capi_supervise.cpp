// ptdp_train_supervise through the C API: every bad argument refused with its name and nothing
// launched; a job that fails twice succeeds on its third attempt with --load DIR and without the
// supervisor's flags; a job that always fails ends with status 5 after max_restarts + 1
// attempts; a failure a restart would repeat (status 3) and a job killed by a signal.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ptdp/ptdp.h"

namespace {

struct Dir {
  std::filesystem::path path;
  Dir() {
    char tmpl[] = "/tmp/ptdp-supervise-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~Dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::vector<std::string> lines(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// A shell job: `script` with the job's flags as $1...; "$0" is "job".
struct Job {
  std::vector<std::string> words;
  std::vector<const char*> argv;
  Job(const std::string& script, std::vector<std::string> flags) {
    words = {"/bin/sh", "-c", script, "job"};
    words.insert(words.end(), flags.begin(), flags.end());
    for (const auto& w : words) argv.push_back(w.c_str());
  }
  int32_t argc() const { return static_cast<int32_t>(argv.size()); }
};

}  // namespace

TEST_CASE("ptdp_train_supervise refuses bad arguments by name and launches nothing", "[capi][supervise]") {
  Dir d;
  const std::string marker = (d.path / "ran").string();
  Job job("echo ran >> " + marker, {"--save", (d.path / "ck").string()});
  int32_t code = -7;
  struct Case {
    int32_t argc;
    const char* const* argv;
    int32_t restarts;
    double backoff;
    int32_t* out;
    const char* needle;
  };
  const char* null_entry[] = {"/bin/sh", nullptr};
  const char* empty_program[] = {""};
  const char* no_save[] = {"/bin/sh", "-c", "true"};
  const std::vector<Case> cases = {
      {0, job.argv.data(), 1, 0.0, &code, "argc = 0"},
      {job.argc(), nullptr, 1, 0.0, &code, "argv"},
      {2, null_entry, 1, 0.0, &code, "argv[1]"},
      {1, empty_program, 0, 0.0, &code, "argv[0] is empty"},
      {job.argc(), job.argv.data(), -1, 0.0, &code, "max_restarts = -1"},
      {job.argc(), job.argv.data(), 1, -1.0, &code, "backoff_seconds"},
      {job.argc(), job.argv.data(), 1, NAN, &code, "backoff_seconds"},
      {3, no_save, 2, 0.0, &code, "no --save DIR"},
      {job.argc(), job.argv.data(), 1, 0.0, nullptr, "exit_code"},
  };
  for (const Case& c : cases) {
    INFO(c.needle);
    CHECK(ptdp_train_supervise(c.argc, c.argv, nullptr, c.restarts, c.backoff, c.out) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK_THAT(std::string(ptdp_last_error()), Catch::Contains(c.needle));
  }
  CHECK(code == -7);
  CHECK_FALSE(std::filesystem::exists(marker));
}

TEST_CASE("ptdp_train_supervise relaunches a failing job from --save until it succeeds", "[capi][supervise]") {
  Dir d;
  const std::string log = (d.path / "attempts").string();
  const std::string ck = (d.path / "ck").string();
  // Attempts 0 and 1 fail (one by exit status, one killed by SIGKILL); attempt 2 succeeds.
  Job job("echo \"$PTDP_RESTART_ATTEMPT $*\" >> " + log + "; echo 2 > " + ck +
              "/latest_checkpointed_iteration.txt; case $PTDP_RESTART_ATTEMPT in 0) exit 1;; 1) kill -9 $$;; esac; exit 0",
          {"--save", ck, "--max-restarts", "3", "--launcher=mpiexec -n 2", "--train-iters", "4"});
  // Attempt 0 "saves" a checkpoint (its tracker), so the relaunches resume from it.
  std::filesystem::create_directories(ck);
  int32_t code = -1;
  REQUIRE(ptdp_train_supervise(job.argc(), job.argv.data(), "", 3, 0.0, &code) == PTDP_SUCCESS);
  CHECK(code == 0);
  const auto seen = lines(log);
  REQUIRE(seen.size() == 3);
  CHECK(seen[0] == "0 --save " + ck + " --train-iters 4");
  CHECK(seen[1] == "1 --save " + ck + " --train-iters 4 --load " + ck);
  CHECK(seen[2] == "2 --save " + ck + " --train-iters 4 --load " + ck);
}

TEST_CASE("ptdp_train_supervise gives up after max_restarts with status 5", "[capi][supervise]") {
  Dir d;
  const std::string log = (d.path / "attempts").string();
  Job job("echo x >> " + log + "; exit 9", {"--save", (d.path / "ck").string()});
  int32_t code = -1;
  REQUIRE(ptdp_train_supervise(job.argc(), job.argv.data(), nullptr, 2, 0.0, &code) == PTDP_SUCCESS);
  CHECK(code == 5);
  CHECK(lines(log).size() == 3);
}

TEST_CASE("ptdp_train_supervise does not retry a failure a restart would repeat", "[capi][supervise]") {
  Dir d;
  const std::string log = (d.path / "attempts").string();
  for (int status : {2, 3, 4}) {
    std::filesystem::remove(log);
    Job job("echo x >> " + log + "; exit " + std::to_string(status), {"--save", (d.path / "ck").string()});
    int32_t code = -1;
    REQUIRE(ptdp_train_supervise(job.argc(), job.argv.data(), nullptr, 3, 0.0, &code) == PTDP_SUCCESS);
    CHECK(code == status);
    CHECK(lines(log).size() == 1);
  }
  // A program that does not exist: 127, tried once.
  const char* missing[] = {"/nonexistent/ptdp-train", "--save", "x"};
  int32_t code = -1;
  REQUIRE(ptdp_train_supervise(3, missing, nullptr, 3, 0.0, &code) == PTDP_SUCCESS);
  CHECK(code == 127);
}
