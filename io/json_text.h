// JSON text that is valid for every value ptdp holds. Strings ptdp did not parse from JSON itself
// (flag values, file and directory names, names of clusters and GEMM tables) may hold bytes that
// are not UTF-8, and nlohmann's dump() throws a type_error on them; json_text writes each such
// byte as U+FFFD instead, so a report, a log line, a checkpoint's metadata or an error message
// is always written, and always valid JSON (fuzz/regressions/plan_args_cluster_not_utf8).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace ptdp {

/// j as JSON text (compact for indent < 0, else pretty-printed with `indent` spaces), bytes that
/// are not UTF-8 replaced by U+FFFD.
inline std::string json_text(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ptdp
