/**
 * @file ptdp.h
 * @brief The ptdp C API: the one stable ABI of the library.
 *
 * Conventions that hold for every function declared here:
 *
 * - **Status.** Every function that can fail returns a ::ptdp_status. ::PTDP_SUCCESS is 0.
 *   On failure ptdp_last_error() returns a message that names the function and the offending
 *   argument, for example `ptdp_tensor_create: shape[1] = -3 is negative`.
 * - **No side effects on error.** A call that fails leaves its output arguments and every
 *   handle it was given unchanged and usable.
 * - **Nothing escapes.** No C++ exception, `abort()` or `exit()` crosses this interface.
 * - **Handles** are opaque pointers owned by the caller and released by the matching
 *   `*_destroy` function, which accepts NULL.
 * - **Options structs** start with `size_t struct_size`. Fill them with the matching
 *   `*_options_init()` function, then change the fields you need. The library reads only the
 *   bytes the caller's struct_size covers, so programs built against an older header keep
 *   working; bytes beyond the fields this library knows must be zero.
 * - **Enums** have explicit values and only ever grow at the end.
 * - **Thread safety.** Functions are thread-safe unless a function's documentation says
 *   otherwise; a single handle must not be used from two threads at once. The last-error
 *   message is per thread.
 */
#ifndef PTDP_PTDP_H
#define PTDP_PTDP_H

#include <stddef.h>
#include <stdint.h>

/** @name Version
 *  The version of the header; ptdp_version() gives the library's.
 *  @{ */
#define PTDP_VERSION_MAJOR 0 /**< Incremented for ABI-incompatible changes (SONAME libptdp.so.MAJOR). */
#define PTDP_VERSION_MINOR 1 /**< Incremented when functions or enum values are added. */
#define PTDP_VERSION_PATCH 0 /**< Incremented for fixes. */
/** Combines a version into one comparable integer. */
#define PTDP_VERSION_ENCODE(major, minor, patch) ((major) * 10000 + (minor) * 100 + (patch))
/** The header's version as one integer, for `#if PTDP_VERSION_CODE >= PTDP_VERSION_ENCODE(0, 2, 0)`. */
#define PTDP_VERSION_CODE PTDP_VERSION_ENCODE(PTDP_VERSION_MAJOR, PTDP_VERSION_MINOR, PTDP_VERSION_PATCH)
/** @} */

/** Marks the functions the shared library exports; everything else is hidden. */
#if defined(_WIN32)
#define PTDP_API
#else
#define PTDP_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** Result of every fallible call. */
typedef enum ptdp_status {
  PTDP_SUCCESS = 0,               /**< The call succeeded. */
  PTDP_ERR_INVALID_ARGUMENT = 1,  /**< An argument was NULL, out of range or inconsistent; nothing changed. */
  PTDP_ERR_OUT_OF_MEMORY = 2,     /**< Host or device memory ran out; the message gives the size. */
  PTDP_ERR_UNSUPPORTED = 3,       /**< Valid, but not available in this build or on this device. */
  PTDP_ERR_INTERNAL = 4,          /**< A bug in ptdp; please report the message. */
  PTDP_ERR_TIMEOUT = 5,           /**< A blocking operation did not complete in time; the message names the rank. */
  PTDP_ERR_COMMUNICATION = 6,     /**< MPI or NCCL reported an error. */
  PTDP_ERR_DEVICE = 7,            /**< The GPU runtime reported an error. */
  PTDP_ERR_IO = 8,                /**< Reading or writing a file failed. */
  PTDP_ERR_INVALID_STATE = 9      /**< The call is not valid in the object's current state. */
} ptdp_status;

/** Element type of a tensor. */
typedef enum ptdp_dtype {
  PTDP_DTYPE_F32 = 0,  /**< IEEE binary32. */
  PTDP_DTYPE_BF16 = 1, /**< bfloat16 (8-bit exponent, 7-bit mantissa). */
  PTDP_DTYPE_F16 = 2,  /**< IEEE binary16. */
  PTDP_DTYPE_I32 = 3,  /**< 32-bit signed integer (token ids). */
  PTDP_DTYPE_I64 = 4   /**< 64-bit signed integer. */
} ptdp_dtype;

/** Kind of device a tensor lives on. */
typedef enum ptdp_device {
  PTDP_DEVICE_CPU = 0, /**< Host memory, CPU engine (OpenBLAS + OpenMP). */
  PTDP_DEVICE_CUDA = 1 /**< NVIDIA GPU memory, CUDA engine. */
} ptdp_device;

