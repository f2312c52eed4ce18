// The parallel layers on their own through the C API.
#include <memory>
#include <string>

#include "capi/src/handles.h"
#include "core/layers/cross_entropy.h"
#include "core/layers/embedding.h"
#include "core/layers/linear.h"

struct ptdp_layer_impl {
  static constexpr const char* kType = "ptdp_layer";
  enum class Kind { Column, Row, Embedding, CrossEntropy };
  ptdp::capi::Registration<ptdp_layer_impl> registration{this};  // live while it exists
  Kind kind = Kind::Column;
  ptdp_groups_impl* owner = nullptr;
  ptdp::TensorParallel tp;
  ptdp::ParamTable params{0, 1};
  std::unique_ptr<ptdp::ColumnParallelLinear> column;
  std::unique_ptr<ptdp::RowParallelLinear> row;
  std::unique_ptr<ptdp::VocabParallelEmbedding> embedding;
  std::unique_ptr<ptdp::VocabParallelCrossEntropy> cross_entropy;
  int64_t vocab = 0;  // ids and labels must lie in [0, vocab) (embedding and cross-entropy)
};

namespace {

using Impl = ptdp_layer_impl;
using ptdp::capi::guard;
using ptdp::capi::live;
using ptdp::capi::require_non_null;

void positive(const char* name, int64_t v) {
  PTDP_CHECK_ARG(v > 0, std::string(name) + " = " + std::to_string(v) + " is not > 0");
}

void flag(const char* name, int32_t v) {
  PTDP_CHECK_ARG(v == 0 || v == 1, std::string(name) + " = " + std::to_string(v) + " is not 0 or 1");
}

void divisible(const char* name, int64_t v, int t) {
  PTDP_CHECK_ARG(v % t == 0, std::string(name) + " = " + std::to_string(v) +
                                 " is not divisible by the tensor parallel size " + std::to_string(t));
}

// Creates the handle, lets `build` declare the layer's parameters, then allocates and
// initialises them.
template <typename Build>
void create(ptdp_groups groups, ptdp_layer* out, Impl::Kind kind, uint64_t seed, Build&& build) {
  ptdp_groups_impl& g = live(groups, "groups");
  require_non_null(out, "out");
  auto h = std::make_unique<Impl>();
  h->kind = kind;
  h->owner = &g;
  h->tp = ptdp::capi::tensor_parallel(g);
  h->params = ptdp::ParamTable(h->tp.rank, h->tp.size);
  build(*h);
  h->params.allocate(ptdp::Device{});
  h->params.initialize(seed);
  ++g.dependents;
  *out = h.release();
}

// Every id of an i32 tensor in [0, vocab); the message names the first one outside.
void check_ids(const ptdp::Tensor& ids, int64_t vocab, const char* what) {
  PTDP_CHECK_ARG(ids.dtype() == ptdp::DType::I32, std::string(what) + " must be i32, got " + ids.str());
  const int32_t* v = ids.data<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    PTDP_CHECK_ARG(v[i] >= 0 && v[i] < vocab, std::string(what) + "[" + std::to_string(i) + "] = " +
                                                  std::to_string(v[i]) + " is outside the vocabulary [0, " +
                                                  std::to_string(vocab) + ")");
  }
}

ptdp::Step step_of(int64_t microbatch) {
  ptdp::capi::require_non_negative(microbatch, "microbatch");
  ptdp::Step s;
  s.microbatch = microbatch;
  return s;
}

int param_of(const Impl& l, const char* which) {
  require_non_null(which, "which");
  const std::string w = which;
  int index = -1;
  if (l.kind == Impl::Kind::Column) index = w == "weight" ? l.column->weight_index() : w == "bias" ? l.column->bias_index() : -1;
  if (l.kind == Impl::Kind::Row) index = w == "weight" ? l.row->weight_index() : w == "bias" ? l.row->bias_index() : -1;
  if (l.kind == Impl::Kind::Embedding) index = w == "weight" ? l.embedding->weight_index() : -1;
  PTDP_CHECK_ARG(index >= 0, "which = '" + w + "': this layer has no such parameter");
  return index;
}

}  // namespace

