// Bad-input rows: status and version, tensors, runtime, groups and collectives.
#include <cstdlib>

#include "bad_input_table.h"

using bad::handle_rows;
using bad::null_row;
using bad::options_rows;
using bad::Row;

PTDP_BAD_INPUTS(status) {
  std::vector<Row> r;
  r.push_back(null_row("ptdp_get_version", "major", [&] { return ptdp_get_version(nullptr, &o.i32[1], &o.i32[2]); }));
  r.push_back(null_row("ptdp_get_version", "minor", [&] { return ptdp_get_version(&o.i32[0], nullptr, &o.i32[2]); }));
  r.push_back(null_row("ptdp_get_version", "patch", [&] { return ptdp_get_version(&o.i32[0], &o.i32[1], nullptr); }));
  r.push_back({"ptdp_has_feature", "feature out of range", [&] {
                 return ptdp_has_feature(static_cast<ptdp_feature>(77), &o.i32[0]);
               }, PTDP_ERR_INVALID_ARGUMENT, {"feature = 77"}});
  r.push_back({"ptdp_has_feature", "negative feature", [&] {
                 return ptdp_has_feature(static_cast<ptdp_feature>(-1), &o.i32[0]);
               }, PTDP_ERR_INVALID_ARGUMENT, {"feature = -1"}});
  r.push_back(null_row("ptdp_has_feature", "available", [&] { return ptdp_has_feature(PTDP_FEATURE_MPI, nullptr); }));
  r.push_back({"ptdp_dtype_size", "dtype out of range", [&] {
                 return ptdp_dtype_size(static_cast<ptdp_dtype>(5), &o.sz[0]);
               }, PTDP_ERR_INVALID_ARGUMENT, {"dtype = 5"}});
  r.push_back({"ptdp_dtype_size", "negative dtype", [&] {
                 return ptdp_dtype_size(static_cast<ptdp_dtype>(-1), &o.sz[0]);
               }, PTDP_ERR_INVALID_ARGUMENT, {"dtype = -1"}});
  r.push_back(null_row("ptdp_dtype_size", "bytes", [&] { return ptdp_dtype_size(PTDP_DTYPE_F32, nullptr); }));
  r.push_back(null_row("ptdp_memory_cached", "cached", [] { return ptdp_memory_cached(nullptr); }));
  r.push_back(null_row("ptdp_memory_huge_pages", "advised", [] { return ptdp_memory_huge_pages(nullptr); }));
  return r;
}

