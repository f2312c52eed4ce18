/* The C API used from C: a round trip, a cast, an error with its message, and the options
 * struct convention. */
#include <ptdp/ptdp.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;

#define EXPECT(cond)                                                  \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                     \
    }                                                                 \
  } while (0)

int main(void) {
  int32_t major = -1, minor = -1, patch = -1;
  EXPECT(ptdp_get_version(&major, &minor, &patch) == PTDP_SUCCESS);
  EXPECT(major == PTDP_VERSION_MAJOR && minor == PTDP_VERSION_MINOR && patch == PTDP_VERSION_PATCH);

  ptdp_tensor_options opts;
  EXPECT(ptdp_tensor_options_init(&opts) == PTDP_SUCCESS);
  EXPECT(opts.struct_size == sizeof opts);
  EXPECT(opts.dtype == PTDP_DTYPE_F32 && opts.device == PTDP_DEVICE_CPU);

  const int64_t shape[3] = {2, 1, 3};
  const int32_t ids[6] = {5, -4, 3, 2147483647, 0, 1};
  opts.dtype = PTDP_DTYPE_I32;
  ptdp_tensor t = NULL;
  EXPECT(ptdp_tensor_create(&opts, 3, shape, ids, sizeof ids, &t) == PTDP_SUCCESS);
  EXPECT(t != NULL);
  int32_t back[6] = {0};
  EXPECT(ptdp_tensor_copy_to_host(t, back, sizeof back) == PTDP_SUCCESS);
  EXPECT(memcmp(back, ids, sizeof ids) == 0);
  ptdp_dtype dtype = PTDP_DTYPE_F32;
  EXPECT(ptdp_tensor_dtype(t, &dtype) == PTDP_SUCCESS && dtype == PTDP_DTYPE_I32);

  /* Casting an integer tensor is refused, with a message, and leaves `out` alone. */
  ptdp_tensor out = NULL;
  EXPECT(ptdp_tensor_cast(t, PTDP_DTYPE_BF16, &out) == PTDP_ERR_INVALID_ARGUMENT);
  EXPECT(out == NULL);
  EXPECT(strstr(ptdp_last_error(), "ptdp_tensor_cast") != NULL);
  EXPECT(strstr(ptdp_last_error(), "src") != NULL);

  /* A successful call clears the message. */
  EXPECT(ptdp_tensor_fill(t, 7.0) == PTDP_SUCCESS);
  EXPECT(ptdp_last_error()[0] == '\0');
  EXPECT(ptdp_tensor_copy_to_host(t, back, sizeof back) == PTDP_SUCCESS && back[5] == 7);

  EXPECT(ptdp_tensor_destroy(t) == PTDP_SUCCESS);
  EXPECT(ptdp_tensor_destroy(NULL) == PTDP_SUCCESS);
  EXPECT(strcmp(ptdp_status_string(PTDP_ERR_TIMEOUT), "timeout") == 0);

  if (failures == 0) printf("c_abi_from_c: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
