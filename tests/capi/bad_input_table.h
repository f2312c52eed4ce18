// The bad-input table of the C API: rows that each call one entry point with one bad input
// and expect a status, a message naming the function and the offending argument, and no side
// effect (every out-pointer the row could write is a sentinel slot of `Out` that must survive,
// and the fixture's live handles are unchanged and still usable).
//
// Adding a row: in the section file of the header part (test_capi_bad_inputs_*.cpp), push a
// Row {"ptdp_function", "what is bad", [&] { return ptdp_function(...); }, status, {"argument", ...}}.
// Helpers add the rows every handle, options struct or out-pointer takes (handle_rows,
// options_rows). test_capi_entry_point_coverage.cpp fails when a function declared in ptdp.h
// has no row and is not listed there as exempt.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "ptdp/ptdp.h"

namespace bad {

struct Row {
  std::string function;               // the entry point called (the coverage test reads it)
  std::string what;                   // the bad input
  std::function<ptdp_status()> call;  // the call; writes only into Out slots
  ptdp_status expected = PTDP_ERR_INVALID_ARGUMENT;
  std::vector<std::string> mentions;  // besides the function's name, what the message must contain
};

/// Out-pointer slots: filled with a byte pattern before every row and compared after it.
struct Out {
  int32_t i32[8];
  int64_t i64[8];
  size_t sz[4];
  double d[8];
  float f[4];
  char text[64];
  int32_t ids[64];
  ptdp_tensor tensor;
  ptdp_runtime runtime;
  ptdp_groups groups;
  ptdp_work work;
  ptdp_model model;
  ptdp_layer layer;
  ptdp_schedule schedule;
  ptdp_dataset dataset;
  ptdp_tokenizer tokenizer;
  ptdp_optimizer optimizer;
  ptdp_train_config config;
  ptdp_trainer trainer;
  ptdp_gpt_data data;
  ptdp_plan plan;
  ptdp_dtype dtype;
  ptdp_device device;
  ptdp_schedule_kind kind;
  ptdp_tokenizer_type tokenizer_type;
  ptdp_hf_architecture architecture;
  ptdp_action actions[4];
  ptdp_iteration_result result;
  ptdp_iteration_report report;
  ptdp_gpt_options gpt;
  ptdp_optimizer_options optimizer_options;
  ptdp_parallel_options parallel;
  ptdp_runtime_options runtime_options;
  ptdp_train_settings settings;
  ptdp_gpt_data_options data_options;
  ptdp_plan_layout layout;
  ptdp_plan_options plan_options;
  ptdp_plan_cli cli;
  ptdp_cluster cluster;
  ptdp_preprocess_result preprocess;
  ptdp_checkpoint_state state;

  /// The pattern every slot starts a row with; out structs keep a valid struct_size so that only
  /// the argument a row breaks is wrong.
  void reset();
};

/// The live and dead handles the rows use. Live ones are created first; the dead ones (created,
/// then destroyed) after, so no live handle can reuse a dead one's address.
struct Fixture {
  std::string dir;  // a temporary directory (data set files, paths that do not exist)
  ptdp_runtime runtime = nullptr;
  ptdp_groups groups = nullptr;
  ptdp_tensor tensor = nullptr;   // f32 [2, 3] = 1..6
  ptdp_tensor ints = nullptr;     // i64 [2]
  ptdp_tensor hidden = nullptr;   // f32 [2, 4, 8]: the column-parallel layer's input
  ptdp_work work = nullptr;       // a completed all-reduce
  ptdp_model model = nullptr;     // a tiny GPT: 1 layer, hidden 8, 2 heads, seq 4, vocab 16
  ptdp_optimizer optimizer = nullptr;
  ptdp_layer layer = nullptr;     // column-parallel linear 8 -> 8
  ptdp_schedule schedule = nullptr;  // 1F1B, p = 1, m = 2
  ptdp_tokenizer tokenizer = nullptr;
  ptdp_dataset dataset = nullptr;
  ptdp_gpt_data data = nullptr;
  ptdp_train_config config = nullptr;
  ptdp_trainer trainer = nullptr;
  ptdp_plan plan = nullptr;
  std::string dataset_prefix;

  // Each created, then destroyed: its handle value is no longer live.
  ptdp_runtime dead_runtime = nullptr;
  ptdp_groups dead_groups = nullptr;
  ptdp_tensor dead_tensor = nullptr;
  ptdp_work dead_work = nullptr;
  ptdp_model dead_model = nullptr;
  ptdp_optimizer dead_optimizer = nullptr;
  ptdp_layer dead_layer = nullptr;
  ptdp_schedule dead_schedule = nullptr;
  ptdp_tokenizer dead_tokenizer = nullptr;
  ptdp_dataset dead_dataset = nullptr;
  ptdp_gpt_data dead_data = nullptr;
  ptdp_train_config dead_config = nullptr;
  ptdp_trainer dead_trainer = nullptr;
  ptdp_plan dead_plan = nullptr;

  Out out;
  std::vector<int32_t> tokens;  // 2 x 4 token ids < 16
  std::vector<int32_t> labels;

