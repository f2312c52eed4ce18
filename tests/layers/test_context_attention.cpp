// Context parallelism's core attentions under mpiexec, the world as the context group (c = the
// world size, 2 or 4): each rank holds its chunks r and 2c - 1 - r of a sequence whose q, k and v
// every rank knows, and
// - ring attention (the block-pair kernels, keys and values passed around the ring) gives this
//   rank's rows of the whole sequence's fused attention and of its q/k/v gradients, up to the
//   order of fp32 sums;
// - the all-gather fallback (for backends without block-pair kernels; on the CPU only reachable
//   by building it directly) gives those rows bit for bit, around the fused and the unfused
//   strategy alike,
// with grouped-query heads, packed documents and attention dropout (the serial run's mask).
#include <mpi.h>

#include <cstdio>
#include <string>

#include "attention_test.h"
#include "core/comm/runtime.h"

namespace {

int g_failed = 0, g_passed = 0, g_rank = 0;

void expect(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
    return;
  }
  ++g_failed;
  std::fprintf(stderr, "[rank %d] FAIL %s\n", g_rank, what.c_str());
}

using ptdp::Tensor;

struct Pass {
  Tensor ctx, dqkv;
};

Pass run(ptdp::CoreAttention& core, const Tensor& qkv, const Tensor& dctx, const ptdp::AttentionBatch& batch,
         const ptdp::Step& step) {
  Pass p;
  p.ctx = core.forward(qkv, batch, step);
  p.dqkv = core.backward(dctx, batch, step);
  return p;
}

void check_case(ptdp::Communicator& world, bool documents, float dropout) {
  const int64_t b = 2;
  const ptdp::LayerConfig cfg = attention_test::config(dropout);
  ptdp::TensorParallel cp_group;
  cp_group.cp = ptdp::ContextParallel{&world, world.rank(), world.size()};
  const ptdp::CoreAttentionSpec whole_spec(cfg, 1, ptdp::TensorParallel{}, "layer");
  const ptdp::CoreAttentionSpec spec(cfg, 1, cp_group, "layer");
  const ptdp::ContextParallel& cp = cp_group.cp;
  const int64_t s = cfg.seq_length;
  const Tensor qkv = attention_test::random(s * b, spec.qkv_cols(), 11);   // [s*b, g*(a/g+2)*dh]
  const Tensor dctx = attention_test::random(s * b, spec.ctx_cols(), 12);  // [s*b, a*dh]
  const Tensor starts = attention_test::documents(b, s);                   // [b, s] i32
  const ptdp::AttentionBatch batch{b, documents ? starts.data<int32_t>() : nullptr};
  const Tensor my_qkv = ptdp::context_rows(cp, qkv, spec.qkv_cols());    // [s/c*b, g*(a/g+2)*dh]
  const Tensor my_dctx = ptdp::context_rows(cp, dctx, spec.ctx_cols());  // [s/c*b, a*dh]
  ptdp::Step step;
  step.iteration = 3;
  step.microbatch = 2;
  const std::string what = std::string(documents ? "with documents" : "causal") + ", attention dropout " +
                           std::to_string(dropout) + ", c = " + std::to_string(cp.size);

  const Pass fused = run(*ptdp::make_fused_attention(whole_spec), qkv, dctx, batch, step);
  const Tensor fused_ctx = ptdp::context_rows(cp, fused.ctx, spec.ctx_cols());     // [s/c*b, a*dh]
  const Tensor fused_dqkv = ptdp::context_rows(cp, fused.dqkv, spec.qkv_cols());  // [s/c*b, g*(a/g+2)*dh]
  const Pass ring = run(*ptdp::make_ring_attention(spec), my_qkv, my_dctx, batch, step);
  expect(attention_test::max_diff(ring.ctx, fused_ctx) < 1e-5, "ring attention's context, " + what);
  expect(attention_test::max_diff(ring.dqkv, fused_dqkv) < 1e-5, "ring attention's q/k/v gradients, " + what);

  const Pass gathered_fused = run(*ptdp::make_all_gather_attention(spec, ptdp::make_fused_attention(spec)), my_qkv,
                                  my_dctx, batch, step);
  expect(attention_test::same_bits(gathered_fused.ctx, fused_ctx), "all-gather of fused: the context, " + what);
  expect(attention_test::same_bits(gathered_fused.dqkv, fused_dqkv), "all-gather of fused: the gradients, " + what);

  const Pass unfused = run(*ptdp::make_unfused_attention(whole_spec), qkv, dctx, batch, step);
  const Pass gathered_unfused = run(*ptdp::make_all_gather_attention(spec, ptdp::make_unfused_attention(spec)),
                                    my_qkv, my_dctx, batch, step);
  expect(attention_test::same_bits(gathered_unfused.ctx, ptdp::context_rows(cp, unfused.ctx, spec.ctx_cols())),
         "all-gather of unfused: the context, " + what);
  expect(attention_test::same_bits(gathered_unfused.dqkv, ptdp::context_rows(cp, unfused.dqkv, spec.qkv_cols())),
         "all-gather of unfused: the gradients, " + what);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  try {
    ptdp::RuntimeOptions o;
    o.timeout_s = 60;
    auto rt = ptdp::Runtime::create(o);
    for (const bool documents : {false, true}) {
      for (const float dropout : {0.0f, 0.2f}) check_case(rt->world(), documents, dropout);
    }
  } catch (const std::exception& e) {
    expect(false, std::string("threw: ") + e.what());
  }
  int failed = 0, passed = 0;
  MPI_Allreduce(&g_failed, &failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&g_passed, &passed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("test_context_attention: %d passed, %d failed\n", passed, failed);
  MPI_Finalize();
  return failed == 0 ? 0 : 1;
}