extern "C" {

PTDP_API ptdp_status ptdp_column_parallel_linear_create(ptdp_groups groups, int64_t in_features,
                                                        int64_t out_features, int32_t bias, int32_t gather_output,
                                                        float init_std, uint64_t seed, ptdp_layer* out) {
  return guard(__func__, [&] {
    positive("in_features", in_features);
    positive("out_features", out_features);
    flag("bias", bias);
    flag("gather_output", gather_output);
    ptdp::capi::require_finite(init_std, "init_std");
    PTDP_CHECK_ARG(init_std >= 0.0f, "init_std = " + std::to_string(init_std) + " is negative");
    create(groups, out, Impl::Kind::Column, seed, [&](Impl& h) {
      divisible("out_features", out_features, h.tp.size);
      h.column = std::make_unique<ptdp::ColumnParallelLinear>(h.params, "column_parallel_linear", in_features,
                                                              out_features, bias == 1, gather_output == 1, init_std, h.tp);
    });
  });
}

PTDP_API ptdp_status ptdp_row_parallel_linear_create(ptdp_groups groups, int64_t in_features, int64_t out_features,
                                                     int32_t bias, float init_std, uint64_t seed, ptdp_layer* out) {
  return guard(__func__, [&] {
    positive("in_features", in_features);
    positive("out_features", out_features);
    flag("bias", bias);
    ptdp::capi::require_finite(init_std, "init_std");
    PTDP_CHECK_ARG(init_std >= 0.0f, "init_std = " + std::to_string(init_std) + " is negative");
    create(groups, out, Impl::Kind::Row, seed, [&](Impl& h) {
      divisible("in_features", in_features, h.tp.size);
      h.row = std::make_unique<ptdp::RowParallelLinear>(h.params, "row_parallel_linear", in_features, out_features,
                                                        bias == 1, init_std, h.tp);
    });
  });
}

PTDP_API ptdp_status ptdp_vocab_parallel_embedding_create(ptdp_groups groups, int64_t vocab, int64_t hidden,
                                                          float init_std, uint64_t seed, ptdp_layer* out) {
  return guard(__func__, [&] {
    positive("vocab", vocab);
    positive("hidden", hidden);
    ptdp::capi::require_finite(init_std, "init_std");
    PTDP_CHECK_ARG(init_std >= 0.0f, "init_std = " + std::to_string(init_std) + " is negative");
    create(groups, out, Impl::Kind::Embedding, seed, [&](Impl& h) {
      divisible("vocab", vocab, h.tp.size);
      h.embedding = std::make_unique<ptdp::VocabParallelEmbedding>(h.params, "vocab_parallel_embedding", vocab,
                                                                   hidden, init_std, h.tp);
      h.vocab = vocab;
    });
  });
}

PTDP_API ptdp_status ptdp_vocab_parallel_cross_entropy_create(ptdp_groups groups, int64_t vocab,
                                                              int64_t padded_vocab, ptdp_layer* out) {
  return guard(__func__, [&] {
    positive("vocab", vocab);
    positive("padded_vocab", padded_vocab);
    PTDP_CHECK_ARG(padded_vocab >= vocab, "padded_vocab = " + std::to_string(padded_vocab) +
                                              " is smaller than vocab = " + std::to_string(vocab));
    create(groups, out, Impl::Kind::CrossEntropy, 0, [&](Impl& h) {
      divisible("padded_vocab", padded_vocab, h.tp.size);
      const int64_t local = padded_vocab / h.tp.size;
      h.cross_entropy = std::make_unique<ptdp::VocabParallelCrossEntropy>(vocab, local * h.tp.rank, local, h.tp);
      h.vocab = vocab;
    });
  });
}

PTDP_API ptdp_status ptdp_layer_forward(ptdp_layer layer, int64_t microbatch, ptdp_tensor input, ptdp_tensor labels,
                                        ptdp_tensor* output) {
  return guard(__func__, [&] {
    Impl& l = live(layer, "layer");
    const ptdp::Tensor& x = live(input, "input").tensor;
    require_non_null(output, "output");
    const bool is_ce = l.kind == Impl::Kind::CrossEntropy;
    PTDP_CHECK_ARG(is_ce == (labels != nullptr),
                   is_ce ? "labels is NULL; the cross-entropy needs them" : "labels must be NULL for this layer");
    PTDP_CHECK_ARG(x.device().type == ptdp::DeviceType::CPU, "input is " + x.str() + "; layers take CPU tensors");
    const ptdp::DType want = l.kind == Impl::Kind::Embedding ? ptdp::DType::I32 : ptdp::DType::F32;
    PTDP_CHECK_ARG(x.dtype() == want, "input is " + x.str() + ", want " + ptdp::dtype_name(want));
    const ptdp::Step st = step_of(microbatch);
    ptdp::Tensor y;
    switch (l.kind) {
      case Impl::Kind::Column: y = l.column->forward(x, st); break;
      case Impl::Kind::Row: y = l.row->forward(x, st); break;
      case Impl::Kind::Embedding:
        check_ids(x, l.vocab, "input");
        y = l.embedding->forward(x, st);
        break;
      case Impl::Kind::CrossEntropy: {
        // The loss masks and reuses its logits in place: work on a copy of the caller's.
        const ptdp::Tensor& targets = live(labels, "labels").tensor;
        check_ids(targets, l.vocab, "labels");
        ptdp::Tensor logits = ptdp::Tensor::empty(x.shape(), ptdp::DType::F32);
        logits.backend().copy(logits.raw(), x.raw(), x.nbytes());
        y = l.cross_entropy->forward(logits, targets, st);
        break;
      }
    }
    *output = ptdp::capi::wrap_tensor(std::move(y));
  });
}

PTDP_API ptdp_status ptdp_layer_backward(ptdp_layer layer, int64_t microbatch, ptdp_tensor grad_output,
                                         ptdp_tensor* grad_input) {
  return guard(__func__, [&] {
    Impl& l = live(layer, "layer");
    const ptdp::Tensor& dy = live(grad_output, "grad_output").tensor;
    PTDP_CHECK_ARG(dy.dtype() == ptdp::DType::F32 && dy.device().type == ptdp::DeviceType::CPU,
                   "grad_output is " + dy.str() + ", want f32 on the CPU");
    const bool embedding = l.kind == Impl::Kind::Embedding;
    PTDP_CHECK_ARG(embedding == (grad_input == nullptr),
                   embedding ? "grad_input must be NULL: token ids have no gradient" : "grad_input is NULL");
    const ptdp::Step st = step_of(microbatch);
    ptdp::Tensor dx;
    switch (l.kind) {
      case Impl::Kind::Column:
        dx = l.column->backward_input(dy, st);
        l.column->backward_weight(st);
        break;
      case Impl::Kind::Row:
        dx = l.row->backward_input(dy, st);
        l.row->backward_weight(st);
        break;
      case Impl::Kind::Embedding:
        l.embedding->backward_input(dy, st);
        l.embedding->backward_weight(st);
        return;
      case Impl::Kind::CrossEntropy: dx = l.cross_entropy->backward(dy, st); break;
    }
    *grad_input = ptdp::capi::wrap_tensor(std::move(dx));
  });
}

PTDP_API ptdp_status ptdp_layer_param(ptdp_layer layer, const char* which, ptdp_tensor* out) {
  return guard(__func__, [&] {
    Impl& l = live(layer, "layer");
    const int i = param_of(l, which);
    require_non_null(out, "out");
    *out = ptdp::capi::wrap_tensor(l.params.param(i));
  });
}

PTDP_API ptdp_status ptdp_layer_grad(ptdp_layer layer, const char* which, ptdp_tensor* out) {
  return guard(__func__, [&] {
    Impl& l = live(layer, "layer");
    const int i = param_of(l, which);
    require_non_null(out, "out");
    *out = ptdp::capi::wrap_tensor(l.params.grad(i));
  });
}

PTDP_API ptdp_status ptdp_layer_zero_grad(ptdp_layer layer) {
  return guard(__func__, [&] {
    Impl& l = live(layer, "layer");
    if (l.params.size() > 0) l.params.zero_grads();
  });
}

PTDP_API ptdp_status ptdp_layer_destroy(ptdp_layer layer) {
  return guard(__func__, [&] {
    if (layer == nullptr) return;
    Impl& l = live(layer, "layer");
    --l.owner->dependents;
    ptdp::capi::release(layer);
  });
}

}  // extern "C"