/** Optional parts of the library, compiled in or not. */
typedef enum ptdp_feature {
  PTDP_FEATURE_CUDA = 0, /**< The CUDA toolchain was available when ptdp was built. */
  PTDP_FEATURE_NCCL = 1, /**< NCCL communication for GPU tensors. */
  PTDP_FEATURE_MPI = 2   /**< MPI communication between ranks. */
} ptdp_feature;

/* ---------------------------------------------------------------------------------------- */
/** @name Errors and version
 *  @{ */

/**
 * @brief A fixed description of a status code, e.g. "invalid argument".
 * @param status Any value; unknown codes give "unknown status".
 * @return A static string; never NULL. Thread-safe.
 */
PTDP_API const char* ptdp_status_string(ptdp_status status);

/**
 * @brief The message of the last failed call on this thread.
 *
 * Every fallible function clears the message when it starts, so after a call that returned
 * ::PTDP_SUCCESS this is the empty string.
 * @return A string owned by the library, valid until the next ptdp call on this thread;
 *         never NULL. Thread-safe (the message is per thread).
 */
PTDP_API const char* ptdp_last_error(void);

/**
 * @brief The library's version as "MAJOR.MINOR.PATCH".
 * @return A static string; never NULL. Thread-safe.
 */
PTDP_API const char* ptdp_version(void);

/**
 * @brief The library's version as numbers (compare with the PTDP_VERSION_* macros of the header
 *        a program was built with).
 * @param[out] major, minor, patch Receive the components; each must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT a pointer is NULL.
 */
PTDP_API ptdp_status ptdp_get_version(int32_t* major, int32_t* minor, int32_t* patch);

/**
 * @brief Whether an optional part was compiled into this build.
 * @param feature One of ::ptdp_feature.
 * @param[out] available Receives 1 or 0; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT unknown feature or NULL output.
 */
PTDP_API ptdp_status ptdp_has_feature(ptdp_feature feature, int32_t* available);

/**
 * @brief Size in bytes of one element of a dtype.
 * @param dtype One of ::ptdp_dtype.
 * @param[out] bytes Receives the size; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT unknown dtype or NULL output.
 */
PTDP_API ptdp_status ptdp_dtype_size(ptdp_dtype dtype, size_t* bytes);

/** @} */

/* ---------------------------------------------------------------------------------------- */
/** @name Tensors
 *  Dense, contiguous, row-major arrays of up to ::PTDP_MAX_DIMS dimensions on one device.
 *  @{ */

/** Largest number of dimensions a tensor can have. */
#define PTDP_MAX_DIMS 8

/** Opaque handle to a tensor. */
typedef struct ptdp_tensor_impl* ptdp_tensor;

/** Options for ptdp_tensor_create(). Initialise with ptdp_tensor_options_init(). */
typedef struct ptdp_tensor_options {
  size_t struct_size;   /**< sizeof(ptdp_tensor_options), set by ptdp_tensor_options_init(). */
  ptdp_dtype dtype;     /**< Element type; default ::PTDP_DTYPE_F32. */
  ptdp_device device;   /**< Device; default ::PTDP_DEVICE_CPU. */
  int32_t device_index; /**< Device ordinal; default 0 (the CPU has only 0). */
} ptdp_tensor_options;

/**
 * @brief Fills @p options with the defaults and sets its struct_size.
 * @param[out] options Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p options is NULL.
 */
PTDP_API ptdp_status ptdp_tensor_options_init(ptdp_tensor_options* options);

/**
 * @brief Creates a tensor, copying its contents from host memory.
 *
 * @param options     Element type and device; NULL means the defaults.
 * @param ndim        Number of dimensions, 0 (a scalar) to ::PTDP_MAX_DIMS.
 * @param shape       @p ndim extents, each >= 0; may be NULL when @p ndim is 0.
 * @param host_data   Row-major elements to copy, or NULL for a zero-filled tensor.
 * @param host_bytes  Size of @p host_data in bytes: must equal the tensor's size
 *                    (elements x dtype size), or 0 when @p host_data is NULL.
 * @param[out] out    Receives the new handle; must not be NULL. Unchanged on error.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL @p out; bad options (struct_size, dtype, device,
 *         device_index); @p ndim out of range; a negative extent; an element count or byte
 *         size that overflows; @p host_bytes not matching the shape.
 * @retval PTDP_ERR_UNSUPPORTED the device is not available in this build.
 * @retval PTDP_ERR_OUT_OF_MEMORY the allocation failed.
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_tensor_create(const ptdp_tensor_options* options, int32_t ndim,
                                        const int64_t* shape, const void* host_data,
                                        size_t host_bytes, ptdp_tensor* out);

/**
 * @brief Releases a tensor. NULL is accepted and ignored.
 * @param tensor A handle from ptdp_tensor_create() or ptdp_tensor_cast(), or NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p tensor is not a live tensor handle (detected on a
 *         best-effort basis, e.g. a second destroy).
 */