PTDP_BAD_INPUTS(tensor) {
  std::vector<Row> r;
  static const int64_t s23[] = {2, 3};
  static const int64_t neg[] = {2, -3};
  r.push_back(null_row("ptdp_tensor_options_init", "options", [] { return ptdp_tensor_options_init(nullptr); }));
  const char* fn = "ptdp_tensor_create";
  r.push_back(null_row(fn, "out", [] { return ptdp_tensor_create(nullptr, 2, s23, nullptr, 0, nullptr); }));
  r.push_back(null_row(fn, "shape", [&] { return ptdp_tensor_create(nullptr, 2, nullptr, nullptr, 0, &o.tensor); }));
  r.push_back({fn, "negative ndim", [&] { return ptdp_tensor_create(nullptr, -1, s23, nullptr, 0, &o.tensor); },
               PTDP_ERR_INVALID_ARGUMENT, {"ndim = -1"}});
  r.push_back({fn, "negative extent", [&] { return ptdp_tensor_create(nullptr, 2, neg, nullptr, 0, &o.tensor); },
               PTDP_ERR_INVALID_ARGUMENT, {"shape[1]", "-3"}});
  options_rows(r, fn, "options", ptdp_tensor_options_init,
               [&](const ptdp_tensor_options* x) { return ptdp_tensor_create(x, 2, s23, nullptr, 0, &o.tensor); });
  r.push_back(bad::field_row<ptdp_tensor_options>(
      fn, "dtype out of range", ptdp_tensor_options_init, [](ptdp_tensor_options& x) { x.dtype = static_cast<ptdp_dtype>(42); },
      [&](const ptdp_tensor_options* x) { return ptdp_tensor_create(x, 2, s23, nullptr, 0, &o.tensor); },
      {"options->dtype = 42"}));
  r.push_back(bad::field_row<ptdp_tensor_options>(
      fn, "device out of range", ptdp_tensor_options_init, [](ptdp_tensor_options& x) { x.device = static_cast<ptdp_device>(-2); },
      [&](const ptdp_tensor_options* x) { return ptdp_tensor_create(x, 2, s23, nullptr, 0, &o.tensor); },
      {"options->device = -2"}));
  r.push_back(bad::field_row<ptdp_tensor_options>(
      fn, "negative device index", ptdp_tensor_options_init, [](ptdp_tensor_options& x) { x.device_index = -1; },
      [&](const ptdp_tensor_options* x) { return ptdp_tensor_create(x, 2, s23, nullptr, 0, &o.tensor); },
      {"options->device_index = -1"}));

  r.push_back({"ptdp_tensor_destroy", "destroyed", [&] { return ptdp_tensor_destroy(f.dead_tensor); },
               PTDP_ERR_INVALID_ARGUMENT, {"tensor is not a live ptdp_tensor"}});
  r.push_back({"ptdp_tensor_destroy", "never created",
               [&] { return ptdp_tensor_destroy(static_cast<ptdp_tensor>(bad::bogus())); }, PTDP_ERR_INVALID_ARGUMENT,
               {"tensor is not a live ptdp_tensor"}});
  handle_rows(r, "ptdp_tensor_ndim", "tensor", "ptdp_tensor", f.dead_tensor,
              [&](ptdp_tensor t) { return ptdp_tensor_ndim(t, &o.i32[0]); });
  r.push_back(null_row("ptdp_tensor_ndim", "ndim", [&] { return ptdp_tensor_ndim(f.tensor, nullptr); }));
  handle_rows(r, "ptdp_tensor_shape", "tensor", "ptdp_tensor", f.dead_tensor,
              [&](ptdp_tensor t) { return ptdp_tensor_shape(t, o.i64, 8); });
  r.push_back(null_row("ptdp_tensor_shape", "shape", [&] { return ptdp_tensor_shape(f.tensor, nullptr, 8); }));
  r.push_back({"ptdp_tensor_shape", "capacity too small", [&] { return ptdp_tensor_shape(f.tensor, o.i64, 1); },
               PTDP_ERR_INVALID_ARGUMENT, {"capacity = 1"}});
  r.push_back({"ptdp_tensor_shape", "negative capacity", [&] { return ptdp_tensor_shape(f.tensor, o.i64, -1); },
               PTDP_ERR_INVALID_ARGUMENT, {"capacity = -1"}});
  handle_rows(r, "ptdp_tensor_dtype", "tensor", "ptdp_tensor", f.dead_tensor,
              [&](ptdp_tensor t) { return ptdp_tensor_dtype(t, &o.dtype); });
  r.push_back(null_row("ptdp_tensor_dtype", "dtype", [&] { return ptdp_tensor_dtype(f.tensor, nullptr); }));
  handle_rows(r, "ptdp_tensor_device", "tensor", "ptdp_tensor", f.dead_tensor,
              [&](ptdp_tensor t) { return ptdp_tensor_device(t, &o.device, &o.i32[0]); });
  r.push_back(null_row("ptdp_tensor_device", "device", [&] { return ptdp_tensor_device(f.tensor, nullptr, &o.i32[0]); }));
  handle_rows(r, "ptdp_tensor_numel", "tensor", "ptdp_tensor", f.dead_tensor,
              [&](ptdp_tensor t) { return ptdp_tensor_numel(t, &o.i64[0]); });
  r.push_back(null_row("ptdp_tensor_numel", "numel", [&] { return ptdp_tensor_numel(f.tensor, nullptr); }));
  handle_rows(r, "ptdp_tensor_nbytes", "tensor", "ptdp_tensor", f.dead_tensor,
              [&](ptdp_tensor t) { return ptdp_tensor_nbytes(t, &o.sz[0]); });
  r.push_back(null_row("ptdp_tensor_nbytes", "nbytes", [&] { return ptdp_tensor_nbytes(f.tensor, nullptr); }));
  handle_rows(r, "ptdp_tensor_copy_to_host", "tensor", "ptdp_tensor", f.dead_tensor,
              [&](ptdp_tensor t) { return ptdp_tensor_copy_to_host(t, o.f, 24); });
  r.push_back(null_row("ptdp_tensor_copy_to_host", "dst", [&] { return ptdp_tensor_copy_to_host(f.tensor, nullptr, 24); }));
  r.push_back({"ptdp_tensor_copy_to_host", "dst too small", [&] { return ptdp_tensor_copy_to_host(f.tensor, o.d, 23); },
               PTDP_ERR_INVALID_ARGUMENT, {"dst_bytes = 23"}});
  handle_rows(r, "ptdp_tensor_copy_from_host", "tensor", "ptdp_tensor", f.dead_tensor,
              [&](ptdp_tensor t) { return ptdp_tensor_copy_from_host(t, o.d, 24); });
  r.push_back(null_row("ptdp_tensor_copy_from_host", "src", [&] { return ptdp_tensor_copy_from_host(f.tensor, nullptr, 24); }));
  r.push_back({"ptdp_tensor_copy_from_host", "size mismatch", [&] { return ptdp_tensor_copy_from_host(f.tensor, o.d, 28); },
               PTDP_ERR_INVALID_ARGUMENT, {"src_bytes = 28"}});
  handle_rows(r, "ptdp_tensor_cast", "src", "ptdp_tensor", f.dead_tensor,
              [&](ptdp_tensor t) { return ptdp_tensor_cast(t, PTDP_DTYPE_BF16, &o.tensor); });
  r.push_back(null_row("ptdp_tensor_cast", "out", [&] { return ptdp_tensor_cast(f.tensor, PTDP_DTYPE_BF16, nullptr); }));
  r.push_back({"ptdp_tensor_cast", "dtype out of range",
               [&] { return ptdp_tensor_cast(f.tensor, static_cast<ptdp_dtype>(99), &o.tensor); },
               PTDP_ERR_INVALID_ARGUMENT, {"dtype = 99"}});
  r.push_back({"ptdp_tensor_cast", "integer source", [&] { return ptdp_tensor_cast(f.ints, PTDP_DTYPE_F32, &o.tensor); },
               PTDP_ERR_INVALID_ARGUMENT, {"src has dtype i64"}});
  handle_rows(r, "ptdp_tensor_fill", "tensor", "ptdp_tensor", f.dead_tensor,
              [&](ptdp_tensor t) { return ptdp_tensor_fill(t, 1.0); });
  r.push_back({"ptdp_tensor_fill", "NaN into integers", [&] { return ptdp_tensor_fill(f.ints, bad::kNaN); },
               PTDP_ERR_INVALID_ARGUMENT, {"value", "i64"}});
  r.push_back({"ptdp_tensor_fill", "Inf into integers", [&] { return ptdp_tensor_fill(f.ints, bad::kInf); },
               PTDP_ERR_INVALID_ARGUMENT, {"value", "i64"}});
  r.push_back({"ptdp_tensor_fill", "fraction into integers", [&] { return ptdp_tensor_fill(f.ints, 1.5); },
               PTDP_ERR_INVALID_ARGUMENT, {"value", "i64"}});
  return r;
}

