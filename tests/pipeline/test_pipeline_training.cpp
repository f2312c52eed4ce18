// A GPT trained for one global batch through every pipeline schedule, under mpiexec, equals the
// serial run of the same seed: the loss and every gathered gradient, to 1e-5 relative.
//
// Usage: test_pipeline_training [trace-path]. The serial reference runs in the same job on
// groups with t = p = 1 (each rank then holds the whole model). With 2 ranks: p = 2 (v = 1, 2).
// With 4 ranks: p = 4 (v = 1, 2), p = 2 with t = 2 (v = 1, 2, scatter/gather on and off) and
// p = 2 with d = 2. Each layout also runs ZB-V and DualPipeV (v = 2 in the V placement) and
// interleaved zero bubble; with a trace path, a ZB-V run writes a second trace beside it.
#include <algorithm>
#include <fstream>
#include <sstream>

#include "comm_test.h"

namespace {

using ct::expect;

ptdp_gpt_options gpt_options(int layers) {
  ptdp_gpt_options o;
  ptdp_gpt_options_init(&o);
  o.num_layers = layers;
  o.hidden_size = 16;
  o.num_attention_heads = 4;
  o.vocab_size = 53;  // not a multiple of 4 * t: the padding is real
  o.make_vocab_size_divisible_by = 4;
  o.seq_length = 4;
  o.hidden_dropout = 0.1f;
  o.attention_dropout = 0.1f;
  o.init_method_std = 0.1f;
  o.seed = 77;
  return o;
}

struct Batch {
  int m, b, s;
  std::vector<int32_t> tokens, labels;
};

// A batch that depends on the data-parallel index, so replicas train on different data.
Batch make_batch(int m, int b, int s, int vocab, int dp) {
  Batch x{m, b, s, {}, {}};
  for (int i = 0; i < m * b * s; ++i) {
    x.tokens.push_back((i * 31 + 7 + dp * 13) % vocab);
    x.labels.push_back((i * 17 + 3 + dp * 5) % vocab);
  }
  return x;
}

struct Result {
  float loss = 0;
  std::vector<std::vector<float>> grads;  // per parameter, first `vocab` rows for the embeddings
  std::vector<std::string> names;
};

// Gradients at global shape of every parameter (true vocabulary rows only), in list order.
void collect(ptdp_model m, int vocab, Result& r) {
  int32_t n = 0;
  CT_OK(ptdp_model_num_params(m, &n));
  for (int32_t i = 0; i < n; ++i) {
    char name[160];
    int32_t nd = 0, pd = 0;
    int64_t shape[2] = {0, 1};
    CT_OK(ptdp_model_param_info(m, i, name, sizeof name, &nd, shape, &pd));
    const int64_t cols = nd == 2 ? shape[1] : 1;
    std::vector<float> g(static_cast<std::size_t>(shape[0] * cols));
    CT_OK(ptdp_model_get_grad(m, name, g.data(), g.size() * sizeof(float)));
    const std::string nm = name;
    if (nm == "embedding.word_embeddings.weight" || nm == "output_layer.weight") {
      for (std::size_t k = static_cast<std::size_t>(vocab * cols); k < g.size(); ++k)
        expect(g[k] == 0.0f, nm + ": padded vocabulary rows have zero gradient");
      g.resize(static_cast<std::size_t>(vocab * cols));
    }
    r.names.push_back(nm);
    r.grads.push_back(g);
  }
}

Result serial(ptdp_runtime rt, const ptdp_gpt_options& o, const Batch& x) {
  Result r;
  ptdp_groups g = nullptr;
  if (!CT_OK(ptdp_groups_create(rt, nullptr, &g)).empty()) return r;
  ptdp_model m = nullptr;
  if (CT_OK(ptdp_model_create(g, &o, &m)).empty()) {
    double sum = 0;
    for (int mb = 0; mb < x.m; ++mb) {
      float l = 0;
      const std::size_t off = static_cast<std::size_t>(mb * x.b * x.s);
      CT_OK(ptdp_model_forward_backward(m, x.tokens.data() + off, x.labels.data() + off, x.b, 5, mb,
                                        1.0f / static_cast<float>(x.m), nullptr, &l));
      sum += l;
    }
    r.loss = static_cast<float>(sum / x.m);
    collect(m, o.vocab_size, r);
    CT_OK(ptdp_model_destroy(m));
  }
  CT_OK(ptdp_groups_destroy(g));
  return r;
}

bool close(float a, float b) { return std::fabs(a - b) <= 1e-5f * std::max(std::fabs(a), std::fabs(b)) + 1e-7f; }

void compare(const Result& got, const Result& want, const std::string& what) {
  expect(close(got.loss, want.loss), what + ": loss", std::to_string(want.loss), std::to_string(got.loss));
  if (!expect(got.names == want.names, what + ": parameter list")) return;
  for (std::size_t i = 0; i < got.grads.size(); ++i) {
    std::size_t bad = 0;
    double worst = 0;
    for (std::size_t k = 0; k < got.grads[i].size(); ++k) {
      const float a = got.grads[i][k], b = want.grads[i][k];
      if (!close(a, b)) ++bad;
      worst = std::max(worst, static_cast<double>(std::fabs(a - b)));
    }
    expect(bad == 0, what + ": gradient of " + got.names[i], "all within 1e-5 relative",
           std::to_string(bad) + " elements off (worst |diff| " + std::to_string(worst) + ")");
  }
}

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Compute actions plus communication batches (maximal runs of send/recv) of every rank.
int expected_spans(ptdp_schedule s, int p) {
  int spans = 0;
  for (int r = 0; r < p; ++r) {
    int32_t n = 0;
    ptdp_schedule_num_actions(s, r, &n);
    std::vector<ptdp_action> a(static_cast<std::size_t>(n));
    ptdp_schedule_actions(s, r, a.data(), n, &n);
    bool in_batch = false;
    for (const ptdp_action& x : a) {
      const bool comm = x.kind >= PTDP_ACTION_SEND_ACTIVATION;
      if (!comm) ++spans;
      else if (!in_batch) ++spans;
      in_batch = comm;
    }
  }
  return spans;
}

void run(ptdp_runtime rt, int W, int t, int p, int v, ptdp_schedule_kind kind, int sg, const char* trace) {
  const int d = W / (t * p);
  const int layers = 2 * p * v;
  const int m = 2 * p;
  const int b = 2;
  const ptdp_gpt_options o = gpt_options(layers);
  ptdp_parallel_options po;
  ptdp_parallel_options_init(&po);
  po.tensor_model_parallel_size = t;
  po.pipeline_model_parallel_size = p;
  po.virtual_pipeline_model_parallel_size = v;
  const bool v_shaped = kind == PTDP_SCHEDULE_ZB_V || kind == PTDP_SCHEDULE_DUALPIPE_V;
  po.pipeline_chunk_placement = v_shaped ? PTDP_CHUNK_PLACEMENT_V : PTDP_CHUNK_PLACEMENT_ROUND_ROBIN;
  ptdp_groups g = nullptr;
  const std::string what = "t=" + std::to_string(t) + " p=" + std::to_string(p) + " d=" + std::to_string(d) +
                           " v=" + std::to_string(v) + " schedule " + std::to_string(kind) + " sg=" + std::to_string(sg);
  ct::context(what);
  if (!CT_OK(ptdp_groups_create(rt, &po, &g)).empty()) return;
  int32_t dp = 0;
  CT_OK(ptdp_groups_rank(g, PTDP_GROUP_DATA, &dp));
  const Batch x = make_batch(m, b, o.seq_length, o.vocab_size, dp);
  const Result want = serial(rt, o, x);
  ptdp_model model = nullptr;
  ptdp_schedule s = nullptr;
  if (CT_OK(ptdp_model_create(g, &o, &model)).empty() && CT_OK(ptdp_schedule_create(kind, p, m, v, &s)).empty()) {
    ptdp_pipeline_options opts;
    ptdp_pipeline_options_init(&opts);
    opts.scatter_gather = sg;
    opts.trace_path = trace;
    Result got;
    CT_OK(ptdp_model_pipeline_forward_backward(model, s, x.tokens.data(), x.labels.data(), b, 5, &opts, &got.loss));
    collect(model, o.vocab_size, got);
    compare(got, want, what);
    // The deprecated 0.1 name still links and does the same (a second step: gradients add up).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    float again = 0.0f;
    CT_OK(ptdp_model_train_step(model, s, x.tokens.data(), x.labels.data(), b, 5, &opts, &again));
#pragma GCC diagnostic pop
    expect(again == got.loss, "ptdp_model_train_step (deprecated alias) gives the same loss",
           std::to_string(got.loss), std::to_string(again));
    if (trace && ct::g_rank == 0) {
      std::ifstream f(trace);
      std::stringstream text;
      text << f.rdbuf();
      const std::string json = text.str();
      expect(json.rfind("{\"displayTimeUnit\"", 0) == 0 && json.find("\"traceEvents\": [") != std::string::npos,
             "trace: a Chrome trace object");
      expect(count(json, "{") == count(json, "}") && count(json, "[") == count(json, "]"), "trace: balanced JSON");
      // Every rank of the job wrote its spans; each pipeline's ranks run the schedule once.
      const int want_spans = expected_spans(s, p) * t * d;
      expect(count(json, "\"ph\": \"X\"") == want_spans, "trace: one span per action and batch",
             std::to_string(want_spans), std::to_string(count(json, "\"ph\": \"X\"")));
      expect(count(json, "\"process_name\"") == W, "trace: one process per rank");
    }
  }
  ptdp_schedule_destroy(s);
  ptdp_model_destroy(model);
  CT_OK(ptdp_groups_destroy(g));
}

}  // namespace

