// ptdp_train_supervise: the --max-restarts supervisor of core/train/supervisor.h.
#include <string>
#include <vector>

#include "capi/src/handles.h"
#include "core/train/supervisor.h"

namespace {

using ptdp::capi::guard;
using ptdp::capi::require_non_null;

}  // namespace

PTDP_API ptdp_status ptdp_train_supervise(int32_t argc, const char* const* argv, const char* launcher,
                                          int32_t max_restarts, double backoff_seconds, int32_t* exit_code) {
  return guard(__func__, [&] {
    PTDP_CHECK_ARG(argc >= 1, "argc = " + std::to_string(argc) + " is not >= 1 (argv[0] is the program)");
    require_non_null(argv, "argv");
    require_non_null(exit_code, "exit_code");
    ptdp::SupervisorOptions o;
    for (int32_t i = 0; i < argc; ++i) {
      std::string name = "argv[";
      name += std::to_string(i);
      name += ']';
      require_non_null(argv[i], name.c_str());
      o.command.emplace_back(argv[i]);
    }
    PTDP_CHECK_ARG(!o.command[0].empty(), "argv[0] is empty: it names the job's program");
    o.launcher = launcher ? launcher : "";
    o.max_restarts = max_restarts;
    o.backoff_s = backoff_seconds;
    ptdp::check_supervisor_options(o);
    *exit_code = ptdp::supervise(o);
  });
}