PTDP_BAD_INPUTS(runtime) {
  std::vector<Row> r;
  r.push_back(null_row("ptdp_runtime_options_init", "options", [] { return ptdp_runtime_options_init(nullptr); }));
  const char* fn = "ptdp_runtime_create";
  r.push_back(null_row(fn, "out", [] { return ptdp_runtime_create(nullptr, nullptr); }));
  options_rows(r, fn, "options", ptdp_runtime_options_init,
               [&](const ptdp_runtime_options* x) { return ptdp_runtime_create(x, &o.runtime); });
  for (double bad_timeout : {bad::kNaN, bad::kInf}) {  // <= 0 means the default
    r.push_back(bad::field_row<ptdp_runtime_options>(
        fn, "comm_timeout_s " + std::to_string(bad_timeout), ptdp_runtime_options_init,
        [=](ptdp_runtime_options& x) {
          x.use_mpi = 0;
          x.comm_timeout_s = bad_timeout;
        },
        [&](const ptdp_runtime_options* x) { return ptdp_runtime_create(x, &o.runtime); }, {"options->comm_timeout_s"}));
  }
  r.push_back(bad::field_row<ptdp_runtime_options>(
      fn, "use_mpi 2", ptdp_runtime_options_init, [](ptdp_runtime_options& x) { x.use_mpi = 2; },
      [&](const ptdp_runtime_options* x) { return ptdp_runtime_create(x, &o.runtime); }, {"options->use_mpi = 2"}));
  r.push_back(bad::field_row<ptdp_runtime_options>(
      fn, "cpu_threads -1", ptdp_runtime_options_init,
      [](ptdp_runtime_options& x) {
        x.use_mpi = 0;
        x.cpu_threads = -1;
      },
      [&](const ptdp_runtime_options* x) { return ptdp_runtime_create(x, &o.runtime); },
      {"options->cpu_threads = -1 is negative"}));
  r.push_back(null_row("ptdp_runtime_create_from_fortran", "out",
                       [] { return ptdp_runtime_create_from_fortran(nullptr, 0, nullptr); }));
  options_rows(r, "ptdp_runtime_create_from_fortran", "options", ptdp_runtime_options_init,
               [&](const ptdp_runtime_options* x) { return ptdp_runtime_create_from_fortran(x, 0, &o.runtime); });

  r.push_back({"ptdp_runtime_destroy", "destroyed", [&] { return ptdp_runtime_destroy(f.dead_runtime); },
               PTDP_ERR_INVALID_ARGUMENT, {"runtime is not a live ptdp_runtime"}});
  r.push_back({"ptdp_runtime_destroy", "groups still exist", [&] { return ptdp_runtime_destroy(f.runtime); },
               PTDP_ERR_INVALID_STATE, {"destroy them first"}});
  handle_rows(r, "ptdp_runtime_world", "runtime", "ptdp_runtime", f.dead_runtime,
              [&](ptdp_runtime h) { return ptdp_runtime_world(h, &o.i32[0], &o.i32[1]); });
  handle_rows(r, "ptdp_runtime_local", "runtime", "ptdp_runtime", f.dead_runtime,
              [&](ptdp_runtime h) { return ptdp_runtime_local(h, &o.i32[0], &o.i32[1]); });
  handle_rows(r, "ptdp_runtime_gpu", "runtime", "ptdp_runtime", f.dead_runtime,
              [&](ptdp_runtime h) { return ptdp_runtime_gpu(h, &o.i32[0]); });
  r.push_back(null_row("ptdp_runtime_gpu", "gpu", [&] { return ptdp_runtime_gpu(f.runtime, nullptr); }));
  handle_rows(r, "ptdp_runtime_cpu_threads", "runtime", "ptdp_runtime", f.dead_runtime,
              [&](ptdp_runtime h) { return ptdp_runtime_cpu_threads(h, &o.i32[0]); });
  r.push_back(null_row("ptdp_runtime_cpu_threads", "threads",
                       [&] { return ptdp_runtime_cpu_threads(f.runtime, nullptr); }));

  // The flight recorder and abort (a live runtime is never aborted here: the fixture uses it).
  handle_rows(r, "ptdp_runtime_abort", "runtime", "ptdp_runtime", f.dead_runtime,
              [&](ptdp_runtime h) { return ptdp_runtime_abort(h); });
  const char* dump = "ptdp_flight_recorder_dump";
  handle_rows(r, dump, "runtime", "ptdp_runtime", f.dead_runtime,
              [&](ptdp_runtime h) { return ptdp_flight_recorder_dump(h, f.dir.c_str()); });
  r.push_back({dump, "NULL dir without PTDP_FLIGHT_RECORDER_DIR",
               [&] {
                 unsetenv("PTDP_FLIGHT_RECORDER_DIR");
                 return ptdp_flight_recorder_dump(f.runtime, nullptr);
               },
               PTDP_ERR_INVALID_ARGUMENT, {"dir is NULL", "PTDP_FLIGHT_RECORDER_DIR"}});
  r.push_back({dump, "empty dir", [&] { return ptdp_flight_recorder_dump(f.runtime, ""); },
               PTDP_ERR_INVALID_ARGUMENT, {"dir is an empty string"}});
  r.push_back({dump, "missing dir",
               [&] { return ptdp_flight_recorder_dump(f.runtime, (f.dir + "/no-such-dir").c_str()); }, PTDP_ERR_IO,
               {"no-such-dir"}});
  const char* fa = "ptdp_flight_analyze";
  r.push_back(null_row(fa, "dir", [&] { return ptdp_flight_analyze(nullptr, o.text, sizeof o.text, &o.sz[0], &o.i32[0]); }));
  r.push_back(null_row(fa, "length", [&] { return ptdp_flight_analyze(f.dir.c_str(), o.text, sizeof o.text, nullptr, &o.i32[0]); }));
  r.push_back({fa, "missing dir",
               [&] { return ptdp_flight_analyze((f.dir + "/no-such-dir").c_str(), o.text, sizeof o.text, &o.sz[0], &o.i32[0]); },
               PTDP_ERR_IO, {"no-such-dir"}});
  r.push_back({fa, "a directory with no record",
               [&] { return ptdp_flight_analyze(f.dir.c_str(), o.text, sizeof o.text, &o.sz[0], &o.i32[0]); },
               PTDP_ERR_IO, {"flight-rank"}});
  return r;
}

