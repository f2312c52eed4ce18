// The Backend interface: every compute primitive the engine needs, implemented once per device
// (kernels/cpu, kernels/cuda). core/ calls only this interface and never includes a
// device header. Kernels see raw pointers and sizes, never ranks or tensors: the core checks
// shapes, the backend computes.
//
// Conventions for every op:
//   - Matrices are row-major. "rows x cols" means cols is the contiguous dimension.
//   - Pointers refer to memory of this backend's device. Storage is f32, bf16 or f16 where a
//     DType is passed (void pointers), f32 where the pointer is float; compute is always fp32.
//   - Ops never allocate tensors; buffers for saved statistics are passed in by the caller (a
//     backend may keep private scratch, e.g. the CPU GEMM's fp32 copies of 16-bit operands).
//   - Sizes are validated; a bad size throws ptdp::Error(InvalidArgument) before any write.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"
#include "base/philox.h"

namespace ptdp {

/// What a GEMM does to its fp32 result before it is stored (cuBLASLt's epilogues). With
/// `r` = alpha * op(A) op(B) + beta * C computed in fp32:
///   None     : C = r
///   Bias     : C = r + bias[col]
///   BiasGelu : aux = r + bias[col] (the pre-GeLU input, saved for the backward); C = gelu(aux)
///   DGelu    : C = r * gelu'(aux) (the backward of a GeLU whose input aux was saved)
/// Everything happens in fp32 and C (and aux) are rounded to their storage type once.
enum class Epilogue : int { None = 0, Bias = 1, BiasGelu = 2, DGelu = 3 };

/// C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b] for b in [0, batch), row-major, followed by
/// the epilogue. op(A) is [m, k], op(B) is [k, n], C is [m, n]. Leading dimensions default (0) to
/// packed storage; batch strides are in elements and may be 0 to broadcast an operand. Strides
/// and leading dimensions let attention read Q, K and V straight out of the [s, b, a, 3, dh] QKV
/// activation without transposes (Megatron's layout).
///
/// A, B and C each have a storage type (f32, bf16 or f16); accumulation is always fp32. A and B
/// must share a type; C may be that type or f32 (wgrad accumulates 16-bit products into fp32
/// main gradients). Epilogues need batch == 1; bias has C's type and n elements; aux has C's
/// type and C's layout ([m, n] with leading dimension ldc).
struct GemmDesc {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  DType a_type = DType::F32, b_type = DType::F32, c_type = DType::F32;
  Epilogue epilogue = Epilogue::None;
  const void* bias = nullptr;  ///< Bias, BiasGelu
  void* aux = nullptr;         ///< BiasGelu: written; DGelu: read
};

/// Where a local block of a tensor sits inside the global (unpartitioned) tensor, viewed as
/// three dimensions. Element (i0, i1, i2) of the local block [shape] is global element
/// ((i0 + offset0) * global1 + (i1 + offset1)) * global2 + (i2 + offset2). One descriptor covers
/// splits along the sequence (dim 0), heads (dim 1) and hidden features (dim 2), so random
/// masks drawn from the global index are the same for every parallel layout.
struct GlobalBlock {
  int64_t shape[3] = {1, 1, 0};
  int64_t global_shape[3] = {1, 1, 0};
  int64_t offset[3] = {0, 0, 0};

  /// A block that is the whole flat tensor of n elements (kept in the contiguous last dim).
  static GlobalBlock flat(int64_t n) {
    GlobalBlock b;
    b.shape[2] = b.global_shape[2] = n;
    return b;
  }
  int64_t numel() const { return shape[0] * shape[1] * shape[2]; }
};

/// Dropout: y = x * keep / (1 - p), keep = (uniform(global index) >= p).
struct DropoutDesc {
  float p = 0.0f;
  PhiloxStream rng;
  GlobalBlock block;
};

/// AdamW (decoupled weight decay, bias-corrected moments; step counts from 1).
struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;
  /// Multiplies every gradient as it is read (the clipping coefficient), so clipping costs no
  /// pass of its own; the gradient buffer is left as it was.
  float grad_scale = 1.0f;
};

/// SGD with momentum (PyTorch's formulation: buf = momentum * buf + (g + wd * p), dampening 0).
struct SgdParams {
  float lr = 1e-2f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  bool first_step = false;  ///< the momentum buffer is initialised to the gradient
  /// As AdamWParams::grad_scale.
  float grad_scale = 1.0f;
};

/// Newton-Schulz orthogonalisation (Muon): x [rows, cols] row-major fp32 is replaced by an
/// approximation of U V^T for x = U S V^T. With k = min(rows, cols) the iteration runs on the
/// [k, max] orientation (x transposed when rows > cols):
///   X = x / max(||x||_F, eps)
///   for i in [0, steps): (a, b, c) = coefficients[i % num_sets]
///     A = X X^T            [k, k] (symmetric: half the products)
///     B = b A + c A A      [k, k]
///     X = a X + B X
/// precision: 0 fp32; 1 TF32 products on CUDA (fp32 on the CPU); 2 bf16 as PyTorch's
/// torch.optim.Muon and Megatron's "medium": X rounded to bf16 after the normalisation and A,
/// B and X rounded to bf16 after each product (fp32 accumulation and epilogue).
struct NewtonSchulzDesc {
  int64_t rows = 0, cols = 0;
  int steps = 5;
  float coefficients[8][3] = {};
  int num_sets = 0;  ///< coefficient sets in use, 1..8
  float eps = 1e-7f;
  int precision = 0;
};