  Fixture();
  ~Fixture();
  Fixture(const Fixture&) = delete;
  Fixture& operator=(const Fixture&) = delete;

  /// Fails the test when a live handle's state changed (values, shapes, parameters).
  void verify_unchanged() const;

 private:
  std::vector<float> param0_;  // the model's first parameter at creation
  std::string param0_name_;
};

using Section = std::vector<Row> (*)(Fixture&);
struct SectionEntry {
  const char* name;
  Section rows;
};
std::vector<SectionEntry>& sections();
int add_section(const char* name, Section rows);

/// Runs every row: status, message, sentinels, fixture state.
void run(Fixture& f, const std::vector<Row>& rows);

/// A never-created handle: zeroed static memory of the size of any handle object.
void* bogus();

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

/// The NULL, destroyed and never-created rows of a handle argument `name`.
template <typename Handle, typename Call>
void handle_rows(std::vector<Row>& rows, const std::string& fn, const std::string& name, const char* type,
                 Handle dead, Call call) {
  rows.push_back({fn, name + " NULL", [=] { return call(static_cast<Handle>(nullptr)); },
                  PTDP_ERR_INVALID_ARGUMENT, {name + " is NULL"}});
  rows.push_back({fn, name + " destroyed", [=] { return call(dead); }, PTDP_ERR_INVALID_ARGUMENT,
                  {name + " is not a live " + type}});
  rows.push_back({fn, name + " never created", [=] { return call(static_cast<Handle>(bogus())); },
                  PTDP_ERR_INVALID_ARGUMENT, {name + " is not a live " + type}});
}

/// The struct_size rows of an input options struct `name`: 0, smaller than the first published
/// version, and larger than this library knows with a non-zero byte beyond.
template <typename Options, typename Call>
void options_rows(std::vector<Row>& rows, const std::string& fn, const std::string& name,
                  ptdp_status (*init)(Options*), Call call) {
  rows.push_back({fn, name + "->struct_size 0", [=] {
                    Options o;
                    init(&o);
                    o.struct_size = 0;
                    return call(&o);
                  },
                  PTDP_ERR_INVALID_ARGUMENT, {name + "->struct_size is 0"}});
  rows.push_back({fn, name + "->struct_size too small", [=] {
                    Options o;
                    init(&o);
                    o.struct_size = 4;
                    return call(&o);
                  },
                  PTDP_ERR_INVALID_ARGUMENT, {name + "->struct_size = 4"}});
  rows.push_back({fn, name + "->struct_size beyond the known", [=] {
                    struct Newer {
                      Options base;
                      int64_t future;
                    } n;
                    std::memset(static_cast<void*>(&n), 0, sizeof n);
                    init(&n.base);
                    n.base.struct_size = sizeof n;
                    n.future = 1;
                    return call(&n.base);
                  },
                  PTDP_ERR_INVALID_ARGUMENT, {name + "->struct_size = ", "does not know"}});
}

/// A row of `fn` whose bad input is an options field: `edit` changes a copy of init()'s defaults.
template <typename Options, typename Call>
Row field_row(const std::string& fn, const std::string& what, ptdp_status (*init)(Options*),
              std::function<void(Options&)> edit, Call call, std::vector<std::string> mentions,
              ptdp_status expected = PTDP_ERR_INVALID_ARGUMENT) {
  return {fn, what, [=] {
            Options o;
            init(&o);
            edit(o);
            return call(&o);
          },
          expected, std::move(mentions)};
}

/// A row whose message names `arg` (the usual "<arg> is NULL").
inline Row null_row(const std::string& fn, const std::string& arg, std::function<ptdp_status()> call) {
  return {fn, arg + " NULL", std::move(call), PTDP_ERR_INVALID_ARGUMENT, {arg + " is NULL"}};
}

}  // namespace bad

#define PTDP_BAD_INPUT_CAT2(a, b) a##b
#define PTDP_BAD_INPUT_CAT(a, b) PTDP_BAD_INPUT_CAT2(a, b)
/// Defines the rows of one section of the header: `PTDP_BAD_INPUTS(tensor) { std::vector<bad::Row> r; ...; return r; }`
/// (the body sees the fixture as `f` and its out slots as `o`).
#define PTDP_BAD_INPUTS(name)                                                                   \
  static std::vector<bad::Row> PTDP_BAD_INPUT_CAT(rows_, name)([[maybe_unused]] bad::Fixture & f,  \
                                                              [[maybe_unused]] bad::Out & o);     \
  static std::vector<bad::Row> PTDP_BAD_INPUT_CAT(section_, name)(bad::Fixture & f) {           \
    return PTDP_BAD_INPUT_CAT(rows_, name)(f, f.out);                                           \
  }                                                                                             \
  static const int PTDP_BAD_INPUT_CAT(registered_, name) =                                      \
      bad::add_section(#name, &PTDP_BAD_INPUT_CAT(section_, name));                             \
  static std::vector<bad::Row> PTDP_BAD_INPUT_CAT(rows_, name)([[maybe_unused]] bad::Fixture & f,  \
                                                              [[maybe_unused]] bad::Out & o)
