/* Tensors through the ptdp C API: create from host data, query, convert to bfloat16 and back,
 * and handle an error the way every ptdp call reports one. */
#include <ptdp/ptdp.h>
#include <stdio.h>

#define CHECK(call)                                                                   \
  do {                                                                                \
    ptdp_status st_ = (call);                                                         \
    if (st_ != PTDP_SUCCESS) {                                                        \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, ptdp_status_string(st_), ptdp_last_error()); \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

int main(void) {
  printf("ptdp %s (header %d.%d.%d)\n", ptdp_version(), PTDP_VERSION_MAJOR, PTDP_VERSION_MINOR,
         PTDP_VERSION_PATCH);

  const float values[6] = {1.0f, 2.5f, -3.25f, 1.0f / 3.0f, 1e-3f, 65504.0f};
  const int64_t shape[2] = {2, 3};
  ptdp_tensor_options opts;
  CHECK(ptdp_tensor_options_init(&opts));
  ptdp_tensor x = NULL, x_bf16 = NULL, back = NULL;
  CHECK(ptdp_tensor_create(&opts, 2, shape, values, sizeof values, &x));

  int64_t dims[PTDP_MAX_DIMS];
  int32_t ndim = 0;
  CHECK(ptdp_tensor_ndim(x, &ndim));
  CHECK(ptdp_tensor_shape(x, dims, PTDP_MAX_DIMS));
  printf("x: %d dims, shape [%lld, %lld]\n", ndim, (long long)dims[0], (long long)dims[1]);

  CHECK(ptdp_tensor_cast(x, PTDP_DTYPE_BF16, &x_bf16));
  CHECK(ptdp_tensor_cast(x_bf16, PTDP_DTYPE_F32, &back));
  float rounded[6];
  CHECK(ptdp_tensor_copy_to_host(back, rounded, sizeof rounded));
  for (int i = 0; i < 6; ++i) printf("  %-12g -> bf16 -> %g\n", (double)values[i], (double)rounded[i]);

  /* A mistake reports a status and a message naming the argument; nothing else changes. */
  const int64_t bad_shape[2] = {2, -3};
  ptdp_tensor y = NULL;
  ptdp_status st = ptdp_tensor_create(&opts, 2, bad_shape, NULL, 0, &y);
  printf("bad shape: %s: %s (y still %s)\n", ptdp_status_string(st), ptdp_last_error(),
         y == NULL ? "NULL" : "set");

  CHECK(ptdp_tensor_destroy(back));
  CHECK(ptdp_tensor_destroy(x_bf16));
  CHECK(ptdp_tensor_destroy(x));
  return st == PTDP_ERR_INVALID_ARGUMENT && y == NULL ? 0 : 1;
}
