// The scheduler without the GPT: a user's chunks as callbacks, driven by every schedule under
// mpiexec. Chunk c scales its input by a_c; chunk 0's input for microbatch mb is
// (mb + 1) * [1, 2, 3, 4]; the loss of a microbatch is the sum of the last chunk's output. So
// loss_mb = P * 10 * (mb + 1) with P = prod a_c, and dL/da_c = sum_mb P / a_c * 10 * (mb + 1):
// every rank checks its chunks' weight gradients and the call order against the closed form.
#include <map>

#include "comm_test.h"

namespace {

using ct::expect;

constexpr int kWidth = 4;

double weight(int chunk) { return 1.0 + 0.25 * chunk; }

struct Chunks {
  int chunks = 0;
  std::map<int, double> grad;             // chunk -> accumulated dL/da_c
  std::map<std::pair<int, int>, std::vector<float>> saved_input;  // (mb, chunk) -> x
  std::map<std::pair<int, int>, std::vector<float>> saved_grad;   // (mb, chunk) -> dy, for W
  int calls = 0;
  bool fail_forward = false;
};

std::vector<float> values(ptdp_tensor t) {
  std::vector<float> v(kWidth);
  ptdp_tensor_copy_to_host(t, v.data(), v.size() * sizeof(float));
  return v;
}

ptdp_tensor make(const std::vector<float>& v) {
  const int64_t n = kWidth;
  ptdp_tensor t = nullptr;
  ptdp_tensor_create(nullptr, 1, &n, v.data(), v.size() * sizeof(float), &t);
  return t;
}

ptdp_status forward(void* user, int32_t chunk, int32_t mb, ptdp_tensor input, ptdp_tensor* output) {
  auto& s = *static_cast<Chunks*>(user);
  ++s.calls;
  if (s.fail_forward && chunk == 0 && mb == 1) return PTDP_ERR_INVALID_STATE;
  std::vector<float> x(kWidth);
  if (chunk == 0) {
    for (int i = 0; i < kWidth; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>((mb + 1) * (i + 1));
  } else {
    if (input == nullptr) return PTDP_ERR_INTERNAL;
    x = values(input);
  }
  s.saved_input[{mb, chunk}] = x;
  std::vector<float> y(kWidth);
  for (int i = 0; i < kWidth; ++i) y[static_cast<std::size_t>(i)] = static_cast<float>(weight(chunk)) * x[static_cast<std::size_t>(i)];
  *output = chunk == s.chunks - 1 ? nullptr : make(y);
  return PTDP_SUCCESS;
}

ptdp_status backward_input(void* user, int32_t chunk, int32_t mb, ptdp_tensor grad_output, ptdp_tensor* grad_input) {
  auto& s = *static_cast<Chunks*>(user);
  ++s.calls;
  std::vector<float> dy(kWidth, 1.0f);  // d(sum)/dy on the last chunk
  if (chunk != s.chunks - 1) {
    if (grad_output == nullptr) return PTDP_ERR_INTERNAL;
    dy = values(grad_output);
  }
  s.saved_grad[{mb, chunk}] = dy;
  std::vector<float> dx(kWidth);
  for (int i = 0; i < kWidth; ++i) dx[static_cast<std::size_t>(i)] = static_cast<float>(weight(chunk)) * dy[static_cast<std::size_t>(i)];
  *grad_input = chunk == 0 ? nullptr : make(dx);
  return PTDP_SUCCESS;
}

ptdp_status backward_weight(void* user, int32_t chunk, int32_t mb) {
  auto& s = *static_cast<Chunks*>(user);
  ++s.calls;
  const auto x = s.saved_input.find({mb, chunk});
  const auto dy = s.saved_grad.find({mb, chunk});
  if (x == s.saved_input.end() || dy == s.saved_grad.end()) return PTDP_ERR_INTERNAL;  // W before F or B
  double g = 0;
  for (int i = 0; i < kWidth; ++i) g += static_cast<double>(x->second[static_cast<std::size_t>(i)]) * dy->second[static_cast<std::size_t>(i)];
  s.grad[chunk] += g;
  s.saved_input.erase(x);
  s.saved_grad.erase(dy);
  return PTDP_SUCCESS;
}

void run(ptdp_groups g, int p, int v, int m, ptdp_schedule_kind kind, int pp_rank) {
  ct::context("p=" + std::to_string(p) + " v=" + std::to_string(v) + " m=" + std::to_string(m) + " kind " +
              std::to_string(kind));
  ptdp_schedule s = nullptr;
  if (!CT_OK(ptdp_schedule_create(kind, p, m, v, &s)).empty()) return;
  Chunks chunks;
  chunks.chunks = p * v;
  ptdp_stage_callbacks cb;
  CT_OK(ptdp_stage_callbacks_init(&cb));
  cb.forward = forward;
  cb.backward_input = backward_input;
  cb.backward_weight = backward_weight;
  cb.user_data = &chunks;
  cb.activation_ndim = 1;
  cb.activation_shape[0] = kWidth;
  CT_OK(ptdp_pipeline_run(g, s, &cb, nullptr));
  double prod = 1;
  for (int c = 0; c < p * v; ++c) prod *= weight(c);
  double mb_sum = 0;
  for (int mb = 0; mb < m; ++mb) mb_sum += 10.0 * (mb + 1);
  for (int j = 0; j < v; ++j) {
    const int c = j * p + pp_rank;
    const double want = prod / weight(c) * mb_sum;
    expect(std::fabs(chunks.grad[c] - want) <= 1e-4 * want, "dL/da of chunk " + std::to_string(c),
           std::to_string(want), std::to_string(chunks.grad[c]));
  }
  // F, B (or Bi and W) for each of this rank's (microbatch, chunk).
  expect(chunks.calls == 3 * m * v, "callback calls", std::to_string(3 * m * v), std::to_string(chunks.calls));
  expect(chunks.saved_input.empty() && chunks.saved_grad.empty(), "every microbatch finished");
  ptdp_schedule_destroy(s);
}

}  // namespace

int main(int argc, char** argv) {
  int me = 0, W = 1;
  ct::start(&argc, &argv, &me, &W);
  ptdp_runtime rt = nullptr;
  ptdp_runtime_options ro = ct::runtime_options();
  if (CT_OK(ptdp_runtime_create(&ro, &rt)).empty()) {
    const int p = W;
    for (int v : {1, 2}) {
      if (p == 1 && v > 1) continue;
      ptdp_parallel_options po;
      ptdp_parallel_options_init(&po);
      po.pipeline_model_parallel_size = p;
      po.virtual_pipeline_model_parallel_size = v;
      ptdp_groups g = nullptr;
      if (!CT_OK(ptdp_groups_create(rt, &po, &g)).empty()) continue;
      int32_t pp = 0;
      CT_OK(ptdp_groups_rank(g, PTDP_GROUP_PIPELINE, &pp));
      for (int m : {p, 2 * p, 3 * p}) {
        if (v == 1) {
          for (ptdp_schedule_kind k : {PTDP_SCHEDULE_GPIPE, PTDP_SCHEDULE_1F1B, PTDP_SCHEDULE_ZB_H1}) run(g, p, v, m, k, pp);
        } else {
          run(g, p, v, m, PTDP_SCHEDULE_INTERLEAVED_1F1B, pp);
        }
      }
      // A failing callback stops the run; its status and message come back on that rank.
      if (v == 1 && p == 1) {
        ptdp_schedule s = nullptr;
        CT_OK(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, 2, 1, &s));
        Chunks chunks;
        chunks.chunks = 1;
        chunks.fail_forward = true;
        ptdp_stage_callbacks cb;
        ptdp_stage_callbacks_init(&cb);
        cb.forward = forward;
        cb.backward_input = backward_input;
        cb.user_data = &chunks;
        cb.activation_ndim = 1;
        cb.activation_shape[0] = kWidth;
        ct::expect_message(CT_STATUS(ptdp_pipeline_run(g, s, &cb, nullptr), PTDP_ERR_INVALID_STATE),
                           {"ptdp_pipeline_run", "forward callback of chunk 0, microbatch 1"}, "failing callback");
        // Without backward_weight, schedules that split the backward are refused up front.
        ptdp_schedule zb = nullptr;
        CT_OK(ptdp_schedule_create(PTDP_SCHEDULE_ZB_H1, 1, 2, 1, &zb));
        chunks.fail_forward = false;
        ct::expect_message(CT_STATUS(ptdp_pipeline_run(g, zb, &cb, nullptr), PTDP_ERR_INVALID_ARGUMENT),
                           {"backward_weight"}, "ZB-H1 without a weight callback");
        cb.forward = nullptr;
        ct::expect_message(CT_STATUS(ptdp_pipeline_run(g, s, &cb, nullptr), PTDP_ERR_INVALID_ARGUMENT),
                           {"callbacks->forward is NULL"}, "missing forward callback");
        ptdp_schedule_destroy(zb);
        ptdp_schedule_destroy(s);
      }
      CT_OK(ptdp_groups_destroy(g));
    }
    CT_OK(ptdp_runtime_destroy(rt));
  }
  const int code = ct::finish("test_pipeline_callbacks");
  MPI_Finalize();
  return code;
}
