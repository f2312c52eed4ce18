// The bad-input table cannot go stale: every function ptdp.h declares (read from the source
// tree at test time) has at least one row, or is listed here as unable to fail, with the reason.
#include "bad_input_table.h"

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#ifndef PTDP_PUBLIC_HEADER
#error "PTDP_PUBLIC_HEADER (the path of capi/include/ptdp/ptdp.h) must be defined by the build"
#endif

namespace {

// Entry points with no bad input: they return no ptdp_status, or take no argument.
const std::map<std::string, std::string> kExempt = {
    {"ptdp_status_string", "takes any value (unknown ones give \"unknown status\") and returns a fixed string"},
    {"ptdp_last_error", "takes nothing and returns this thread's message (never NULL)"},
    {"ptdp_version", "takes nothing and returns a fixed string"},
    {"ptdp_memory_reset_peak", "takes nothing; cannot fail"},
    {"ptdp_memory_stats", "both outputs may be NULL; cannot fail"},
    {"ptdp_memory_release_cache", "its output may be NULL; cannot fail"},
    {"ptdp_cluster_preset_name", "returns NULL for an index outside the presets (no status to check)"},
};

// Entry points of ptdp_mpi.h: they take an MPI communicator, so their bad inputs are tested
// under mpiexec, in the named file (which must call them expecting PTDP_ERR_INVALID_ARGUMENT),
// not in the single-process table.
const std::map<std::string, std::string> kTestedUnderMpi = {
    {"ptdp_runtime_create_from_mpi", "tests/comm/test_comm_runtime.cpp"},
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every `PTDP_API ... ptdp_xxx(` declaration at the start of a line.
std::set<std::string> declared_functions(const std::string& path) {
  const std::string text = read_text(path);
  std::set<std::string> out;
  const std::regex name(R"(\b(ptdp_[a-z0-9_]+)\s*\()");
  for (std::size_t at = text.find("\nPTDP_API "); at != std::string::npos; at = text.find("\nPTDP_API ", at + 1)) {
    const std::string decl = text.substr(at, 400);
    std::smatch m;
    REQUIRE(std::regex_search(decl, m, name));
    out.insert(m[1].str());
  }
  return out;
}

}  // namespace

TEST_CASE("every entry point in ptdp.h has a row in the bad-input table or is listed as exempt",
          "[capi][errors][bad_inputs]") {
  const std::set<std::string> declared = declared_functions(PTDP_PUBLIC_HEADER);
  CHECK(declared.size() > 170);
  CHECK(declared.count("ptdp_tensor_create") == 1);
  CHECK(declared.count("ptdp_model_train_step") == 1);  // behind PTDP_DEPRECATED(...)
  bad::Fixture f;
  std::set<std::string> covered;
  std::size_t rows = 0;
  for (const bad::SectionEntry& s : bad::sections()) {
    for (const bad::Row& r : s.rows(f)) {
      ++rows;
      INFO("section " << s.name << ", row " << r.what);
      CHECK(declared.count(r.function) == 1);  // a row names a real function
      covered.insert(r.function);
    }
  }
  CHECK(rows > 700);
  WARN(rows << " rows cover " << covered.size() << " of the " << declared.size() << " entry points ("
            << kExempt.size() << " exempt)");
  for (const std::string& fn : declared) {
    INFO(fn << " is declared in ptdp.h but has no row in tests/capi/test_capi_bad_inputs_*.cpp "
               "(add one, or list it in kExempt with the reason it cannot fail)");
    CHECK((covered.count(fn) == 1 || kExempt.count(fn) == 1));
  }
  for (const auto& [fn, why] : kExempt) {
    INFO(fn << " is exempt (" << why << ") but is no longer declared, or now has rows");
    CHECK(declared.count(fn) == 1);
    CHECK(covered.count(fn) == 0);
  }
}

TEST_CASE("every entry point in ptdp_mpi.h has its bad inputs tested under mpiexec", "[capi][errors][bad_inputs]") {
  const std::string header = PTDP_PUBLIC_HEADER;
  const std::string dir = header.substr(0, header.rfind('/'));
  const std::string root = header.substr(0, header.rfind("capi/include/ptdp/ptdp.h"));
  const std::set<std::string> declared = declared_functions(dir + "/ptdp_mpi.h");
  CHECK(declared.count("ptdp_runtime_create_from_mpi") == 1);
  for (const std::string& fn : declared) {
    INFO(fn << " is declared in ptdp_mpi.h but kTestedUnderMpi names no test of its bad inputs");
    REQUIRE(kTestedUnderMpi.count(fn) == 1);
    const std::string test = read_text(root + kTestedUnderMpi.at(fn));
    // At least one call of it whose status is checked against PTDP_ERR_INVALID_ARGUMENT.
    const std::regex refused(fn + R"(\([^;]*\)\s*,\s*PTDP_ERR_INVALID_ARGUMENT)");
    INFO(kTestedUnderMpi.at(fn) << " has no call of " << fn << " expecting PTDP_ERR_INVALID_ARGUMENT");
    CHECK(std::regex_search(test, refused));
  }
}
