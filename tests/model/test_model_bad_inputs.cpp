// Bad inputs to the model and layer C API (under mpiexec with t = W; every rank runs every
// check): each returns the documented status with a message naming the function and the
// offending numbers or argument, and has no side effect (outputs, gradients, parameters,
// in-flight microbatches and the groups' dependents are as before).
//
// usage: test_model_bad_inputs
#include "model_test.h"

#include <cstdint>
#include <functional>

namespace {

using ct::expect_message;
using ct::Tensor;

int g_t = 1;  // tensor size of the groups under test

// A handle value no call may write over an output on failure.
template <typename H>
H sentinel() {
  return reinterpret_cast<H>(static_cast<uintptr_t>(0x5e47140));
}

Tensor f32(std::vector<int64_t> shape, const std::vector<float>& v) {
  ptdp_tensor h = nullptr;
  CT_OK(ptdp_tensor_create(nullptr, static_cast<int32_t>(shape.size()), shape.data(), v.data(), v.size() * sizeof(float), &h));
  return Tensor(h);
}

Tensor i32(std::vector<int64_t> shape, const std::vector<int32_t>& v) {
  ptdp_tensor_options o;
  ptdp_tensor_options_init(&o);
  o.dtype = PTDP_DTYPE_I32;
  ptdp_tensor h = nullptr;
  CT_OK(ptdp_tensor_create(&o, static_cast<int32_t>(shape.size()), shape.data(), v.data(), v.size() * sizeof(int32_t), &h));
  return Tensor(h);
}

std::vector<float> host(ptdp_tensor t) {
  int64_t n = 0;
  ptdp_tensor_numel(t, &n);
  std::vector<float> v(static_cast<std::size_t>(n));
  CT_OK(ptdp_tensor_copy_to_host(t, v.data(), v.size() * sizeof(float)));
  return v;
}

// ---- GPT configs ---------------------------------------------------------------------------------

void bad_config(ptdp_groups g, const std::string& what, const std::function<void(ptdp_gpt_options&)>& edit,
                std::initializer_list<std::string> parts) {
  ptdp_gpt_options o = mt::tiny_gpt();
  edit(o);
  ptdp_model out = sentinel<ptdp_model>();
  const std::string msg = CT_STATUS(ptdp_model_create(g, &o, &out), PTDP_ERR_INVALID_ARGUMENT);
  ct::expect(out == sentinel<ptdp_model>(), what + ": the output handle is left alone");
  std::vector<std::string> all = {"ptdp_model_create"};
  all.insert(all.end(), parts.begin(), parts.end());
  for (const std::string& p : all) expect_message(msg, {p}, what);
}

void configs(ptdp_groups g) {
  ct::context("GPT config, t=" + std::to_string(g_t));
  const std::string t = std::to_string(g_t);
  bad_config(g, "num_layers 0", [](auto& o) { o.num_layers = 0; }, {"num_layers", "0"});
  bad_config(g, "hidden_size -8", [](auto& o) { o.hidden_size = -8; }, {"hidden_size", "-8"});
  bad_config(g, "num_attention_heads 0", [](auto& o) { o.num_attention_heads = 0; }, {"num_attention_heads", "0"});
  bad_config(g, "vocab_size 0", [](auto& o) { o.vocab_size = 0; }, {"vocab_size", "0"});
  bad_config(g, "seq_length -1", [](auto& o) { o.seq_length = -1; }, {"seq_length", "-1"});
  bad_config(g, "make_vocab_size_divisible_by 0", [](auto& o) { o.make_vocab_size_divisible_by = 0; },
             {"make_vocab_size_divisible_by", "0"});
  bad_config(g, "ffn_hidden_size -4", [](auto& o) { o.ffn_hidden_size = -4; }, {"ffn_hidden_size", "-4"});
  bad_config(g, "max_position_embeddings -2", [](auto& o) { o.max_position_embeddings = -2; },
             {"max_position_embeddings", "-2"});
  bad_config(g, "hidden 30, heads 4", [](auto& o) { o.hidden_size = 30; }, {"hidden_size 30", "num_attention_heads 4"});
  bad_config(g, "seq_length 16 > max_position_embeddings 8", [](auto& o) { o.seq_length = 16; o.max_position_embeddings = 8; },
             {"seq_length 16", "max_position_embeddings 8"});
  bad_config(g, "hidden_dropout 1", [](auto& o) { o.hidden_dropout = 1.0f; }, {"hidden_dropout", "1.0"});
  bad_config(g, "attention_dropout 1", [](auto& o) { o.attention_dropout = 1.0f; }, {"attention_dropout", "1.0"});
  bad_config(g, "hidden_dropout -0.1", [](auto& o) { o.hidden_dropout = -0.1f; }, {"hidden_dropout", "-0.1"});
  bad_config(g, "attention_dropout NaN", [](auto& o) { o.attention_dropout = std::nanf(""); }, {"attention_dropout"});
  bad_config(g, "recompute 3", [](auto& o) { o.recompute_granularity = static_cast<ptdp_recompute>(3); },
             {"recompute_granularity = 3"});
  bad_config(g, "recompute -1", [](auto& o) { o.recompute_granularity = static_cast<ptdp_recompute>(-1); },
             {"recompute_granularity = -1"});
  bad_config(g, "untie 2", [](auto& o) { o.untie_embeddings_and_output_weights = 2; },
             {"untie_embeddings_and_output_weights = 2"});
  bad_config(g, "init_method_std 0", [](auto& o) { o.init_method_std = 0.0f; }, {"init_method_std"});
  bad_config(g, "layernorm_epsilon 0", [](auto& o) { o.layernorm_epsilon = 0.0f; }, {"layernorm_epsilon"});
  bad_config(g, "struct_size 0", [](auto& o) { o.struct_size = 0; }, {"struct_size"});
  if (g_t >= 2) {
    // 3 heads (hidden 24) and an MLP width of 2t + 1: neither divisible by t.
    bad_config(g, "heads 3 not divisible by t", [](auto& o) { o.hidden_size = 24; o.num_attention_heads = 3; },
               {"num_attention_heads 3", "tensor parallel size " + t});
    bad_config(g, "ffn not divisible by t", [](auto& o) { o.ffn_hidden_size = 2 * g_t + 1; },
               {"ffn_hidden_size " + std::to_string(2 * g_t + 1), "tensor parallel size " + t});
  }
  const ptdp_gpt_options o = mt::tiny_gpt();
  expect_message(CT_STATUS(ptdp_model_create(g, &o, nullptr), PTDP_ERR_INVALID_ARGUMENT), {"out"}, "NULL out");
  ptdp_model out = sentinel<ptdp_model>();
  expect_message(CT_STATUS(ptdp_model_create(nullptr, &o, &out), PTDP_ERR_INVALID_ARGUMENT), {"groups"}, "NULL groups");
  ct::expect(out == sentinel<ptdp_model>(), "NULL groups: the output handle is left alone");
}

// ---- the model's calls ---------------------------------------------------------------------------

void model_calls(ptdp_groups g) {
  ct::context("model calls, t=" + std::to_string(g_t));
  const ptdp_gpt_options o = mt::tiny_gpt();  // V = 301, s = 8, dropout 0.1
  ptdp_model m = nullptr;
  if (!CT_OK(ptdp_model_create(g, &o, &m)).empty()) return;
  const std::vector<mt::ParamInfo> infos = mt::param_infos(m);
  const int32_t n_params = static_cast<int32_t>(infos.size());
  const int32_t b = 2, V = o.vocab_size;
  const std::vector<int32_t> tokens = mt::ids(16, V, 5), labels = mt::ids(16, V, 6);

  // Ids outside [0, V), sizes, NULLs: refused, the loss output and the gradients untouched.
  CT_OK(ptdp_model_zero_grad(m));
  struct BadIds {
    const char* which;
    int index;
    int32_t value;
  };
  const BadIds bad_ids[] = {{"tokens", 5, V}, {"tokens", 3, -1}, {"tokens", 15, V + 100}, {"labels", 7, V + 5}, {"labels", 0, -2}};
  for (const BadIds& bad : bad_ids) {
    std::vector<int32_t> tk = tokens, lb = labels;
    (std::string(bad.which) == "tokens" ? tk : lb)[static_cast<std::size_t>(bad.index)] = bad.value;
    const std::string named = std::string(bad.which) + "[" + std::to_string(bad.index) + "] = " + std::to_string(bad.value);
    float loss = 123.0f;
    expect_message(CT_STATUS(ptdp_model_forward_backward(m, tk.data(), lb.data(), b, 0, 0, 1.0f, nullptr, &loss),
                             PTDP_ERR_INVALID_ARGUMENT),
                   {"ptdp_model_forward_backward", named, "[0, 301)"}, "forward_backward with " + named);
    ct::expect(loss == 123.0f, "forward_backward with " + named + " leaves the loss output alone");
    expect_message(
        CT_STATUS(ptdp_model_forward(m, tk.data(), lb.data(), b, 0, 0, 1, nullptr, &loss), PTDP_ERR_INVALID_ARGUMENT),
        {"ptdp_model_forward", named}, "forward with " + named);
    ct::expect(loss == 123.0f, "forward with " + named + " leaves the loss output alone");
  }
  for (int32_t mbs : {0, -1}) {
    float loss = 123.0f;
    const std::string named = "micro_batch_size = " + std::to_string(mbs);
    expect_message(
        CT_STATUS(ptdp_model_forward_backward(m, tokens.data(), labels.data(), mbs, 0, 0, 1.0f, nullptr, &loss),
                  PTDP_ERR_INVALID_ARGUMENT),
        {named}, "forward_backward with " + named);
    expect_message(CT_STATUS(ptdp_model_forward(m, tokens.data(), labels.data(), mbs, 0, 0, 0, nullptr, &loss),
                             PTDP_ERR_INVALID_ARGUMENT),
                   {named}, "forward with " + named);
    ct::expect(loss == 123.0f, named + ": the loss output is left alone");
  }
  float loss = 123.0f;
  expect_message(CT_STATUS(ptdp_model_forward_backward(m, nullptr, labels.data(), b, 0, 0, 1.0f, nullptr, &loss),
                           PTDP_ERR_INVALID_ARGUMENT),
                 {"tokens"}, "NULL tokens");
  expect_message(CT_STATUS(ptdp_model_forward_backward(m, tokens.data(), nullptr, b, 0, 0, 1.0f, nullptr, &loss),
                           PTDP_ERR_INVALID_ARGUMENT),
                 {"labels"}, "NULL labels");
  expect_message(CT_STATUS(ptdp_model_forward(m, tokens.data(), labels.data(), b, 0, 0, 1, nullptr, nullptr),
                           PTDP_ERR_INVALID_ARGUMENT),
                 {"loss"}, "forward with NULL loss");
  expect_message(CT_STATUS(ptdp_model_forward(m, tokens.data(), labels.data(), b, 0, 0, 2, nullptr, &loss),
                           PTDP_ERR_INVALID_ARGUMENT),
                 {"training = 2"}, "forward with training 2");
  expect_message(
      CT_STATUS(ptdp_model_forward_backward(nullptr, tokens.data(), labels.data(), b, 0, 0, 1.0f, nullptr, &loss),
                PTDP_ERR_INVALID_ARGUMENT),
      {"model"}, "NULL model");
  ct::expect(loss == 123.0f, "the loss output is left alone by every refused call");
  for (const mt::ParamInfo& p : infos) {
    const std::vector<float> gr = mt::get_grad(m, p);
    mt::expect_zero(gr, 0, gr.size(), "the gradient of " + p.name + " is still zero after the refused calls");
  }
  // Nothing was left in flight: the same step runs, twice, with the same loss.
  float l1 = -1, l2 = -2;
  CT_OK(ptdp_model_forward_backward(m, tokens.data(), labels.data(), b, 0, 0, 1.0f, nullptr, &l1));
  CT_OK(ptdp_model_forward(m, tokens.data(), labels.data(), b, 0, 0, 1, nullptr, &l2));
  mt::expect_bitwise(&l2, &l1, 1, "after the refused calls, step (0, 0) runs and forward gives its loss");

  // Parameter names, byte counts, indices.
  const mt::ParamInfo& p0 = infos[0];
  const std::size_t bytes = p0.numel() * sizeof(float);
  std::vector<float> buf(p0.numel() + 1, 7.0f);
  expect_message(CT_STATUS(ptdp_model_get_param(m, "nope", buf.data(), bytes), PTDP_ERR_INVALID_ARGUMENT),
                 {"ptdp_model_get_param", "no parameter named 'nope'"}, "get_param of an unknown name");
  expect_message(CT_STATUS(ptdp_model_set_param(m, "nope", buf.data(), bytes), PTDP_ERR_INVALID_ARGUMENT),
                 {"ptdp_model_set_param", "'nope'"}, "set_param of an unknown name");
  expect_message(CT_STATUS(ptdp_model_get_grad(m, "nope", buf.data(), bytes), PTDP_ERR_INVALID_ARGUMENT),
                 {"ptdp_model_get_grad", "'nope'"}, "get_grad of an unknown name");
  expect_message(CT_STATUS(ptdp_model_get_param(m, nullptr, buf.data(), bytes), PTDP_ERR_INVALID_ARGUMENT), {"name"},
                 "get_param of a NULL name");
  expect_message(CT_STATUS(ptdp_model_get_param(m, p0.name.c_str(), nullptr, bytes), PTDP_ERR_INVALID_ARGUMENT), {"host"},
                 "get_param into NULL");
  const std::string small = "bytes = " + std::to_string(bytes - 4);
  const std::string need = std::to_string(bytes) + " bytes";
  expect_message(CT_STATUS(ptdp_model_get_param(m, p0.name.c_str(), buf.data(), bytes - 4), PTDP_ERR_INVALID_ARGUMENT),
                 {small, need, p0.name}, "get_param with 4 bytes too few");
  expect_message(CT_STATUS(ptdp_model_get_grad(m, p0.name.c_str(), buf.data(), bytes - 4), PTDP_ERR_INVALID_ARGUMENT),
                 {small, need, p0.name}, "get_grad with 4 bytes too few");
  ct::expect(std::all_of(buf.begin(), buf.end(), [](float v) { return v == 7.0f; }), "the refused gets wrote nothing");
  CT_OK(ptdp_model_get_param(m, p0.name.c_str(), buf.data(), bytes + 4));  // room to spare is fine
  ct::expect(buf.back() == 7.0f, "get_param writes only the parameter's bytes");
  const std::vector<float> before = mt::get_param(m, p0);
  const std::vector<float> junk(p0.numel() + 1, 5.0f);
  expect_message(CT_STATUS(ptdp_model_set_param(m, p0.name.c_str(), junk.data(), bytes + 4), PTDP_ERR_INVALID_ARGUMENT),
                 {"bytes = " + std::to_string(bytes + 4), need}, "set_param with 4 bytes too many");
  expect_message(CT_STATUS(ptdp_model_set_param(m, p0.name.c_str(), junk.data(), bytes - 4), PTDP_ERR_INVALID_ARGUMENT),
                 {small, need}, "set_param with 4 bytes too few");
  expect_message(CT_STATUS(ptdp_model_set_param(m, p0.name.c_str(), nullptr, bytes), PTDP_ERR_INVALID_ARGUMENT), {"host"},
                 "set_param from NULL");
  mt::expect_bitwise(mt::get_param(m, p0), before, "the refused set_params left the parameter alone");

  for (int32_t index : {-1, n_params, n_params + 5}) {
    char name[64];
    std::memset(name, 'x', sizeof name);
    int32_t ndim = -7, pdim = -7;
    int64_t shape[2] = {-7, -7};
    const std::string named = "index = " + std::to_string(index);
    expect_message(CT_STATUS(ptdp_model_param_info(m, index, name, sizeof name, &ndim, shape, &pdim), PTDP_ERR_INVALID_ARGUMENT),
                   {named, "[0, " + std::to_string(n_params) + ")"}, "param_info " + named);
    ct::expect(name[0] == 'x' && ndim == -7 && shape[0] == -7 && pdim == -7, "param_info " + named + " wrote nothing");
  }
  {
    const std::size_t len = p0.name.size();
    std::vector<char> name(len + 1, 'x');
    int32_t ndim = -7;
    expect_message(CT_STATUS(ptdp_model_param_info(m, 0, name.data(), len, &ndim, nullptr, nullptr), PTDP_ERR_INVALID_ARGUMENT),
                   {"name_capacity = " + std::to_string(len), p0.name}, "param_info with no room for the terminator");
    ct::expect(std::all_of(name.begin(), name.end(), [](char c) { return c == 'x'; }) && ndim == -7,
               "param_info with too small a name capacity wrote nothing");
    CT_OK(ptdp_model_param_info(m, 0, name.data(), len + 1, &ndim, nullptr, nullptr));
    ct::expect(std::string(name.data()) == p0.name && ndim == p0.ndim, "param_info with exactly enough room", p0.name, name.data());
    expect_message(CT_STATUS(ptdp_model_param_info(m, 0, nullptr, 16, nullptr, nullptr, nullptr), PTDP_ERR_INVALID_ARGUMENT),
                   {"name"}, "param_info into a NULL name with capacity 16");
    int64_t shape[2] = {0, 0};
    CT_OK(ptdp_model_param_info(m, 0, nullptr, 0, nullptr, shape, nullptr));
    ct::expect(shape[0] == p0.shape[0] && shape[1] == p0.shape[1], "param_info without a name still gives the shape");
  }
  expect_message(CT_STATUS(ptdp_model_num_params(m, nullptr), PTDP_ERR_INVALID_ARGUMENT), {"count"}, "num_params into NULL");

  // The groups cannot go while the model lives; they and the model keep working.
  expect_message(CT_STATUS(ptdp_groups_destroy(g), PTDP_ERR_INVALID_STATE),
                 {"ptdp_groups_destroy", "1 ptdp_work, ptdp_model, ptdp_layer or ptdp_optimizer", "destroy them first"},
                 "groups_destroy with a live model");
  ptdp_layer l = nullptr;
  CT_OK(ptdp_column_parallel_linear_create(g, 4, 8, 1, 0, 0.1f, 1, &l));
  expect_message(CT_STATUS(ptdp_groups_destroy(g), PTDP_ERR_INVALID_STATE), {"2 ptdp_work, ptdp_model, ptdp_layer or ptdp_optimizer"},
                 "groups_destroy with a live model and layer");
  CT_OK(ptdp_model_destroy(m));
  expect_message(CT_STATUS(ptdp_groups_destroy(g), PTDP_ERR_INVALID_STATE), {"1 ptdp_work, ptdp_model, ptdp_layer or ptdp_optimizer"},
                 "groups_destroy with a live layer");
  int32_t size = 0;
  CT_OK(ptdp_groups_size(g, PTDP_GROUP_TENSOR, &size));
  mt::expect_eq(size, static_cast<int32_t>(g_t), "the groups still work after the refused destroys");
  CT_OK(ptdp_layer_destroy(l));
}

// ---- layers ----------------------------------------------------------------------------------

void layer_creation(ptdp_groups g) {
  ct::context("layer creation, t=" + std::to_string(g_t));
  ptdp_layer out = sentinel<ptdp_layer>();
  const auto refused = [&](ptdp_status s, std::initializer_list<std::string> parts, const std::string& what) {
    expect_message(CT_STATUS(s, PTDP_ERR_INVALID_ARGUMENT), parts, what);
    ct::expect(out == sentinel<ptdp_layer>(), what + ": the output handle is left alone");
  };
  refused(ptdp_column_parallel_linear_create(g, 0, 8, 1, 0, 0.1f, 1, &out), {"ptdp_column_parallel_linear_create", "in_features = 0"},
          "column in_features 0");
  refused(ptdp_column_parallel_linear_create(g, 4, -8, 1, 0, 0.1f, 1, &out), {"out_features = -8"}, "column out_features -8");
  refused(ptdp_column_parallel_linear_create(g, 4, 8, 2, 0, 0.1f, 1, &out), {"bias = 2"}, "column bias 2");
  refused(ptdp_column_parallel_linear_create(g, 4, 8, 0, 3, 0.1f, 1, &out), {"gather_output = 3"}, "column gather_output 3");
  refused(ptdp_column_parallel_linear_create(g, 4, 8, 0, 0, -1.0f, 1, &out), {"init_std"}, "column init_std -1");
  refused(ptdp_column_parallel_linear_create(nullptr, 4, 8, 0, 0, 0.1f, 1, &out), {"groups"}, "column on NULL groups");
  expect_message(CT_STATUS(ptdp_column_parallel_linear_create(g, 4, 8, 0, 0, 0.1f, 1, nullptr), PTDP_ERR_INVALID_ARGUMENT), {"out"},
                 "column into NULL");
  refused(ptdp_row_parallel_linear_create(g, 8, 0, 1, 0.1f, 1, &out), {"ptdp_row_parallel_linear_create", "out_features = 0"},
          "row out_features 0");
  refused(ptdp_row_parallel_linear_create(g, 8, 4, -1, 0.1f, 1, &out), {"bias = -1"}, "row bias -1");
  refused(ptdp_vocab_parallel_embedding_create(g, 0, 4, 0.1f, 1, &out), {"ptdp_vocab_parallel_embedding_create", "vocab = 0"},
          "embedding vocab 0");
  refused(ptdp_vocab_parallel_embedding_create(g, 8, -4, 0.1f, 1, &out), {"hidden = -4"}, "embedding hidden -4");
  refused(ptdp_vocab_parallel_cross_entropy_create(g, 10, 8, &out), {"ptdp_vocab_parallel_cross_entropy_create", "padded_vocab = 8",
                                                                     "vocab = 10"}, "cross-entropy padded_vocab < vocab");
  refused(ptdp_vocab_parallel_cross_entropy_create(g, 0, 8, &out), {"vocab = 0"}, "cross-entropy vocab 0");
  if (g_t >= 2) {
    const int64_t odd = 2 * g_t + 1;
    const std::string by = "tensor parallel size " + std::to_string(g_t);
    refused(ptdp_column_parallel_linear_create(g, 4, odd, 1, 0, 0.1f, 1, &out), {"out_features = " + std::to_string(odd), by},
            "column out_features not divisible by t");
    refused(ptdp_row_parallel_linear_create(g, odd, 4, 1, 0.1f, 1, &out), {"in_features = " + std::to_string(odd), by},
            "row in_features not divisible by t");
    refused(ptdp_vocab_parallel_embedding_create(g, odd, 4, 0.1f, 1, &out), {"vocab = " + std::to_string(odd), by},
            "embedding vocab not divisible by t");
    refused(ptdp_vocab_parallel_cross_entropy_create(g, 4, odd, &out), {"padded_vocab = " + std::to_string(odd), by},
            "cross-entropy padded_vocab not divisible by t");
  }
}

void linear_calls(ptdp_groups g, int32_t gather) {
  ct::context("column-parallel layer calls (gather_output " + std::to_string(gather) + "), t=" + std::to_string(g_t));
  constexpr int64_t kN = 3, kIn = 4, kOut = 8;
  const int64_t out_cols = gather ? kOut : kOut / g_t;
  ptdp_layer l = nullptr;
  if (!CT_OK(ptdp_column_parallel_linear_create(g, kIn, kOut, 1, gather, 0.5f, 9, &l)).empty()) return;
  Tensor xa = f32({kN, kIn}, mt::floats(kN * kIn, 1)), xb = f32({kN, kIn}, mt::floats(kN * kIn, 2));
  Tensor ids = i32({kN}, {0, 1, 2});
  ptdp_tensor y = sentinel<ptdp_tensor>();

  expect_message(CT_STATUS(ptdp_layer_forward(l, 0, xa, ids, &y), PTDP_ERR_INVALID_ARGUMENT),
                 {"ptdp_layer_forward", "labels must be NULL"}, "labels given to a linear layer");
  expect_message(CT_STATUS(ptdp_layer_forward(l, 0, ids, nullptr, &y), PTDP_ERR_INVALID_ARGUMENT), {"input", "i32", "want f32"},
                 "i32 input to a linear layer");
  ptdp_tensor bf = nullptr;
  CT_OK(ptdp_tensor_cast(xa, PTDP_DTYPE_BF16, &bf));
  Tensor xbf(bf);
  expect_message(CT_STATUS(ptdp_layer_forward(l, 0, xbf, nullptr, &y), PTDP_ERR_INVALID_ARGUMENT), {"bf16", "want f32"},
                 "bf16 input to a linear layer");
  Tensor x5 = f32({kN, 5}, mt::floats(kN * 5, 3));
  expect_message(CT_STATUS(ptdp_layer_forward(l, 0, x5, nullptr, &y), PTDP_ERR_INVALID_ARGUMENT), {"column-parallel input", "4"},
                 "input of 5 columns to a layer of 4 input features");
  expect_message(CT_STATUS(ptdp_layer_forward(l, 0, nullptr, nullptr, &y), PTDP_ERR_INVALID_ARGUMENT), {"input"}, "NULL input");
  expect_message(CT_STATUS(ptdp_layer_forward(nullptr, 0, xa, nullptr, &y), PTDP_ERR_INVALID_ARGUMENT), {"layer"}, "NULL layer");
  ct::expect(y == sentinel<ptdp_tensor>(), "the refused forwards left the output alone");
  expect_message(CT_STATUS(ptdp_layer_forward(l, 0, xa, nullptr, nullptr), PTDP_ERR_INVALID_ARGUMENT), {"output"}, "NULL output");

  Tensor dy = f32({kN, out_cols}, mt::floats(static_cast<std::size_t>(kN * out_cols), 4));
  ptdp_tensor dx = sentinel<ptdp_tensor>();
  expect_message(CT_STATUS(ptdp_layer_backward(l, 7, dy, &dx), PTDP_ERR_INVALID_STATE),
                 {"ptdp_layer_backward", "microbatch 7", "forward not run"}, "backward without forward");
  ct::expect(dx == sentinel<ptdp_tensor>(), "the refused backward left the output alone");

  // Forward twice for one microbatch: refused, and the first forward's activations are kept.
  ptdp_tensor y3 = nullptr;
  CT_OK(ptdp_layer_forward(l, 3, xa, nullptr, &y3));
  Tensor y3t(y3);
  y = sentinel<ptdp_tensor>();
  expect_message(CT_STATUS(ptdp_layer_forward(l, 3, xb, nullptr, &y), PTDP_ERR_INVALID_STATE), {"microbatch 3", "already in flight"},
                 "forward twice for microbatch 3");
  ct::expect(y == sentinel<ptdp_tensor>(), "the refused forward left the output alone");
  // Refused backwards of microbatch 3 keep it in flight.
  expect_message(CT_STATUS(ptdp_layer_backward(l, 3, dy, nullptr), PTDP_ERR_INVALID_ARGUMENT), {"grad_input is NULL"},
                 "backward into NULL");
  Tensor dy_i32 = i32({kN * out_cols}, std::vector<int32_t>(static_cast<std::size_t>(kN * out_cols), 1));
  expect_message(CT_STATUS(ptdp_layer_backward(l, 3, dy_i32, &dx), PTDP_ERR_INVALID_ARGUMENT), {"grad_output", "want f32"},
                 "i32 grad_output");
  // A gradient of the wrong size ([N, out_cols - 1] instead of [N, out_cols]).
  {
    Tensor dy_small = f32({kN, out_cols - 1}, mt::floats(static_cast<std::size_t>(kN * (out_cols - 1)), 5));
    dx = sentinel<ptdp_tensor>();
    expect_message(CT_STATUS(ptdp_layer_backward(l, 3, dy_small, &dx), PTDP_ERR_INVALID_ARGUMENT), {"does not match"},
                   "grad_output of the wrong size");
    ct::expect(dx == sentinel<ptdp_tensor>(), "the refused backward left the output alone");
  }
  CT_OK(ptdp_layer_backward(l, 3, dy, &dx));
  Tensor dxt(dx);
  // The weight gradient is dy^T xa (this rank's rows), not dy^T xb.
  const std::vector<float> x = host(xa), d = host(dy);
  ptdp_tensor gw = nullptr;
  CT_OK(ptdp_layer_grad(l, "weight", &gw));
  Tensor gwt(gw);
  const int64_t lo = kOut / g_t, c0 = gather ? lo * (ct::g_rank % g_t) : 0;
  std::vector<float> want(static_cast<std::size_t>(lo * kIn), 0.0f);
  for (int64_t o = 0; o < lo; ++o)
    for (int64_t i = 0; i < kIn; ++i) {
      double s2 = 0;
      for (int64_t n = 0; n < kN; ++n) s2 += static_cast<double>(d[n * out_cols + c0 + o]) * x[n * kIn + i];
      want[o * kIn + i] = static_cast<float>(s2);
    }
  mt::expect_close(host(gwt), want, 1e-5, 1e-6, "after the refused calls, the weight gradient is dy^T x of the first forward");
  expect_message(CT_STATUS(ptdp_layer_backward(l, 3, dy, &dx), PTDP_ERR_INVALID_STATE), {"microbatch 3"},
                 "a second backward of microbatch 3");

  ptdp_tensor view = sentinel<ptdp_tensor>();
  expect_message(CT_STATUS(ptdp_layer_param(l, "foo", &view), PTDP_ERR_INVALID_ARGUMENT), {"ptdp_layer_param", "which = 'foo'"},
                 "layer_param('foo')");
  expect_message(CT_STATUS(ptdp_layer_grad(l, "foo", &view), PTDP_ERR_INVALID_ARGUMENT), {"which = 'foo'"}, "layer_grad('foo')");
  expect_message(CT_STATUS(ptdp_layer_param(l, nullptr, &view), PTDP_ERR_INVALID_ARGUMENT), {"which"}, "layer_param(NULL)");
  ct::expect(view == sentinel<ptdp_tensor>(), "the refused views left the output alone");
  CT_OK(ptdp_layer_destroy(l));
}

void embedding_calls(ptdp_groups g) {
  ct::context("embedding layer calls, t=" + std::to_string(g_t));
  ptdp_layer l = nullptr;
  if (!CT_OK(ptdp_vocab_parallel_embedding_create(g, 8, 4, 0.5f, 3, &l)).empty()) return;
  Tensor ids = i32({3}, {0, 7, 3});
  Tensor xf = f32({3}, {0, 1, 2});
  ptdp_tensor y = sentinel<ptdp_tensor>();
  expect_message(CT_STATUS(ptdp_layer_forward(l, 0, xf, nullptr, &y), PTDP_ERR_INVALID_ARGUMENT), {"f32", "want i32"},
                 "f32 ids to the embedding");
  expect_message(CT_STATUS(ptdp_layer_forward(l, 0, ids, ids, &y), PTDP_ERR_INVALID_ARGUMENT), {"labels must be NULL"},
                 "labels given to the embedding");
  ct::expect(y == sentinel<ptdp_tensor>(), "the refused forwards left the output alone");
  CT_OK(ptdp_layer_forward(l, 0, ids, nullptr, &y));
  Tensor yt(y);
  Tensor dy = f32({3, 4}, mt::floats(12, 8));
  ptdp_tensor dx = nullptr;
  expect_message(CT_STATUS(ptdp_layer_backward(l, 0, dy, &dx), PTDP_ERR_INVALID_ARGUMENT), {"grad_input must be NULL"},
                 "backward of the embedding with a grad_input");
  ct::expect(dx == nullptr, "the refused backward left the output alone");
  CT_OK(ptdp_layer_backward(l, 0, dy, nullptr));  // microbatch 0 was still in flight
  expect_message(CT_STATUS(ptdp_layer_backward(l, 0, dy, nullptr), PTDP_ERR_INVALID_STATE), {"microbatch 0"},
                 "a second backward of the embedding");
  ptdp_tensor view = nullptr;
  expect_message(CT_STATUS(ptdp_layer_param(l, "bias", &view), PTDP_ERR_INVALID_ARGUMENT), {"which = 'bias'"},
                 "the embedding has no bias");
  CT_OK(ptdp_layer_destroy(l));
}

void cross_entropy_calls(ptdp_groups g) {
  ct::context("cross-entropy layer calls, t=" + std::to_string(g_t));
  constexpr int64_t kRows = 3, kVocab = 10, kPadded = 12;
  ptdp_layer l = nullptr;
  if (!CT_OK(ptdp_vocab_parallel_cross_entropy_create(g, kVocab, kPadded, &l)).empty()) return;
  const int64_t lv = kPadded / g_t;
  Tensor z = f32({kRows, lv}, mt::floats(static_cast<std::size_t>(kRows * lv), 9));
  Tensor labels = i32({kRows}, {1, 9, 0});
  ptdp_tensor y = sentinel<ptdp_tensor>();
  expect_message(CT_STATUS(ptdp_layer_forward(l, 0, z, nullptr, &y), PTDP_ERR_INVALID_ARGUMENT),
                 {"ptdp_layer_forward", "labels is NULL"}, "cross-entropy without labels");
  Tensor lf = f32({kRows}, {1, 9, 0});
  expect_message(CT_STATUS(ptdp_layer_forward(l, 0, z, lf, &y), PTDP_ERR_INVALID_ARGUMENT), {"labels must be i32"},
                 "f32 labels");
  Tensor l2 = i32({2}, {1, 2});
  expect_message(CT_STATUS(ptdp_layer_forward(l, 0, z, l2, &y), PTDP_ERR_INVALID_ARGUMENT), {"labels", "do not match", "3 rows"},
                 "2 labels for 3 rows");
  Tensor zw = f32({kRows, lv + 1}, mt::floats(static_cast<std::size_t>(kRows * (lv + 1)), 10));
  expect_message(CT_STATUS(ptdp_layer_forward(l, 0, zw, labels, &y), PTDP_ERR_INVALID_ARGUMENT), {"logits", std::to_string(lv)},
                 "logits one column too wide");
  Tensor zi = i32({kRows * lv}, std::vector<int32_t>(static_cast<std::size_t>(kRows * lv), 0));
  expect_message(CT_STATUS(ptdp_layer_forward(l, 0, zi, labels, &y), PTDP_ERR_INVALID_ARGUMENT), {"want f32"}, "i32 logits");
  ct::expect(y == sentinel<ptdp_tensor>(), "the refused forwards left the output alone");
  Tensor dl = f32({kRows}, {1, 1, 1});
  ptdp_tensor dz = nullptr;
  expect_message(CT_STATUS(ptdp_layer_backward(l, 5, dl, &dz), PTDP_ERR_INVALID_STATE), {"microbatch 5"},
                 "cross-entropy backward without forward");
  CT_OK(ptdp_layer_forward(l, 5, z, labels, &y));
  Tensor yt(y);
  ptdp_tensor y2 = nullptr;
  expect_message(CT_STATUS(ptdp_layer_forward(l, 5, z, labels, &y2), PTDP_ERR_INVALID_STATE), {"microbatch 5", "already in flight"},
                 "cross-entropy forward twice");
  Tensor dl2 = f32({2}, {1, 1});
  expect_message(CT_STATUS(ptdp_layer_backward(l, 5, dl2, &dz), PTDP_ERR_INVALID_ARGUMENT), {"does not match"},
                 "dloss of 2 for 3 rows");
  CT_OK(ptdp_layer_backward(l, 5, dl, &dz));  // still in flight after the refusals
  Tensor dzt(dz);
  ptdp_tensor view = nullptr;
  expect_message(CT_STATUS(ptdp_layer_param(l, "weight", &view), PTDP_ERR_INVALID_ARGUMENT), {"which = 'weight'"},
                 "the cross-entropy has no parameters");
  CT_OK(ptdp_layer_destroy(l));
}

// ---- the gathered gradient's size ---------------------------------------------------------------

// A column-parallel layer with gather_output = 1 and t > 1 takes the gathered gradient [N, out]
// and copies this rank's columns out of it: a grad_output of another size must be refused before
// anything is read (it once was read past its end).
void gathered_grad_size(ptdp_groups g) {
  ct::context("column-parallel layer, gather_output 1, t=" + std::to_string(g_t));
  constexpr int64_t kN = 3, kIn = 4, kOut = 8;
  ptdp_layer l = nullptr;
  if (!CT_OK(ptdp_column_parallel_linear_create(g, kIn, kOut, 1, 1, 0.5f, 9, &l)).empty()) return;
  Tensor x = f32({kN, kIn}, mt::floats(kN * kIn, 1));
  ptdp_tensor y = nullptr;
  CT_OK(ptdp_layer_forward(l, 0, x, nullptr, &y));
  Tensor yt(y);
  {
    // [3, 7]: one column short. (Only a little is read past the end here, inside the
    // allocation; a [1, 1] gradient makes valgrind report the invalid read, but is not run.)
    Tensor small = f32({kN, kOut - 1}, mt::floats(static_cast<std::size_t>(kN * (kOut - 1)), 4));
    ptdp_tensor dx = sentinel<ptdp_tensor>();
    const ptdp_status s = ptdp_layer_backward(l, 0, small, &dx);
    const std::string what = "ptdp_layer_backward with grad_output [3, 7] for the gathered output [3, 8]";
    expect_message(ct::expect_status(s, PTDP_ERR_INVALID_ARGUMENT, what), {"does not match"}, what);
    if (s == PTDP_SUCCESS) {  // accepted: microbatch 0 is gone, run it again
      ptdp_tensor_destroy(dx);
      ptdp_tensor again = nullptr;
      CT_OK(ptdp_layer_forward(l, 0, x, nullptr, &again));
      ptdp_tensor_destroy(again);
    }
  }
  Tensor dy = f32({kN, kOut}, mt::floats(kN * kOut, 4));
  ptdp_tensor dx = nullptr;
  CT_OK(ptdp_layer_backward(l, 0, dy, &dx));
  ptdp_tensor_destroy(dx);
  CT_OK(ptdp_layer_destroy(l));
}

// ---- pipelined groups ----------------------------------------------------------------------------

// A model on groups with pipeline size 2 is one stage of a pipeline (built for
// ptdp_model_pipeline_forward_backward): the whole-model calls are refused as unsupported.
// (ptdp.h still documents PTDP_ERR_UNSUPPORTED from ptdp_model_create itself for pipeline
// size > 1; the library builds the stage since the pipeline commits, so that is what is tested.)
void pipeline_groups(ptdp_runtime rt, int world) {
  if (world < 2) return;
  ct::context("pipeline size 2, W=" + std::to_string(world));
  ct::Layout l;
  l.W = world;
  l.p = 2;
  const ptdp_parallel_options po = l.options();
  ptdp_groups g = nullptr;
  if (!CT_OK(ptdp_groups_create(rt, &po, &g)).empty()) return;
  const ptdp_gpt_options o = mt::tiny_gpt();
  ptdp_model m = nullptr;
  const ptdp_status s = ptdp_model_create(g, &o, &m);
  if (s == PTDP_SUCCESS) {
    ct::expect(true, "ptdp_model_create on pipeline size 2 builds a stage");
    const std::vector<int32_t> tokens = mt::ids(16, o.vocab_size, 1), labels = mt::ids(16, o.vocab_size, 2);
    float loss = 123.0f;
    expect_message(
        CT_STATUS(ptdp_model_forward_backward(m, tokens.data(), labels.data(), 2, 0, 0, 1.0f, nullptr, &loss),
                  PTDP_ERR_UNSUPPORTED),
        {"ptdp_model_forward_backward", "pipeline size 2", "ptdp_model_pipeline_forward_backward"},
        "forward_backward of a stage");
    expect_message(CT_STATUS(ptdp_model_forward(m, tokens.data(), labels.data(), 2, 0, 0, 0, nullptr, &loss),
                             PTDP_ERR_UNSUPPORTED),
                   {"ptdp_model_forward", "pipeline size 2"}, "forward of a stage");
    ct::expect(loss == 123.0f, "the refused calls left the loss output alone");
    expect_message(CT_STATUS(ptdp_groups_destroy(g), PTDP_ERR_INVALID_STATE), {"1 ptdp_work, ptdp_model, ptdp_layer or ptdp_optimizer"},
                   "groups_destroy with a live stage model");
    CT_OK(ptdp_model_destroy(m));
  } else {
    // The documented behaviour of ptdp.h: refused at creation.
    const std::string msg = CT_STATUS(s, PTDP_ERR_UNSUPPORTED);
    expect_message(msg, {"ptdp_model_create", "pipeline size 2"}, "model on groups with pipeline size 2");
    ct::expect(m == nullptr, "the output handle is left alone");
  }
  CT_OK(ptdp_groups_destroy(g));  // nothing was left depending on them
}

}  // namespace

int main(int argc, char** argv) {
  int rank = 0, world = 1;
  ct::start(&argc, &argv, &rank, &world);
  const ptdp_runtime_options ro = ct::runtime_options();
  ptdp_runtime rt = nullptr;
  if (CT_OK(ptdp_runtime_create(&ro, &rt)).empty()) {
    ct::Layout layout;
    layout.W = world;
    layout.t = world;
    g_t = world;
    const ptdp_parallel_options po = layout.options();
    ptdp_groups g = nullptr;
    if (CT_OK(ptdp_groups_create(rt, &po, &g)).empty()) {
      gathered_grad_size(g);
      configs(g);
      model_calls(g);
      layer_creation(g);
      linear_calls(g, 0);
      linear_calls(g, 1);
      embedding_calls(g);
      cross_entropy_calls(g);
      ct::context("teardown");
      // Every refused create left no dependent behind.
      CT_OK(ptdp_groups_destroy(g));
    }
    pipeline_groups(rt, world);
    CT_OK(ptdp_runtime_destroy(rt));
  }
  const int rc = ct::finish("test_model_bad_inputs");
  MPI_Finalize();
  return rc;
}