PTDP_BAD_INPUTS(groups) {
  std::vector<Row> r;
  r.push_back(null_row("ptdp_parallel_options_init", "options", [] { return ptdp_parallel_options_init(nullptr); }));
  const char* lm = "ptdp_layout_members";
  r.push_back(null_row(lm, "count", [&] { return ptdp_layout_members(nullptr, 1, 0, PTDP_GROUP_WORLD, o.i32, 8, nullptr); }));
  r.push_back({lm, "world_size 0", [&] { return ptdp_layout_members(nullptr, 0, 0, PTDP_GROUP_WORLD, o.i32, 8, &o.i32[7]); },
               PTDP_ERR_INVALID_ARGUMENT, {"world_size = 0"}});
  r.push_back({lm, "negative world_rank",
               [&] { return ptdp_layout_members(nullptr, 1, -1, PTDP_GROUP_WORLD, o.i32, 8, &o.i32[7]); },
               PTDP_ERR_INVALID_ARGUMENT, {"world_rank = -1"}});
  r.push_back({lm, "kind out of range",
               [&] { return ptdp_layout_members(nullptr, 1, 0, static_cast<ptdp_group_kind>(99), o.i32, 8, &o.i32[7]); },
               PTDP_ERR_INVALID_ARGUMENT, {"kind = 99"}});
  r.push_back({lm, "negative capacity",
               [&] { return ptdp_layout_members(nullptr, 1, 0, PTDP_GROUP_WORLD, o.i32, -1, &o.i32[7]); },
               PTDP_ERR_INVALID_ARGUMENT, {"capacity = -1"}});
  options_rows(r, lm, "options", ptdp_parallel_options_init, [&](const ptdp_parallel_options* x) {
    return ptdp_layout_members(x, 1, 0, PTDP_GROUP_WORLD, o.i32, 6, &o.i32[7]);
  });
  const char* cl = "ptdp_layout_chunk_layers";
  r.push_back({cl, "negative num_layers", [&] { return ptdp_layout_chunk_layers(nullptr, -4, 0, 0, &o.i32[0], &o.i32[1]); },
               PTDP_ERR_INVALID_ARGUMENT, {"num_layers = -4"}});
  r.push_back({cl, "negative pipeline_rank",
               [&] { return ptdp_layout_chunk_layers(nullptr, 4, -1, 0, &o.i32[0], &o.i32[1]); },
               PTDP_ERR_INVALID_ARGUMENT, {"pipeline_rank = -1"}});
  r.push_back({cl, "negative virtual_stage",
               [&] { return ptdp_layout_chunk_layers(nullptr, 4, 0, -1, &o.i32[0], &o.i32[1]); },
               PTDP_ERR_INVALID_ARGUMENT, {"virtual_stage = -1"}});
  options_rows(r, cl, "options", ptdp_parallel_options_init, [&](const ptdp_parallel_options* x) {
    return ptdp_layout_chunk_layers(x, 4, 0, 0, &o.i32[0], &o.i32[1]);
  });

  const char* gc = "ptdp_groups_create";
  handle_rows(r, gc, "runtime", "ptdp_runtime", f.dead_runtime,
              [&](ptdp_runtime h) { return ptdp_groups_create(h, nullptr, &o.groups); });
  r.push_back(null_row(gc, "out", [&] { return ptdp_groups_create(f.runtime, nullptr, nullptr); }));
  options_rows(r, gc, "options", ptdp_parallel_options_init,
               [&](const ptdp_parallel_options* x) { return ptdp_groups_create(f.runtime, x, &o.groups); });
  for (int32_t t : {0, -1, 3}) {
    r.push_back(bad::field_row<ptdp_parallel_options>(
        gc, "tensor_model_parallel_size " + std::to_string(t), ptdp_parallel_options_init,
        [=](ptdp_parallel_options& x) { x.tensor_model_parallel_size = t; },
        [&](const ptdp_parallel_options* x) { return ptdp_groups_create(f.runtime, x, &o.groups); },
        {t > 0 ? "tensor size 3" : "options->tensor_model_parallel_size = " + std::to_string(t)}));
  }
  r.push_back(bad::field_row<ptdp_parallel_options>(
      gc, "pipeline_model_parallel_size -2", ptdp_parallel_options_init,
      [](ptdp_parallel_options& x) { x.pipeline_model_parallel_size = -2; },
      [&](const ptdp_parallel_options* x) { return ptdp_groups_create(f.runtime, x, &o.groups); },
      {"options->pipeline_model_parallel_size = -2"}));
  r.push_back({"ptdp_groups_destroy", "destroyed", [&] { return ptdp_groups_destroy(f.dead_groups); },
               PTDP_ERR_INVALID_ARGUMENT, {"groups is not a live ptdp_groups"}});
  r.push_back({"ptdp_groups_destroy", "models still exist", [&] { return ptdp_groups_destroy(f.groups); },
               PTDP_ERR_INVALID_STATE, {"destroy them first"}});
  for (const char* fn : {"ptdp_groups_rank", "ptdp_groups_size"}) {
    auto call = [fn](ptdp_groups g, ptdp_group_kind k, int32_t* out) {
      return std::string(fn) == "ptdp_groups_rank" ? ptdp_groups_rank(g, k, out) : ptdp_groups_size(g, k, out);
    };
    handle_rows(r, fn, "groups", "ptdp_groups", f.dead_groups,
                [&, call](ptdp_groups g) { return call(g, PTDP_GROUP_WORLD, &o.i32[0]); });
    r.push_back({fn, "kind out of range", [&, call] { return call(f.groups, static_cast<ptdp_group_kind>(99), &o.i32[0]); },
                 PTDP_ERR_INVALID_ARGUMENT, {"kind = 99"}});
    r.push_back({fn, "negative kind", [&, call] { return call(f.groups, static_cast<ptdp_group_kind>(-1), &o.i32[0]); },
                 PTDP_ERR_INVALID_ARGUMENT, {"kind = -1"}});
    r.push_back({fn, "NULL out", [&, call] { return call(f.groups, PTDP_GROUP_WORLD, nullptr); },
                 PTDP_ERR_INVALID_ARGUMENT, {"is NULL"}});
  }
  const char* gm = "ptdp_groups_members";
  handle_rows(r, gm, "groups", "ptdp_groups", f.dead_groups,
              [&](ptdp_groups g) { return ptdp_groups_members(g, PTDP_GROUP_WORLD, o.i32, 4, &o.i32[7]); });
  r.push_back({gm, "kind out of range",
               [&] { return ptdp_groups_members(f.groups, static_cast<ptdp_group_kind>(99), o.i32, 4, &o.i32[7]); },
               PTDP_ERR_INVALID_ARGUMENT, {"kind = 99"}});
  r.push_back({gm, "negative capacity", [&] { return ptdp_groups_members(f.groups, PTDP_GROUP_WORLD, o.i32, -1, &o.i32[7]); },
               PTDP_ERR_INVALID_ARGUMENT, {"capacity = -1"}});
  r.push_back(null_row(gm, "count", [&] { return ptdp_groups_members(f.groups, PTDP_GROUP_WORLD, o.i32, 4, nullptr); }));
  return r;
}