/// FLOPs of newton_schulz on a [rows, cols] matrix over `steps` steps, counting the products the
/// iteration mathematically requires as full GEMMs (2 m n k each), as PyTorch and Megatron
/// count them: with k = min(rows, cols) and n = max(rows, cols), per step A = X X^T 2 k^2 n,
/// A A 2 k^3, B X 2 k^2 n, so 4 k^2 n + 2 k^3. The CPU computes A and A A as symmetric products
/// (half of those multiplications); the count stays the full one so that GFLOP/s compare across
/// devices and with other implementations. The normalisation and the axpy terms (O(k n)) are not
/// counted. The planner (core/plan) prices Muon's optimizer step with the same function.
inline double newton_schulz_flops(int64_t rows, int64_t cols, int steps) {
  const double k = static_cast<double>(rows < cols ? rows : cols);
  const double n = static_cast<double>(rows < cols ? cols : rows);
  return static_cast<double>(steps) * (4.0 * k * k * n + 2.0 * k * k * k);
}

/// Causal self-attention over the fused QKV activation, one (batch, head) pair at a time,
/// never storing the [s, s] scores (flash-attention style: tiles of keys, online softmax, the
/// log-sum-exp saved per query row for the backward).
///   qkv  [s, b, heads, 3, dh]   (Megatron's layout: q, k, v of a head side by side)
///   ctx  [s, b, heads, dh]      = dropout(softmax(scale * q k^T, causal)) v
///   lse  [b, heads, s] fp32     = log sum_j exp(scale * q_i k_j) over the keys row i sees
/// Dropout on the probabilities uses `dropout` with the same global indexing as the unfused
/// path ([b, global heads, s * s] blocks, see SelfAttention), so both paths drop the same
/// entries.
///
/// Grouped-query attention: with `groups` key/value heads (0 means groups == heads, multi-head
/// attention) the activation is [s, b, groups, heads/groups + 2, dh]: each group's heads/groups
/// query heads, then its key head, then its value head (Megatron-Core's linear_qkv layout; for
/// groups == heads it is the [s, b, heads, 3, dh] above). Query head hi = g * (heads/groups) + j
/// attends with its group g's key and value, which are read in place, never copied per query
/// head; ctx stays [s, b, heads, dh], lse [b, heads, s], and dqkv has qkv's layout (a group's
/// key and value gradients summed over its query heads).
///
/// Documents (Megatron's --reset-attention-mask, several documents packed into one sample):
/// with `document_starts` set, query i of sample bi attends only to keys
/// document_starts[bi * s + i] .. i, the positions of its own document (the softmax runs over
/// those keys alone; the others get probability exactly 0). The array is [b, s] int32 in the
/// backend's memory, one row per sample, and every row must be non-decreasing with
/// 0 <= start[i] <= i (contiguous documents: start[i] is start[i - 1], or i where a new
/// document begins); the core checks that on the host. The kernels clamp each start into
/// [0, i], so no value reads outside the activation, but rows that decrease give undefined
/// results. Key tiles wholly before a query tile's documents are skipped, so a sample of short
/// documents costs less than a causal one. The dropout mask keeps its indexing: probability
/// (i, j) is still element (bi, hi, i * s + j) of the [b, heads, s * s] block.
struct AttentionDesc {
  int64_t s = 0, b = 0, heads = 0, dh = 0;
  float scale = 1.0f;
  DropoutDesc dropout;  ///< p == 0: none
  int64_t groups = 0;   ///< key/value heads; 0: heads (multi-head attention)
  const int32_t* document_starts = nullptr;  ///< [b, s] (device); NULL: causal over the sample
  /// [b, heads] fp32 (device) or NULL: QK-clip's statistic (MuonClip). Entry bi * heads + hi is
  /// raised to the largest pre-softmax logit scale * q_i.k_j of (sample bi, query head hi) over
  /// the (query, key) pairs the softmax sees (causal, documents), merged in place
  /// (max(entry, this call's)), so the caller starts from -inf and may merge several calls.
  /// Dropout acts after the softmax and does not change it.
  float* max_logit = nullptr;

  int64_t kv_groups() const { return groups > 0 ? groups : heads; }
  int64_t q_per_group() const { return heads / kv_groups(); }
};