PTDP_API ptdp_status ptdp_tensor_destroy(ptdp_tensor tensor);

/**
 * @brief Number of dimensions.
 * @param tensor A live tensor handle.
 * @param[out] ndim Receives the count; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or dead handle, or NULL output.
 */
PTDP_API ptdp_status ptdp_tensor_ndim(ptdp_tensor tensor, int32_t* ndim);

/**
 * @brief The extents of every dimension.
 * @param tensor A live tensor handle.
 * @param[out] shape Receives ndim extents; may be NULL only when the tensor is a scalar.
 * @param capacity Number of elements @p shape can hold; must be >= the tensor's ndim.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or dead handle, NULL @p shape, or @p capacity too small.
 */
PTDP_API ptdp_status ptdp_tensor_shape(ptdp_tensor tensor, int64_t* shape, int32_t capacity);

/**
 * @brief Element type.
 * @param tensor A live tensor handle.
 * @param[out] dtype Receives the type; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or dead handle, or NULL output.
 */
PTDP_API ptdp_status ptdp_tensor_dtype(ptdp_tensor tensor, ptdp_dtype* dtype);

/**
 * @brief Device the tensor lives on.
 * @param tensor A live tensor handle.
 * @param[out] device Receives the device kind; must not be NULL.
 * @param[out] device_index Receives the device ordinal; may be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or dead handle, or NULL @p device.
 */
PTDP_API ptdp_status ptdp_tensor_device(ptdp_tensor tensor, ptdp_device* device,
                                        int32_t* device_index);

/**
 * @brief Number of elements (1 for a scalar, 0 when any extent is 0).
 * @param tensor A live tensor handle.
 * @param[out] numel Receives the count; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or dead handle, or NULL output.
 */
PTDP_API ptdp_status ptdp_tensor_numel(ptdp_tensor tensor, int64_t* numel);

/**
 * @brief Size of the tensor's elements in bytes.
 * @param tensor A live tensor handle.
 * @param[out] nbytes Receives the size; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or dead handle, or NULL output.
 */
PTDP_API ptdp_status ptdp_tensor_nbytes(ptdp_tensor tensor, size_t* nbytes);

/**
 * @brief Copies the elements into host memory (row-major).
 * @param tensor A live tensor handle.
 * @param[out] dst Destination; may be NULL only when the tensor has no elements.
 * @param dst_bytes Capacity of @p dst; must be >= ptdp_tensor_nbytes().
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or dead handle, NULL @p dst, @p dst_bytes too small.
 */
PTDP_API ptdp_status ptdp_tensor_copy_to_host(ptdp_tensor tensor, void* dst, size_t dst_bytes);

/**
 * @brief Overwrites the elements from host memory (row-major).
 * @param tensor A live tensor handle.
 * @param src Source; may be NULL only when the tensor has no elements.
 * @param src_bytes Size of @p src; must equal ptdp_tensor_nbytes().
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or dead handle, NULL @p src, @p src_bytes mismatched.
 * @par Thread safety
 * Writes the tensor: do not use the same tensor from another thread meanwhile.
 */
PTDP_API ptdp_status ptdp_tensor_copy_from_host(ptdp_tensor tensor, const void* src,
                                                size_t src_bytes);

/**
 * @brief Creates a new tensor holding @p src's elements converted to @p dtype
 *        (round to nearest even; f32, bf16 and f16 only).
 * @param src A live tensor handle of a floating dtype.
 * @param dtype Target type: ::PTDP_DTYPE_F32, ::PTDP_DTYPE_BF16 or ::PTDP_DTYPE_F16.
 * @param[out] out Receives the new handle; must not be NULL. Unchanged on error.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or dead handle, NULL @p out, unknown or
 *         non-floating dtype (source or target).
 * @retval PTDP_ERR_OUT_OF_MEMORY the allocation failed.
 */
PTDP_API ptdp_status ptdp_tensor_cast(ptdp_tensor src, ptdp_dtype dtype, ptdp_tensor* out);

/**
 * @brief Sets every element to @p value (converted to the tensor's dtype).
 * @param tensor A live tensor handle.
 * @param value The value; must be finite for integer dtypes and within their range.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or dead handle, or a value an integer dtype cannot hold.
 * @par Thread safety
 * Writes the tensor: do not use the same tensor from another thread meanwhile.
 */
PTDP_API ptdp_status ptdp_tensor_fill(ptdp_tensor tensor, double value);

/** @} */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PTDP_PTDP_H */
