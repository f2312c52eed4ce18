// Training plots through the C API: JSON-lines training logs drawn as one SVG (core/train/plot).
#include <string>
#include <vector>

#include "capi/src/api_guard.h"
#include "core/train/plot.h"

namespace {

using ptdp::str_cat;
using ptdp::capi::guard;
using ptdp::capi::require_non_null;

}  // namespace

PTDP_API ptdp_status ptdp_plot_training_logs(const char* const* jsonl_paths, const char* const* labels, int32_t count,
                                             const char* title, const char* svg_path) {
  return guard(__func__, [&] {
    require_non_null(jsonl_paths, "jsonl_paths");
    PTDP_CHECK_ARG(count >= 1, str_cat("count = ", count, " is not >= 1"));
    require_non_null(svg_path, "svg_path");
    PTDP_CHECK_ARG(svg_path[0] != '\0', "svg_path is empty");
    std::vector<std::string> paths, names;
    paths.reserve(static_cast<std::size_t>(count));
    for (int32_t i = 0; i < count; ++i) {
      PTDP_CHECK_ARG(jsonl_paths[i] != nullptr, str_cat("jsonl_paths[", i, "] is NULL"));
      PTDP_CHECK_ARG(jsonl_paths[i][0] != '\0', str_cat("jsonl_paths[", i, "] is empty"));
      paths.emplace_back(jsonl_paths[i]);
    }
    if (labels != nullptr) {
      names.reserve(static_cast<std::size_t>(count));
      for (int32_t i = 0; i < count; ++i) {
        PTDP_CHECK_ARG(labels[i] == nullptr || labels[i][0] != '\0',
                       str_cat("labels[", i, "] is empty (NULL names the run after its file)"));
        names.emplace_back(labels[i] != nullptr ? labels[i] : "");
      }
    }
    ptdp::plot_training_logs(paths, names, title != nullptr ? title : "", svg_path);
  });
}