/// One (query block, key block) pair of ring attention (context parallelism): the fused kernel
/// on a block of sq consecutive query positions against a block of sk consecutive key positions
/// of the same samples, each block at its global place in a sequence of `seq` positions. Query
/// q_start + i sees key k_start + j when first <= k_start + j <= q_start + i, where first is the
/// query's document start (document_starts[bi * seq + q_start + i], clamped into [0, position])
/// or 0 without documents: a diagonal block is causal, an earlier block full, a later block
/// empty. The probabilities' dropout mask is AttentionDesc's for the whole sequence: probability
/// (query q, key k) of (sample bi, head hi) is element (bi, hi, q * seq + k) of `dropout`'s block
/// [b, heads, seq * seq], so blocks draw exactly the whole-sequence kernel's mask.
///   q     the block's query rows inside a [*, b, groups, heads/groups + 2, dh] activation
///         (AttentionDesc's layout; row stride b * groups * (heads/groups + 2) * dh); only the
///         query heads are read
///   kv    [sk, b, groups, 2, dh]: each group's key head, then its value head
///   out   [sq, b, heads, dh] fp32 and lse [b, heads, sq] fp32: the partial result so far (start
///         from out = 0, lse = -inf), merged in place with this block's by the log-sum-exp rule
///         (online softmax across blocks); rows that see no key of the block keep theirs
/// After every key block of a query block has been merged, out is AttentionDesc's ctx (in fp32)
/// and lse its lse. The backward takes the finished ctx and lse (and the output gradient dctx,
/// both [sq, b, heads, dh] in the storage type) and adds this block pair's share to dq
/// [sq, b, heads, dh] fp32 and dkv [sk, b, groups, 2, dh] fp32 (the flash-attention backward:
/// delta = rowsum(dctx * ctx), P = exp(scale q k^T - lse), ...).
struct AttentionBlockDesc {
  int64_t sq = 0, sk = 0, b = 0, heads = 0, dh = 0;
  int64_t groups = 0;  ///< key/value heads; 0: heads
  float scale = 1.0f;
  int64_t q_start = 0, k_start = 0;  ///< global positions of query row 0 and key row 0
  int64_t seq = 0;                   ///< the whole sequence's length (>= both blocks' ends)
  const int32_t* document_starts = nullptr;  ///< [b, seq] (device); NULL: causal over the sample
  DropoutDesc dropout;                       ///< p == 0: none; block [b, heads, seq * seq]
  /// [b, heads] fp32 (device) or NULL: AttentionDesc::max_logit over this block pair's visible
  /// (query, key) pairs, merged in place, so after every block pair it is the whole sequence's.
  float* max_logit = nullptr;

  int64_t kv_groups() const { return groups > 0 ? groups : heads; }
  int64_t q_per_group() const { return heads / kv_groups(); }
};

/// Rotary position embedding (Su et al.; Megatron's and Hugging Face's rotate-half convention)
/// applied in place to the query and key heads of the fused QKV activation
/// [s, b, groups, q_per_group + 2, dh] (AttentionDesc's layout; value heads are left alone).
/// For a token at position p and each i < rot_dim / 2, with angle = float(p) * inv_freq[i] (one
/// fp32 multiplication) and
/// cos, sin of that angle (evaluated in double, rounded to fp32, so both devices agree):
///   x[i]             <- x[i] cos - x[i + rot_dim/2] sin
///   x[i + rot_dim/2] <- x[i + rot_dim/2] cos + x[i] sin
/// Features [rot_dim, dh) pass through. The backward rotates by -angle (the transpose).
/// With amplitude A != 1 (YaRN's attention factor) the fp32 cos and sin are each multiplied by
/// A (one fp32 rounding, as Hugging Face scales its cos/sin tables) before the rotation, in the
/// forward and the backward alike; A = 1 multiplies exactly and changes no bit.
struct RopeDesc {
  int64_t s = 0, b = 0, groups = 0, q_per_group = 1, dh = 0;
  int64_t rot_dim = 0;                  ///< even, 0 < rot_dim <= dh
  const float* inv_freq = nullptr;      ///< [rot_dim / 2] fp32, on the backend's device
  const int32_t* positions = nullptr;   ///< [s, b] (device) position of each token; NULL: the
                                        ///< sequence index plus position_offset
  int64_t position_offset = 0;
  float amplitude = 1.0f;               ///< factor of cos and sin: finite, > 0
};

/// Which dimension of a grouped GEMM varies from group to group (GroupedGemmDesc).
enum class GroupedDim : int { M = 0, K = 1 };