PTDP_BAD_INPUTS(collectives) {
  std::vector<Row> r;
  const auto bad_kind = static_cast<ptdp_group_kind>(99);
  const auto bad_op = static_cast<ptdp_reduce_op>(99);
  // all_reduce
  handle_rows(r, "ptdp_all_reduce", "groups", "ptdp_groups", f.dead_groups, [&](ptdp_groups g) {
    return ptdp_all_reduce(g, PTDP_GROUP_WORLD, f.tensor, PTDP_REDUCE_SUM, &o.work);
  });
  handle_rows(r, "ptdp_all_reduce", "tensor", "ptdp_tensor", f.dead_tensor, [&](ptdp_tensor t) {
    return ptdp_all_reduce(f.groups, PTDP_GROUP_WORLD, t, PTDP_REDUCE_SUM, &o.work);
  });
  r.push_back({"ptdp_all_reduce", "kind out of range",
               [&] { return ptdp_all_reduce(f.groups, bad_kind, f.tensor, PTDP_REDUCE_SUM, &o.work); },
               PTDP_ERR_INVALID_ARGUMENT, {"kind = 99"}});
  r.push_back({"ptdp_all_reduce", "op out of range",
               [&] { return ptdp_all_reduce(f.groups, PTDP_GROUP_WORLD, f.tensor, bad_op, &o.work); },
               PTDP_ERR_INVALID_ARGUMENT, {"op = 99"}});
  // reduce_scatter
  handle_rows(r, "ptdp_reduce_scatter", "groups", "ptdp_groups", f.dead_groups, [&](ptdp_groups g) {
    return ptdp_reduce_scatter(g, PTDP_GROUP_WORLD, f.tensor, f.tensor, PTDP_REDUCE_SUM, &o.work);
  });
  handle_rows(r, "ptdp_reduce_scatter", "in", "ptdp_tensor", f.dead_tensor, [&](ptdp_tensor t) {
    return ptdp_reduce_scatter(f.groups, PTDP_GROUP_WORLD, t, f.tensor, PTDP_REDUCE_SUM, &o.work);
  });
  handle_rows(r, "ptdp_reduce_scatter", "out", "ptdp_tensor", f.dead_tensor, [&](ptdp_tensor t) {
    return ptdp_reduce_scatter(f.groups, PTDP_GROUP_WORLD, f.tensor, t, PTDP_REDUCE_SUM, &o.work);
  });
  r.push_back({"ptdp_reduce_scatter", "op out of range",
               [&] { return ptdp_reduce_scatter(f.groups, PTDP_GROUP_WORLD, f.tensor, f.hidden, bad_op, &o.work); },
               PTDP_ERR_INVALID_ARGUMENT, {"op = 99"}});
  r.push_back({"ptdp_reduce_scatter", "kind out of range",
               [&] { return ptdp_reduce_scatter(f.groups, bad_kind, f.tensor, f.hidden, PTDP_REDUCE_SUM, &o.work); },
               PTDP_ERR_INVALID_ARGUMENT, {"kind = 99"}});
  // all_gather
  handle_rows(r, "ptdp_all_gather", "groups", "ptdp_groups", f.dead_groups, [&](ptdp_groups g) {
    return ptdp_all_gather(g, PTDP_GROUP_WORLD, f.tensor, f.hidden, &o.work);
  });
  handle_rows(r, "ptdp_all_gather", "in", "ptdp_tensor", f.dead_tensor, [&](ptdp_tensor t) {
    return ptdp_all_gather(f.groups, PTDP_GROUP_WORLD, t, f.hidden, &o.work);
  });
  handle_rows(r, "ptdp_all_gather", "out", "ptdp_tensor", f.dead_tensor, [&](ptdp_tensor t) {
    return ptdp_all_gather(f.groups, PTDP_GROUP_WORLD, f.tensor, t, &o.work);
  });
  r.push_back({"ptdp_all_gather", "kind out of range",
               [&] { return ptdp_all_gather(f.groups, bad_kind, f.tensor, f.hidden, &o.work); },
               PTDP_ERR_INVALID_ARGUMENT, {"kind = 99"}});
  // broadcast
  handle_rows(r, "ptdp_broadcast", "groups", "ptdp_groups", f.dead_groups,
              [&](ptdp_groups g) { return ptdp_broadcast(g, PTDP_GROUP_WORLD, f.tensor, 0, &o.work); });
  handle_rows(r, "ptdp_broadcast", "tensor", "ptdp_tensor", f.dead_tensor,
              [&](ptdp_tensor t) { return ptdp_broadcast(f.groups, PTDP_GROUP_WORLD, t, 0, &o.work); });
  r.push_back({"ptdp_broadcast", "negative root", [&] { return ptdp_broadcast(f.groups, PTDP_GROUP_WORLD, f.tensor, -1, &o.work); },
               PTDP_ERR_INVALID_ARGUMENT, {"root = -1"}});
  r.push_back({"ptdp_broadcast", "root outside the group",
               [&] { return ptdp_broadcast(f.groups, PTDP_GROUP_WORLD, f.tensor, 1, &o.work); },
               PTDP_ERR_INVALID_ARGUMENT, {"root = 1"}});
  // send / recv
  handle_rows(r, "ptdp_send", "groups", "ptdp_groups", f.dead_groups,
              [&](ptdp_groups g) { return ptdp_send(g, PTDP_GROUP_WORLD, f.tensor, 0, 0, &o.work); });
  handle_rows(r, "ptdp_send", "tensor", "ptdp_tensor", f.dead_tensor,
              [&](ptdp_tensor t) { return ptdp_send(f.groups, PTDP_GROUP_WORLD, t, 0, 0, &o.work); });
  r.push_back({"ptdp_send", "negative peer", [&] { return ptdp_send(f.groups, PTDP_GROUP_WORLD, f.tensor, -1, 0, &o.work); },
               PTDP_ERR_INVALID_ARGUMENT, {"peer = -1"}});
  r.push_back({"ptdp_send", "negative tag", [&] { return ptdp_send(f.groups, PTDP_GROUP_WORLD, f.tensor, 0, -1, &o.work); },
               PTDP_ERR_INVALID_ARGUMENT, {"tag = -1"}});
  handle_rows(r, "ptdp_recv", "groups", "ptdp_groups", f.dead_groups,
              [&](ptdp_groups g) { return ptdp_recv(g, PTDP_GROUP_WORLD, f.tensor, 0, 0, &o.work); });
  handle_rows(r, "ptdp_recv", "tensor", "ptdp_tensor", f.dead_tensor,
              [&](ptdp_tensor t) { return ptdp_recv(f.groups, PTDP_GROUP_WORLD, t, 0, 0, &o.work); });
  r.push_back({"ptdp_recv", "peer outside the group", [&] { return ptdp_recv(f.groups, PTDP_GROUP_WORLD, f.tensor, 7, 0, &o.work); },
               PTDP_ERR_INVALID_ARGUMENT, {"peer = 7"}});
  // batch_send_recv
  handle_rows(r, "ptdp_batch_send_recv", "groups", "ptdp_groups", f.dead_groups,
              [&](ptdp_groups g) { return ptdp_batch_send_recv(g, PTDP_GROUP_WORLD, nullptr, 0, &o.work); });
  r.push_back(null_row("ptdp_batch_send_recv", "ops",
                       [&] { return ptdp_batch_send_recv(f.groups, PTDP_GROUP_WORLD, nullptr, 1, &o.work); }));
  r.push_back({"ptdp_batch_send_recv", "negative count",
               [&] { return ptdp_batch_send_recv(f.groups, PTDP_GROUP_WORLD, nullptr, -1, &o.work); },
               PTDP_ERR_INVALID_ARGUMENT, {"count = -1"}});
  r.push_back({"ptdp_batch_send_recv", "op kind out of range", [&] {
                 ptdp_p2p_op op{static_cast<ptdp_p2p_kind>(9), f.tensor, 0, 0};
                 return ptdp_batch_send_recv(f.groups, PTDP_GROUP_WORLD, &op, 1, &o.work);
               }, PTDP_ERR_INVALID_ARGUMENT, {"ops[0].kind = 9"}});
  r.push_back({"ptdp_batch_send_recv", "op tensor destroyed", [&] {
                 ptdp_p2p_op op{PTDP_P2P_SEND, f.dead_tensor, 0, 0};
                 return ptdp_batch_send_recv(f.groups, PTDP_GROUP_WORLD, &op, 1, &o.work);
               }, PTDP_ERR_INVALID_ARGUMENT, {"ops[0].tensor is not a live ptdp_tensor"}});
  // barrier
  handle_rows(r, "ptdp_barrier", "groups", "ptdp_groups", f.dead_groups,
              [&](ptdp_groups g) { return ptdp_barrier(g, PTDP_GROUP_WORLD, &o.work); });
  r.push_back({"ptdp_barrier", "kind out of range", [&] { return ptdp_barrier(f.groups, bad_kind, &o.work); },
               PTDP_ERR_INVALID_ARGUMENT, {"kind = 99"}});
  // work
  handle_rows(r, "ptdp_work_wait", "work", "ptdp_work", f.dead_work, [&](ptdp_work w) { return ptdp_work_wait(w); });
  handle_rows(r, "ptdp_work_test", "work", "ptdp_work", f.dead_work, [&](ptdp_work w) { return ptdp_work_test(w, &o.i32[0]); });
  r.push_back(null_row("ptdp_work_test", "done", [&] { return ptdp_work_test(f.work, nullptr); }));
  r.push_back({"ptdp_work_destroy", "destroyed", [&] { return ptdp_work_destroy(f.dead_work); }, PTDP_ERR_INVALID_ARGUMENT,
               {"work is not a live ptdp_work"}});
  r.push_back({"ptdp_work_destroy", "never created", [&] { return ptdp_work_destroy(static_cast<ptdp_work>(bad::bogus())); },
               PTDP_ERR_INVALID_ARGUMENT, {"work is not a live ptdp_work"}});
  return r;
}