int main(int argc, char** argv) {
  int me = 0, W = 1;
  ct::start(&argc, &argv, &me, &W);
  const char* trace = argc > 1 ? argv[1] : nullptr;
  ptdp_runtime rt = nullptr;
  ptdp_runtime_options ro = ct::runtime_options();
  if (CT_OK(ptdp_runtime_create(&ro, &rt)).empty()) {
    const ptdp_schedule_kind flat[] = {PTDP_SCHEDULE_GPIPE, PTDP_SCHEDULE_1F1B, PTDP_SCHEDULE_ZB_H1};
    std::vector<std::pair<int, int>> tp_pairs;  // (t, p)
    if (W == 2) tp_pairs = {{1, 2}};
    if (W == 4) tp_pairs = {{1, 4}, {2, 2}, {1, 2}};
    for (auto [t, p] : tp_pairs) {
      for (ptdp_schedule_kind k : flat) run(rt, W, t, p, 1, k, 1, nullptr);
      run(rt, W, t, p, 2, PTDP_SCHEDULE_INTERLEAVED_1F1B, 1, nullptr);
      if (t > 1) run(rt, W, t, p, 1, PTDP_SCHEDULE_1F1B, 0, nullptr);  // scatter/gather off
      // V placement (ZB-V, DualPipeV) and interleaved zero bubble.
      for (ptdp_schedule_kind k : {PTDP_SCHEDULE_ZB_V, PTDP_SCHEDULE_DUALPIPE_V, PTDP_SCHEDULE_INTERLEAVED_ZB}) {
        run(rt, W, t, p, 2, k, 1, nullptr);
      }
    }
    if (trace) run(rt, W, 1, W, 2, PTDP_SCHEDULE_INTERLEAVED_1F1B, 1, trace);
    if (trace) {
      // The ZB-V trace feeds the simulator: every chunk's F, B and W were measured, and the
      // predicted iteration is no shorter than a rank's measured compute.
      const std::string zbv = std::string(trace) + ".zbv.json";
      run(rt, W, 1, W, 2, PTDP_SCHEDULE_ZB_V, 1, zbv.c_str());
      if (ct::g_rank == 0) {
        ct::context("costs from the ZB-V trace");
        const int n = 2 * W;
        std::vector<double> f(static_cast<std::size_t>(n)), b(f), bi(f), w(f);
        double lat = -1;
        if (CT_OK(ptdp_schedule_costs_from_trace(zbv.c_str(), n, f.data(), b.data(), bi.data(), w.data(), &lat))
                .empty()) {
          bool positive = lat >= 0;
          for (int c = 0; c < n; ++c) positive = positive && f[c] > 0 && bi[c] > 0 && w[c] > 0;
          expect(positive, "every chunk's F, B and W measured");
          ptdp_schedule s = nullptr;
          ptdp_schedule_costs costs;
          ptdp_schedule_costs_init(&costs);
          costs.chunk_forward = f.data();
          costs.chunk_backward = b.data();
          costs.chunk_backward_input = bi.data();
          costs.chunk_backward_weight = w.data();
          costs.p2p_latency = lat;
          double makespan = 0;
          if (CT_OK(ptdp_schedule_create(PTDP_SCHEDULE_ZB_V, W, 2 * W, 2, &s)).empty() &&
              CT_OK(ptdp_schedule_simulate(s, &costs, &makespan, nullptr, nullptr, 0)).empty()) {
            // Rank 0 holds chunks 0 and 2W - 1: its compute is a lower bound of the makespan.
            const double rank0 = 2 * W * (f[0] + bi[0] + w[0] + f[n - 1] + bi[n - 1] + w[n - 1]);
            expect(makespan >= rank0 * 0.999, "predicted ZB-V iteration >= rank 0's compute",
                   ">= " + std::to_string(rank0), std::to_string(makespan));
          }
          ptdp_schedule_destroy(s);
        }
      }
    }
    // A V-placed schedule on a model built round-robin is refused, naming both placements.
    {
      ct::context("placement mismatch");
      ptdp_parallel_options po;
      ptdp_parallel_options_init(&po);
      po.pipeline_model_parallel_size = W;
      po.virtual_pipeline_model_parallel_size = 2;
      ptdp_groups g = nullptr;
      ptdp_model m = nullptr;
      ptdp_schedule s = nullptr;
      const ptdp_gpt_options o = gpt_options(4 * W);
      if (CT_OK(ptdp_groups_create(rt, &po, &g)).empty() && CT_OK(ptdp_model_create(g, &o, &m)).empty() &&
          CT_OK(ptdp_schedule_create(PTDP_SCHEDULE_ZB_V, W, 2 * W, 2, &s)).empty()) {
        const Batch x = make_batch(2 * W, 2, o.seq_length, o.vocab_size, 0);
        float loss = 0;
        ct::expect_message(CT_STATUS(ptdp_model_pipeline_forward_backward(m, s, x.tokens.data(), x.labels.data(), 2, 0,
                                                                          nullptr, &loss),
                                     PTDP_ERR_INVALID_ARGUMENT),
                           {"ZB-V places the model chunks V", "built with the round-robin placement"},
                           "V schedule on a round-robin model");
      }
      ptdp_schedule_destroy(s);
      ptdp_model_destroy(m);
      if (g) CT_OK(ptdp_groups_destroy(g));
      // The V placement takes v = 2.
      po.virtual_pipeline_model_parallel_size = 1;
      po.pipeline_chunk_placement = PTDP_CHUNK_PLACEMENT_V;
      g = nullptr;
      ct::expect_message(CT_STATUS(ptdp_groups_create(rt, &po, &g), PTDP_ERR_INVALID_ARGUMENT),
                         {"V chunk placement holds 2 model chunks per pipeline rank", "got virtual pipeline size 1"},
                         "V placement with v = 1");
      po.virtual_pipeline_model_parallel_size = 2;
      po.pipeline_chunk_placement = 5;
      ct::expect_message(CT_STATUS(ptdp_groups_create(rt, &po, &g), PTDP_ERR_INVALID_ARGUMENT),
                         {"options->pipeline_chunk_placement = 5 is not a ptdp_chunk_placement"},
                         "unknown placement");
    }
    // Layers that do not split evenly over p * v chunks are refused, naming the numbers; a
    // schedule for another layout is refused by the step.
    {
      ct::context("uneven split");
      ptdp_parallel_options po;
      ptdp_parallel_options_init(&po);
      po.pipeline_model_parallel_size = W;
      ptdp_groups g = nullptr;
      if (CT_OK(ptdp_groups_create(rt, &po, &g)).empty()) {
        const ptdp_gpt_options odd = gpt_options(2 * W + 1);
        ptdp_model m = nullptr;
        ct::expect_message(CT_STATUS(ptdp_model_create(g, &odd, &m), PTDP_ERR_INVALID_ARGUMENT),
                           {"num_layers " + std::to_string(2 * W + 1), "p=" + std::to_string(W), "v=1"},
                           "layers not divisible by p");
        expect(m == nullptr, "no model after the refusal");
        const ptdp_gpt_options even = gpt_options(2 * W);
        ptdp_schedule other = nullptr;
        if (CT_OK(ptdp_model_create(g, &even, &m)).empty() &&
            CT_OK(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, 2, 1, &other)).empty()) {
          const Batch x = make_batch(2, 1, even.seq_length, even.vocab_size, 0);
          ct::expect_message(CT_STATUS(ptdp_model_pipeline_forward_backward(m, other, x.tokens.data(), x.labels.data(),
                                                                            1, 0, nullptr, nullptr),
                                       PTDP_ERR_INVALID_ARGUMENT),
                             {"schedule is for p=1"}, "a schedule for another p");
        }
        ptdp_schedule_destroy(other);
        ptdp_model_destroy(m);
        CT_OK(ptdp_groups_destroy(g));
      }
    }
    CT_OK(ptdp_runtime_destroy(rt));
  }
  const int code = ct::finish("test_pipeline_training");
  MPI_Finalize();
  return code;
}