/// G independent GEMMs in one call: the linears of the local experts of an MoE layer, whose
/// tokens sit in one expert-sorted buffer. Group g has its own size sizes[g] (a host array: the
/// caller already holds the counts on the host, so no device value is read to launch the work)
/// in the varying dimension; the operands whose rows vary are stacked (group g's rows follow
/// group g - 1's, leading dimensions as GemmDesc's), and the operand of fixed size sits at
/// base + g * stride. Everything else is GemmDesc's: row-major, A and B of one floating storage
/// type, C of that type or f32, fp32 accumulation, alpha and beta applied as
/// C = alpha * product + beta * C, each result rounded once.
///
///   varying M (forward and dgrad):  C_g [m_g, n] = alpha * A_g [m_g, k] op(B_g) + beta * C_g
///     A stacked [sum m_g, k] (lda), B_g stored [n, k] when trans_b else [k, n] (ldb) at
///     b + g * stride, C stacked [sum m_g, n] (ldc). Forward of an expert linear:
///     Y_g = X_g W_g^T (trans_b, W_g [n, k]); its dgrad: dX_g = dY_g W_g (no trans_b).
///   varying K (wgrad):  C_g [m, n] = alpha * A_g^T B_g + beta * C_g, the reduction over k_g
///     A stacked [sum k_g, m] (lda), B stacked [sum k_g, n] (ldb), C_g [m, n] (ldc) at
///     c + g * stride. The weight gradient dW_g [n_out, k_in] (+)= dY_g^T X_g: A = dY, B = X,
///     beta = 1 accumulating into fp32 main gradients under 16-bit A and B.
/// The varying field of the descriptor (m for M, k for K) is the total, sum(sizes), which the
/// checks compare with the sizes. A group of size 0 computes nothing under varying M; under
/// varying K its C_g becomes beta * C_g (0 for beta == 0, unchanged for beta == 1).
/// stride is in elements of the fixed operand (B_g for M, C_g for K); 0 means packed (the
/// matrix's rows * leading dimension). trans_b applies to varying M only.
struct GroupedGemmDesc {
  int64_t groups = 0;
  const int64_t* sizes = nullptr;  ///< host [groups]: m_g (varying M) or k_g (varying K), >= 0
  GroupedDim varying = GroupedDim::M;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t stride = 0;
  DType a_type = DType::F32, b_type = DType::F32, c_type = DType::F32;
};

/// The router's score function (Megatron's --moe-router-score-function; the values of
/// MoeScoreFunction in core/layers/layer_config.h).
enum class RouterScore : int { Softmax = 0, Sigmoid = 1 };

/// Top-k routing with Megatron-Core's semantics (moe_utils.topk_routing_with_score_function and
/// group_limited_topk), over fp32 logits [tokens, experts]. Per token, with l its logits row:
///   softmax, !pre_softmax: select on l; probs = softmax over the k selected logits
///   softmax, pre_softmax:  s = softmax(l) over all experts; select on s; probs = s[selected]
///   sigmoid:               s = sigmoid(l); select on s + expert_bias (bias [experts] fp32, or
///                          s itself without one); c = s[selected];
///                          probs = c / (sum(c) + 1e-20) when topk > 1, else c
/// then probs *= scaling_factor when it is not 0 (--moe-router-topk-scaling-factor).
/// Selection takes the topk largest values; slot j of a token holds its j-th largest, and equal
/// values rank by expert index, lower first (so ties are settled the same way on every device
/// and for every layout). Group-limited routing (num_groups > 0, DeepSeek's device- and
/// node-limited routing): the experts are num_groups consecutive groups; a group's score is the
/// sum of its m largest selection values, m = group_score_topk, or topk / group_topk (Megatron's)
/// when that is 0 (DeepSeek-V2's group_limited_greedy: m = 1, the group's max; DeepSeek-V3's
/// noaux_tc: m = 2); the group_topk best groups are kept (ties: lower group first) and the topk
/// experts are selected among theirs.
/// Requirements: 1 <= topk <= experts; with groups, num_groups divides experts,
/// 1 <= group_topk <= num_groups, group_topk groups hold at least topk experts, and either
/// group_score_topk is in [1, experts / num_groups] or it is 0, group_topk divides topk and
/// topk / group_topk <= experts / num_groups;
/// expert_bias needs the sigmoid score function (as Megatron, aux-loss-free balancing is
/// defined for sigmoid routers). NaN logits give an unspecified selection.
struct RouterDesc {
  int64_t tokens = 0, experts = 0, topk = 1;
  RouterScore score = RouterScore::Softmax;
  bool pre_softmax = false;
  int64_t num_groups = 0;  ///< 0: no group-limited routing
  int64_t group_topk = 0;
  float scaling_factor = 0.0f;  ///< 0: none
  /// The best selection values summed into a group's score; 0: topk / group_topk (Megatron's).
  int64_t group_score_topk = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual DeviceType device_type() const = 0;
  virtual const char* name() const = 0;

  // ---- memory movement -------------------------------------------------------------------
  virtual void copy_from_host(void* dst, const void* host_src, std::size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, std::size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  /// Waits until all work issued on this backend has finished.
  virtual void synchronize() = 0;

  // ---- GEMM ------------------------------------------------------------------------------
  /// See GemmDesc. Pointers are of the storage types the descriptor names.
  virtual void gemm(const GemmDesc& d, const void* a, const void* b, void* c) = 0;

  // ---- bias ------------------------------------------------------------------------------
  // Unless said otherwise, the ops below take activations and weights of one floating storage
  // type `t` (f32, bf16, f16), compute in fp32 and round each result once. Statistics
  // (means, reciprocal standard deviations, log-sum-exps) and parameter gradients are fp32.

  /// y[r, c] += bias[c] for a [rows, cols] matrix.
  virtual void bias_add(void* y, const void* bias, DType t, int64_t rows, int64_t cols) = 0;
  /// dbias[c] = (accumulate ? dbias[c] : 0) + sum_r dy[r, c]; dbias is fp32.
  virtual void bias_grad(const void* dy, DType t, float* dbias, int64_t rows, int64_t cols,
                         bool accumulate) = 0;

  // ---- GeLU, tanh approximation ------------------------------------------------------------
  /// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). In place (y == x) is allowed.
  virtual void gelu_forward(const void* x, void* y, DType t, int64_t n) = 0;
  /// dx = dy * gelu'(x). dx may alias dy.
  virtual void gelu_backward(const void* x, const void* dy, void* dx, DType t, int64_t n) = 0;

  // ---- LayerNorm over the last dimension ---------------------------------------------------
  /// y = (x - mean) * rstd * gamma + beta per row; saves mean[rows] and rstd[rows].
  virtual void layernorm_forward(const void* x, const void* gamma, const void* beta, void* y,
                                 DType t, float* mean, float* rstd, int64_t rows, int64_t cols,
                                 float eps) = 0;
  /// dx = d/dx; dgamma and dbeta are summed over rows, added to their contents when
  /// accumulate is set (several microbatches), overwritten otherwise; they are fp32.
  virtual void layernorm_backward(const void* x, const void* gamma, const float* mean,
                                  const float* rstd, const void* dy, void* dx, DType t,
                                  float* dgamma, float* dbeta, int64_t rows, int64_t cols,
                                  bool accumulate) = 0;

  // ---- RMSNorm over the last dimension (Zhang & Sennrich; Llama's norm, no bias) -------------
  /// y = x * rstd * gamma per row with rstd = 1 / sqrt(mean(x^2) + eps); saves rstd[rows].
  virtual void rmsnorm_forward(const void* x, const void* gamma, void* y, DType t, float* rstd,
                               int64_t rows, int64_t cols, float eps) = 0;
  /// dx = d/dx; dgamma (fp32) is summed over rows, added to its contents when accumulate is set,
  /// overwritten otherwise. dx may alias dy.
  virtual void rmsnorm_backward(const void* x, const void* gamma, const float* rstd,
                                const void* dy, void* dx, DType t, float* dgamma, int64_t rows,
                                int64_t cols, bool accumulate) = 0;

  // ---- RMSNorm over rows split across devices --------------------------------------------------
  // A row of `width` features of which this device holds `cols`: a norm over a whole query or key
  // projection under tensor parallelism, each tensor rank holding its heads' features. The row
  // statistics are sums over the whole row, which the caller completes across the devices
  // between two ops:
  //   forward:  row_dot(x, x) gives this device's sums of squares; summed over the devices,
  //             rmsnorm_split_forward takes them and gives y and rstd;
  //   backward: row_dot(dy, x, gamma) gives this device's sums of dy * gamma * x; summed over the
  //             devices, rmsnorm_split_backward takes them and gives dx and dgamma.
  // With one device (cols == width) these compute rmsnorm_forward's and rmsnorm_backward's
  // results up to the rounding of the row sums to fp32.
  /// rstd[r] = 1 / sqrt(sum_sq[r] / width + eps), y = x * rstd * gamma per row (x, y [rows,
  /// cols], gamma [cols]); sum_sq[r] is the whole row's sum of squares. sum_sq may alias rstd.
  virtual void rmsnorm_split_forward(const void* x, const void* gamma, const float* sum_sq,
                                     void* y, DType t, float* rstd, int64_t rows, int64_t cols,
                                     int64_t width, float eps) = 0;
  /// dx = rstd * (dy * gamma - x * rstd^2 * dot[r] / width), with dot[r] the whole row's sum of
  /// dy * gamma * x; dgamma (fp32, [cols]) is summed over rows of dy * x * rstd, added to its
  /// contents when accumulate is set, overwritten otherwise. dx may alias dy.
  virtual void rmsnorm_split_backward(const void* x, const void* gamma, const float* rstd,
                                      const float* dot, const void* dy, void* dx, DType t,
                                      float* dgamma, int64_t rows, int64_t cols, int64_t width,
                                      bool accumulate) = 0;

  // ---- SwiGLU (Shazeer 2020): the gated MLP activation ---------------------------------------
  /// x is [rows, 2 * cols], each row the gate half then the up half (the column-parallel fc1
  /// output of one tensor rank); y [rows, cols] = silu(gate) * up, silu(g) = g / (1 + e^-g).
  virtual void swiglu_forward(const void* x, void* y, DType t, int64_t rows, int64_t cols) = 0;
  /// dx [rows, 2 * cols] (gate, up halves) from the forward's input x and dy [rows, cols]. dx
  /// may alias x.
  virtual void swiglu_backward(const void* x, const void* dy, void* dx, DType t, int64_t rows,
                               int64_t cols) = 0;

  // ---- rotary position embedding (see RopeDesc) ----------------------------------------------
  /// Rotates the query and key heads of qkv in place by their positions' angles.
  virtual void rope_forward(void* qkv, DType t, const RopeDesc& d) = 0;
  /// The backward: rotates the query and key gradients of dqkv in place by minus the angles.
  virtual void rope_backward(void* dqkv, DType t, const RopeDesc& d) = 0;

  // ---- scale + causal mask + softmax over the last dimension --------------------------------
  /// x and y are [batch, sq, sk]; y = softmax(scale * x) per row; with causal set, query row i
  /// sees keys j <= i + (sk - sq) and the rest are exactly 0. y may alias x.
  virtual void softmax_forward(const void* x, void* y, DType t, int64_t batch, int64_t sq,
                               int64_t sk, float scale, bool causal) = 0;
  /// The causal softmax of packed documents (the unfused path's --reset-attention-mask): x and y
  /// are [batch, s, s] with batch = samples * heads, entry n holding the scores of sample
  /// n / heads; y = softmax(scale * x) per row, where row i of entry n sees only keys
  /// document_starts[(n / heads) * s + i] .. i (document_starts as AttentionDesc's: [samples, s]
  /// int32 in the backend's memory, each start clamped into [0, i]) and every other entry is
  /// exactly 0. Without documents (every start 0) it is softmax_forward(..., s, s, scale, true).
  /// y may alias x. Its backward is softmax_backward (the masked probabilities are 0).
  virtual void softmax_forward_documents(const void* x, void* y, DType t, int64_t batch,
                                         int64_t heads, int64_t s, float scale,
                                         const int32_t* document_starts) = 0;
  /// dx = scale * y * (dy - sum_j dy_j y_j). dx may alias dy.
  virtual void softmax_backward(const void* y, const void* dy, void* dx, DType t, int64_t batch,
                                int64_t sq, int64_t sk, float scale) = 0;

  // ---- fused causal attention (see AttentionDesc) ---------------------------------------------
  /// Whether this backend has a fused attention kernel for storage type t and head dim dh
  /// (the layers fall back to GEMM + softmax + GEMM where it has not).
  virtual bool fused_attention_supported(DType t, int64_t dh) const = 0;
  /// ctx and lse from qkv (any AttentionDesc::groups dividing heads). Throws Error(Unsupported)
  /// where fused_attention_supported is false.
  virtual void attention_forward(const AttentionDesc& d, const void* qkv, void* ctx, float* lse,
                                 DType t) = 0;
  /// dqkv (qkv's layout) from the forward's qkv, ctx, lse and the output gradient dctx.
  /// delta [b, heads, s] fp32 is scratch (rowsum(dctx * ctx)).
  virtual void attention_backward(const AttentionDesc& d, const void* qkv, const void* ctx,
                                  const float* lse, const void* dctx, void* dqkv, float* delta,
                                  DType t) = 0;

  /// Whether this backend has the block-pair kernels below for storage type t and head dim dh
  /// (context parallelism falls back to all-gathering the sequence where it has not).
  virtual bool attention_block_supported(DType t, int64_t dh) const = 0;
  /// Ring attention's forward on one block pair (see AttentionBlockDesc): merges the block's
  /// context and log-sum-exps into out and lse. Throws Error(Unsupported) where
  /// attention_block_supported is false.
  virtual void attention_block_forward(const AttentionBlockDesc& d, const void* q, const void* kv,
                                       float* out, float* lse, DType t) = 0;
  /// Ring attention's backward on one block pair: adds its share to dq and dkv (fp32), from the
  /// finished ctx and lse of the query block and the output gradient dctx.
  virtual void attention_block_backward(const AttentionBlockDesc& d, const void* q, const void* kv,
                                        const void* ctx, const float* lse, const void* dctx,
                                        float* dq, float* dkv, DType t) = 0;

  // ---- dropout (mask regenerated from Philox, never stored) --------------------------------
  virtual void dropout_forward(const void* x, void* y, DType t, const DropoutDesc& d) = 0;
  virtual void dropout_backward(const void* dy, void* dx, DType t, const DropoutDesc& d) = 0;
  /// The end of an attention or MLP block, fused: y = residual + dropout(x + bias) over a
  /// [rows, cols] matrix (bias [cols] may be NULL: none; d.p == 0: no dropout). The mask is
  /// dropout_forward's for the same DropoutDesc (block over the rows * cols elements). y may
  /// alias residual. Its backward is dropout_backward (for x) and bias_grad of that.
  virtual void bias_dropout_add(const void* x, const void* bias, const void* residual, void* y,
                                DType t, int64_t rows, int64_t cols, const DropoutDesc& d) = 0;

  // ---- elementwise ---------------------------------------------------------------------------
  /// y = a + b (residual add). y may alias a or b.
  virtual void add(const void* a, const void* b, void* y, DType t, int64_t n) = 0;
  /// y += alpha * x (gradient accumulation, fp32).
  virtual void axpy(float alpha, const float* x, float* y, int64_t n) = 0;
  /// x *= alpha (fp32).
  virtual void scale(float* x, float alpha, int64_t n) = 0;
  /// Sets n elements of type t to value (converted to t).
  virtual void fill(void* x, DType t, double value, int64_t n) = 0;
  /// Copies a [rows, cols] sub-matrix of type t (any dtype) between buffers with leading
  /// dimensions ld_dst and ld_src (>= cols): gathers column shards into one matrix and slices
  /// them out again.
  virtual void copy_2d(void* dst, int64_t ld_dst, const void* src, int64_t ld_src, DType t,
                       int64_t rows, int64_t cols) = 0;
  /// Sets a [rows, cols] floating sub-matrix with leading dimension ld to value (e.g. -inf over
  /// the logits of padded vocabulary rows).
  virtual void fill_2d(void* x, DType t, int64_t ld, int64_t rows, int64_t cols, float value) = 0;
  /// Converts n elements; src and dst may be any floating dtype (f32, bf16, f16).
  virtual void cast(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) = 0;
  /// Sum of squares of n elements, accumulated in double (grad-norm building block).
  virtual double sum_squares(const float* x, int64_t n) = 0;
  /// out[r] = sum_c a[r, c] * b[r, c] * (w ? w[c] : 1) over rows of [rows, cols] (a, b and w of
  /// storage type t; w may be NULL, a may equal b), accumulated in double, stored as fp32: the
  /// per-row statistics of the split RMSNorm (rmsnorm_split_forward).
  virtual void row_dot(const void* a, const void* b, const void* w, DType t, float* out,
                       int64_t rows, int64_t cols) = 0;

  // ---- vocabulary-parallel embedding ----------------------------------------------------------
  /// out[i, :] = table[ids[i] - vocab_start, :] when vocab_start <= ids[i] < vocab_start +
  /// vocab_rows, else 0 (another tensor rank owns that row). out is [n, h], table [vocab_rows, h].
  virtual void embedding_forward(const int32_t* ids, int64_t n, const void* table, DType t,
                                 int64_t vocab_start, int64_t vocab_rows, int64_t h,
                                 void* out) = 0;
  /// dtable[ids[i] - vocab_start, :] += dout[i, :] for the ids this rank owns (deterministic);
  /// dtable is fp32.
  virtual void embedding_backward(const int32_t* ids, int64_t n, const void* dout, DType t,
                                  int64_t vocab_start, int64_t vocab_rows, int64_t h,
                                  float* dtable) = 0;

  // ---- cross-entropy over (possibly vocabulary-parallel) logits [rows, v] of type t ------------
  /// One pass over this slice's logits: row_max[r] = max_j logits[r, j], sum_exp[r] =
  /// sum_j exp(logits[r, j] - row_max[r]) (online), and target_logit[r] = logits[r, targets[r] -
  /// vocab_start] when this slice holds the target, else 0. All outputs fp32.
  virtual void ce_forward_local(const void* logits, DType t, const int32_t* targets, int64_t rows,
                                int64_t v, int64_t vocab_start, float* row_max, float* sum_exp,
                                float* target_logit) = 0;
  /// Moves per-slice sums to the global max: sum_exp[r] *= exp(row_max[r] - global_max[r]),
  /// then row_max[r] = global_max[r] (so a sum over the tensor group gives the global sum).
  /// global_max may alias nothing else; rows of -inf (no valid column) contribute 0.
  virtual void ce_rescale(float* row_max, float* sum_exp, const float* global_max,
                          int64_t rows) = 0;
  /// loss[r] = log(sum_exp[r]) + row_max[r] - target_logit[r] (all already reduced).
  virtual void ce_loss(const float* row_max, const float* sum_exp, const float* target_logit,
                       int64_t rows, float* loss) = 0;
  /// dlogits[r, j] = dloss[r] * (exp(logits[r, j] - row_max[r]) / sum_exp[r] - [j is target]).
  /// dlogits (type t) may alias logits.
  virtual void ce_backward(const void* logits, DType t, const float* row_max,
                           const float* sum_exp, const int32_t* targets, const float* dloss,
                           int64_t rows, int64_t v, int64_t vocab_start, void* dlogits) = 0;

  // ---- mixture of experts (core/layers/moe/) -------------------------------------------------
  /// See GroupedGemmDesc: every group's GEMM, on this backend's stream without waiting for the
  /// device between groups.
  virtual void grouped_gemm(const GroupedGemmDesc& d, const void* a, const void* b, void* c) = 0;

  /// Token routing to expert-sorted rows, a stable counting sort. indices [tokens, k] int32
  /// holds each slot's expert in [0, experts), or -1 for a dropped slot. Writes
  ///   counts [experts] int64, a HOST array: the slots each expert received;
  ///   row_of [tokens * k] int32: slot (t, j)'s row in the expert-sorted buffer, -1 if dropped.
  /// Expert e's rows are [sum_{e' < e} counts[e'], + counts[e]) and hold its slots in increasing
  /// slot order t * k + j (token order, then slot order; Megatron's permute order). An index
  /// outside [-1, experts) is refused, naming the first such slot, before row_of is written.
  /// experts <= kcheck::kMaxExperts. Synchronous: the CUDA backend copies counts back (its one
  /// wait for the device).
  virtual void moe_route(const int32_t* indices, int64_t tokens, int64_t k, int64_t experts,
                         int32_t* row_of, int64_t* counts) = 0;

  /// Dispatch: out[row_of[t * k + j], :] = x[t, :] for every slot that is not dropped; x is
  /// [tokens, h] and out [rows, h] of any dtype t (a byte copy). Rows no slot maps to are left
  /// as they are. Entries of row_of outside [0, rows) are never dereferenced (treated as dropped).
  virtual void moe_permute(const void* x, DType t, const int32_t* row_of, int64_t tokens,
                           int64_t k, int64_t h, int64_t rows, void* out) = 0;

  /// Combine: y[t, :] = sum_j w[t, j] * e[row_of[t * k + j], :] over the slots that are not
  /// dropped, in increasing j, in fp32, rounded once to t (0 for a token whose slots are all
  /// dropped). w is probs [tokens, k] fp32, or 1 where probs is NULL: then this is the
  /// backward of moe_permute (dx from dout). e is [rows, h], y [tokens, h], floating type t.
  virtual void moe_unpermute(const void* e, DType t, const float* probs, const int32_t* row_of,
                             int64_t tokens, int64_t k, int64_t h, int64_t rows, void* y) = 0;

  /// The backward of moe_unpermute with probs, for every slot (t, j) that is not dropped:
  ///   de[row_of[t * k + j], :] = probs[t, j] * dy[t, :]                 (rounded once to t)
  ///   dprobs[t, j] = sum_c dy[t, c] * e[row_of[t * k + j], c]          (fp32; 0 if dropped)
  /// dy [tokens, h], e and de [rows, h]; rows of de no slot maps to are left as they are.
  virtual void moe_unpermute_backward(const void* dy, const void* e, DType t, const float* probs,
                                      const int32_t* row_of, int64_t tokens, int64_t k, int64_t h,
                                      int64_t rows, void* de, float* dprobs) = 0;

  /// Top-k routing (see RouterDesc): indices [tokens, topk] int32 and probs [tokens, topk] fp32
  /// from logits [tokens, experts] fp32; expert_bias [experts] fp32 or NULL.
  virtual void moe_router_forward(const RouterDesc& d, const float* logits,
                                  const float* expert_bias, int32_t* indices, float* probs) = 0;
  /// dlogits [tokens, experts] fp32 = (accumulate ? dlogits : 0) + d probs / d logits applied to
  /// dprobs [tokens, topk], through the path the forward took with these indices (selection is
  /// piecewise constant; experts not selected get 0). indices are the forward's own, before any
  /// capacity drop (a dropped slot's dprobs is 0, as moe_unpermute_backward writes it; entries
  /// outside [0, experts) are skipped, never dereferenced). The scores are recomputed from logits
  /// (a few exps per expert, cheaper than keeping [tokens, experts] per microbatch):
  ///   softmax, !pre_softmax: q = softmax(selected logits); dl_sel = f q (dp - <q, dp>)
  ///   softmax, pre_softmax:  s = softmax(l); ds = f dp at the selected experts;
  ///                          dl = s (ds - <s, ds>)
  ///   sigmoid, topk > 1:     S = sum(c) + 1e-20; dc = f (dp / S - <dp, c> / S^2);
  ///                          dl_sel = dc s (1 - s)        (topk == 1: dc = f dp)
  /// with f the scaling factor (1 when it is 0).
  virtual void moe_router_backward(const RouterDesc& d, const float* logits,
                                   const int32_t* indices, const float* dprobs, float* dlogits,
                                   bool accumulate) = 0;

  /// The scores of the load-balancing loss (Megatron's compute_routing_scores_for_aux_loss),
  /// scores [tokens, experts] fp32 from logits: softmax over the experts, or for sigmoid
  /// sigmoid(l) / (sum_e sigmoid(l_e) + 1e-20).
  virtual void moe_aux_scores_forward(RouterScore score, const float* logits, int64_t tokens,
                                      int64_t experts, float* scores) = 0;
  /// dlogits = (accumulate ? dlogits : 0) + the backward of moe_aux_scores_forward applied to
  /// dscores [tokens, experts] (scores recomputed from logits):
  ///   softmax: dl = s (ds - <s, ds>)
  ///   sigmoid: S = sum sigmoid(l) + 1e-20; dsig = ds / S - <ds, sigmoid(l)> / S^2;
  ///            dl = dsig sigmoid(l) (1 - sigmoid(l))
  virtual void moe_aux_scores_backward(RouterScore score, const float* logits,
                                       const float* dscores, int64_t tokens, int64_t experts,
                                       float* dlogits, bool accumulate) = 0;

  /// The router z-loss's pieces (ST-MoE; Megatron's z_loss_func = coeff * mean_t lse_t^2):
  /// lse [tokens] fp32 = log sum_e exp(logits[t, e]).
  virtual void moe_router_lse(const float* logits, int64_t tokens, int64_t experts,
                              float* lse) = 0;
  /// dlogits[t, e] = (accumulate ? dlogits[t, e] : 0) + scale * 2 lse[t] softmax(logits[t])_e,
  /// the gradient of scale * sum_t lse_t^2 (scale = coeff / tokens for Megatron's mean).
  virtual void moe_router_z_loss_backward(const float* logits, const float* lse, float scale,
                                          int64_t tokens, int64_t experts, float* dlogits,
                                          bool accumulate) = 0;

  // ---- optimizer steps over flat buffers ----------------------------------------------------
  virtual void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                          const AdamWParams& p) = 0;
  virtual void sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n,
                        const SgdParams& p) = 0;
  /// Orthogonalises x [d.rows, d.cols] in place (NewtonSchulzDesc); scratch is the backend's.
  virtual void newton_schulz(float* x, const NewtonSchulzDesc& d) = 0;
};

/// The process-wide CPU backend (OpenBLAS + OpenMP).
Backend& cpu_backend();

}  // namespace ptdp
