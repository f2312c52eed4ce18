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
 *   `*_destroy` function, which accepts NULL. The library keeps a registry of its live handles
 *   and checks every handle argument there before touching it: a destroyed (destroying twice
 *   included), never-created or wrong-typed handle is ::PTDP_ERR_INVALID_ARGUMENT naming the
 *   argument. (A stale handle whose address was reused by a new handle of the same type names
 *   that new handle: set copies to NULL after destroying.)
 * - **Numbers are checked.** Negative counts and iterations, NaN or infinite scales, rates and
 *   costs, out-of-range enum values and empty paths are ::PTDP_ERR_INVALID_ARGUMENT; sizes
 *   derived from the sizes given (MLP and attention widths, weight, activation and parameter
 *   counts) are computed with overflow checks and refused, naming the fields, when they overflow.
 * - **Options structs** start with `size_t struct_size`. Fill them with the matching
 *   `*_options_init()` function, then change the fields you need. The library reads only the
 *   bytes the caller's struct_size covers, so programs built against an older header keep
 *   working: any struct_size from the size the struct was first published with is accepted,
 *   the fields it does not cover taking their defaults. Bytes beyond the fields this library
 *   knows must be zero; a smaller size or a non-zero tail is ::PTDP_ERR_INVALID_ARGUMENT.
 * - **Structs the library fills** are never written past the caller's end. The functions whose
 *   documentation says so take the room from the caller's struct_size; the others (the
 *   `*_init` functions and the getters of a parsed command line) write the struct of the
 *   header the program was built against: a program is linked to the symbol version of each
 *   function that its header's library exported, and the older versions, which programs of
 *   0.1.0 to 0.3.0 call, write their releases' sizes. struct_size says what was written.
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
#define PTDP_VERSION_MINOR 4 /**< Incremented when functions or enum values are added. */
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

/** Marks a function kept only so that older programs still link; the compiler names the
 *  replacement. */
#if defined(SWIG) || defined(_WIN32)
#define PTDP_DEPRECATED(replacement)
#else
#define PTDP_DEPRECATED(replacement) __attribute__((deprecated("use " replacement)))
#endif

/** Under C++, every enum of this header has `int` as its fixed underlying type: any `int` a C
 *  caller passes (C enums hold any `int`) is then a value of the C++ type, which the library
 *  range-checks and refuses with ::PTDP_ERR_INVALID_ARGUMENT. The size and layout are those of
 *  C's enums (an `int`) either way. */
#if defined(__cplusplus) && !defined(SWIG)
#define PTDP_ENUM_INT : int
#else
#define PTDP_ENUM_INT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** Result of every fallible call. */
typedef enum ptdp_status PTDP_ENUM_INT {
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
typedef enum ptdp_dtype PTDP_ENUM_INT {
  PTDP_DTYPE_F32 = 0,  /**< IEEE binary32. */
  PTDP_DTYPE_BF16 = 1, /**< bfloat16 (8-bit exponent, 7-bit mantissa). */
  PTDP_DTYPE_F16 = 2,  /**< IEEE binary16. */
  PTDP_DTYPE_I32 = 3,  /**< 32-bit signed integer (token ids). */
  PTDP_DTYPE_I64 = 4   /**< 64-bit signed integer. */
} ptdp_dtype;

/** Kind of device a tensor lives on. */
typedef enum ptdp_device PTDP_ENUM_INT {
  PTDP_DEVICE_CPU = 0, /**< Host memory, CPU engine (OpenBLAS + OpenMP). */
  PTDP_DEVICE_CUDA = 1 /**< NVIDIA GPU memory, CUDA engine. */
} ptdp_device;

/** Optional parts of the library, compiled in or not. */
typedef enum ptdp_feature PTDP_ENUM_INT {
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

/* ---------------------------------------------------------------------------------------- */
/** @name Runtime
 *  This process's place in the job: created from a communicator the caller has, or from
 *  MPI_COMM_WORLD. The runtime duplicates the communicator (ptdp's traffic never mixes with
 *  the caller's), sets MPI_ERRORS_RETURN on its duplicate, finds the ranks sharing the node and
 *  picks GPU = local rank where GPUs exist. To hand over an `MPI_Comm`, include
 *  `ptdp/ptdp_mpi.h` and call ptdp_runtime_create_from_mpi().
 *  @{ */

/** Opaque handle to a runtime. */
typedef struct ptdp_runtime_impl* ptdp_runtime;

/** Options for the runtime constructors. Initialise with ptdp_runtime_options_init(). */
typedef struct ptdp_runtime_options {
  size_t struct_size;          /**< sizeof(ptdp_runtime_options), set by ptdp_runtime_options_init(). */
  double comm_timeout_s;       /**< Deadline of every blocking wait in seconds; <= 0 (default) means
                                    the environment variable PTDP_COMM_TIMEOUT_S, else 300. */
  int32_t verify_collectives;  /**< 1 (default): before each collective, check with one small extra
                                    all-reduce that every rank of the group calls the same
                                    operation with the same size, dtype and root, so a mismatch
                                    is reported on every rank instead of being undefined. The
                                    check completes before the operation starts: a non-blocking
                                    collective then returns once every rank of the group has
                                    started it, so ranks must start collectives on different
                                    groups in the same order. 0: skip the check (full overlap). */
  int32_t use_mpi;             /**< 1 (default): use MPI when the library has it. 0: a world of
                                    one process without MPI. */
  int32_t use_nccl;            /**< 1 (default): GPU tensors communicate through NCCL when the
                                    library has it and each rank has a GPU of its own (a world
                                    of one without MPI included). Groups of several ranks create
                                    theirs with the groups; a group of one on first use. Creation
                                    has the comm_timeout_s deadline too. 0: never create NCCL
                                    communicators. */
  /* Added after 0.2.0. cpu_threads starts at byte 32, after the 4 bytes of tail padding that
   * ended 0.2's 32-byte struct: a program built against 0.2 leaves those uninitialised, so they
   * are a field the library never reads. */
  int32_t reserved0;           /**< Not read (0.2's tail padding); leave it as
                                    ptdp_runtime_options_init() sets it, 0. */
  int32_t cpu_threads;         /**< OpenMP threads of this process's CPU engine (OpenBLAS and
                                    ptdp's own kernels share one OpenMP team). 0 (default): the
                                    value of OMP_NUM_THREADS when it is set; otherwise the CPUs
                                    this process may run on (its affinity mask) divided by the
                                    ranks of the runtime on this node that may run on them too
                                    (all of them, unless the launcher binds ranks to their own
                                    cores), at least 1, so that ranks x threads = cores. > 0:
                                    exactly that many. < 0 is refused. Applied when the runtime
                                    is created, for the whole process (the last runtime created
                                    sets it); ptdp_runtime_cpu_threads() reads it back. */
} ptdp_runtime_options;

/**
 * @brief Fills @p options with the defaults and sets its struct_size.
 * @param[out] options Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p options is NULL.
 */
PTDP_API ptdp_status ptdp_runtime_options_init(ptdp_runtime_options* options);

/**
 * @brief Creates a runtime over MPI_COMM_WORLD.
 *
 * Initialises MPI when nobody has (ptdp then finalises it at process exit, and never
 * finalises an MPI it did not initialise). Works as a single process without mpirun. Without
 * MPI in the build, or with `use_mpi = 0`, the runtime is a world of one.
 * @param options NULL for the defaults.
 * @param[out] out Receives the handle; must not be NULL. Unchanged on error.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL @p out or bad options (struct_size, timeout, a
 *         negative cpu_threads).
 * @retval PTDP_ERR_COMMUNICATION MPI failed to initialise or to duplicate the communicator.
 * @retval PTDP_ERR_INVALID_STATE MPI was already finalised in this process.
 * @par Thread safety
 * Collective over the world: every rank calls it. Not thread-safe with other runtime calls.
 */
PTDP_API ptdp_status ptdp_runtime_create(const ptdp_runtime_options* options, ptdp_runtime* out);

/**
 * @brief Creates a runtime from a Fortran MPI communicator handle (`MPI_Fint`, the integer
 *        a Fortran program holds); MPI must be initialised.
 * @param options NULL for the defaults.
 * @param fortran_comm The communicator, e.g. the value of `MPI_COMM_WORLD` in Fortran.
 * @param[out] out Receives the handle; must not be NULL. Unchanged on error.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL @p out, bad options, or a null communicator.
 * @retval PTDP_ERR_INVALID_STATE MPI is not initialised.
 * @retval PTDP_ERR_UNSUPPORTED the library was built without MPI.
 * @par Thread safety
 * Collective over the communicator.
 */
PTDP_API ptdp_status ptdp_runtime_create_from_fortran(const ptdp_runtime_options* options,
                                                      int32_t fortran_comm, ptdp_runtime* out);

/**
 * @brief Releases a runtime. NULL is accepted and ignored.
 * @param runtime A runtime handle, or NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT not a live runtime handle.
 * @retval PTDP_ERR_INVALID_STATE process groups created on it still exist (destroy them
 *         first); the runtime is left intact.
 */
PTDP_API ptdp_status ptdp_runtime_destroy(ptdp_runtime runtime);

/**
 * @brief This process's rank and the number of ranks in the runtime's world.
 * @param runtime A live runtime handle.
 * @param[out] rank Receives the rank; may be NULL.
 * @param[out] size Receives the size; may be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT not a live runtime handle.
 */
PTDP_API ptdp_status ptdp_runtime_world(ptdp_runtime runtime, int32_t* rank, int32_t* size);

/**
 * @brief This process's rank among the ranks sharing its node, and their number.
 * @param runtime A live runtime handle.
 * @param[out] local_rank Receives the local rank; may be NULL.
 * @param[out] local_size Receives the local size; may be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT not a live runtime handle.
 */
PTDP_API ptdp_status ptdp_runtime_local(ptdp_runtime runtime, int32_t* local_rank,
                                        int32_t* local_size);

/**
 * @brief The OpenMP threads of this process's CPU engine, as the runtime chose them when it was
 *        created from ptdp_runtime_options::cpu_threads.
 *
 * OpenBLAS (its OpenMP build) and ptdp's own CPU kernels run parallel regions of this many
 * threads, on every thread that calls into ptdp (OpenMP's thread count is a per-thread
 * setting; ptdp gives it to each thread on the thread's first CPU operation after the runtime
 * was created, and a program's own omp_set_num_threads() on that thread afterwards wins).
 * @param runtime A live runtime handle.
 * @param[out] threads Receives the count, >= 1; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT not a live runtime handle, or NULL @p threads.
 */
PTDP_API ptdp_status ptdp_runtime_cpu_threads(ptdp_runtime runtime, int32_t* threads);

/**
 * @brief The GPU this rank uses: local rank modulo the number of GPUs, or -1 without GPUs.
 * @param runtime A live runtime handle.
 * @param[out] gpu Receives the device ordinal or -1; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT not a live runtime handle, or NULL @p gpu.
 */
PTDP_API ptdp_status ptdp_runtime_gpu(ptdp_runtime runtime, int32_t* gpu);

/**
 * @brief Stops every communicator of the runtime without the other ranks, as NCCL's
 *        ncclCommAbort does: after a timeout, or whenever this rank must leave the job.
 *
 * Operations in flight on the runtime's world, on its process groups and on their NCCL
 * communicators are abandoned; a wait in progress on another thread, and every later
 * communication call on them, returns ::PTDP_ERR_INVALID_STATE naming the operation and saying
 * the runtime was aborted; ptdp_groups_create() on it fails the same way. Destroying the groups
 * (and trainers) and then the runtime afterwards returns promptly, since nothing is freed that
 * needs the peers: an aborted MPI communicator is not freed (MPI_Comm_free is collective; the
 * handle is leaked knowingly, and MPI that ptdp initialised is then not finalised at exit when
 * operations stay pending), an NCCL communicator gets ncclCommAbort instead of a finalize.
 * Queries (ptdp_runtime_world() and the like) keep working. Aborting twice is harmless.
 * @param runtime A live runtime handle.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or not a live runtime handle.
 * @par Thread safety
 * Local (not collective). May be called from another thread while a thread waits in an MPI
 * communication call of this runtime; with NCCL communicators, call it from the thread that
 * uses the runtime.
 */
PTDP_API ptdp_status ptdp_runtime_abort(ptdp_runtime runtime);

/**
 * @brief Writes this rank's flight record: its last communication operations, as JSON.
 *
 * Every process keeps a ring of its last operations on every communicator (collectives and
 * point-to-point batches; default 4096 entries, `PTDP_FLIGHT_RECORDER_ENTRIES` sets the number,
 * 0 turns recording off): group name and world ranks, operation, reduction, dtype, element
 * count, bytes, peers, the sequence number shown in timeout messages, the group's collective
 * count, start and end wall-clock times, and the state (started, completed, timed_out, failed,
 * aborted). When `PTDP_FLIGHT_RECORDER_DIR` is set, every rank whose wait times out writes it
 * there by itself. Read the files of all ranks with ptdp_flight_analyze() or the
 * `ptdp-flight-analyze` tool.
 * @param runtime A live runtime handle (its world rank names the file).
 * @param dir An existing directory; the file is `dir/flight-rankNNNNN.json` (rank on five
 *        digits), replaced atomically. NULL means the directory `PTDP_FLIGHT_RECORDER_DIR` names.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT not a live runtime handle, or NULL @p dir while
 *         `PTDP_FLIGHT_RECORDER_DIR` is unset or empty.
 * @retval PTDP_ERR_IO the file could not be written (the message names it).
 * @par Thread safety
 * Local; safe while other threads communicate.
 */
PTDP_API ptdp_status ptdp_flight_recorder_dump(ptdp_runtime runtime, const char* dir);

/**
 * @brief Reads every rank's flight record in a directory and names where the ranks diverge.
 *
 * Each operation still in flight on a rank waits for the ranks that never started it (for a
 * collective: members of its group whose count of collectives there is lower, or that wrote no
 * record; for a point-to-point batch: its peers). Following these waits from rank to rank ends
 * at the cause, so a cascade (one rank hangs before a tensor-group all-reduce, a pipeline peer
 * times out first) still names the hanging rank. The report also names ranks that wrote no
 * record, ranks that disagree on a collective (operation, dtype, count, reduction or root), and
 * the first timeout. Example line: "rank 3 never reached all_reduce #5 on tensor group [2, 3]
 * (collective 3 of that group); ...; rank 2 timed out in all_reduce(sum) 8 x f32 #5 on tensor
 * group [2, 3] since 12:00:01.250 UTC".
 * @param dir A directory holding `flight-rank*.json` files.
 * @param[out] buffer Receives the NUL-terminated report; may be NULL when @p capacity is 0.
 * @param capacity Bytes @p buffer can hold.
 * @param[out] length Receives strlen of the full report (also when @p capacity is too small);
 *             must not be NULL.
 * @param[out] culprit_rank Receives the rank to look at first, or -1 when the records agree;
 *             may be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL @p dir or @p length, or @p capacity too small (nothing
 *         written to @p buffer; @p length tells the size needed).
 * @retval PTDP_ERR_IO @p dir is not a directory, holds no record, or a record is not valid.
 * @par Thread safety
 * Reentrant; needs no runtime.
 */
PTDP_API ptdp_status ptdp_flight_analyze(const char* dir, char* buffer, size_t capacity, size_t* length,
                                         int32_t* culprit_rank);

/** @} */

/* ---------------------------------------------------------------------------------------- */
/** @name Process groups
 *  The PTD-P layout: W = t * p * d ranks, tensor rank fastest, then data, then pipeline
 *  (Megatron's order): `rank = pp_rank * (d * t) + dp_rank * t + tp_rank`. With context
 *  parallelism (c = context_parallel_size > 1) W = t * c * d * p and the context rank comes
 *  between the tensor and the data rank (Megatron's tp-cp-dp-pp):
 *  `rank = ((pp_rank * d + dp_rank) * c + cp_rank) * t + tp_rank`.
 *  @{ */

/** Kinds of process group. */
typedef enum ptdp_group_kind PTDP_ENUM_INT {
  PTDP_GROUP_WORLD = 0,     /**< Every rank of the runtime. */
  PTDP_GROUP_TENSOR = 1,    /**< t consecutive ranks sharing the layers' tensor shards. */
  PTDP_GROUP_PIPELINE = 2,  /**< p ranks, stride t*d: the stages of one pipeline. */
  PTDP_GROUP_DATA = 3,      /**< d ranks, stride t: the replicas of one model shard. */
  PTDP_GROUP_MODEL = 4,     /**< t*p ranks sharing a data-parallel index: one model replica. */
  PTDP_GROUP_EMBEDDING = 5, /**< The first and last stage of a pipeline (tied word embedding);
                                 ranks of middle stages belong to none. */
  PTDP_GROUP_CONTEXT = 6,   /**< c ranks, stride t: the context-parallel ranks that split the
                                 sequence of the same samples (ptdp_parallel_options'
                                 context_parallel_size; a group of one when c = 1). */
  PTDP_GROUP_DATA_CONTEXT = 7, /**< d * c ranks holding the same weights (Megatron's
                                   data-parallel group with context parallelism): the group
                                   the optimizer reduces the gradients over (::PTDP_GROUP_DATA
                                   when c = 1). */
  /* Mixture of experts, Megatron-Core's parallel folding: the t * c * d ranks of a pipeline
   * stage (local index r = (dp_rank * c + cp_rank) * t + tp_rank) regrouped for the expert
   * layers as etp x e x edp, the expert-tensor rank fastest: etp_rank = r % etp, ep_rank =
   * (r / etp) % e, edp_rank = r / (etp * e) (ptdp_parallel_options' expert sizes). */
  PTDP_GROUP_EXPERT_TENSOR = 8,            /**< etp ranks splitting each expert's linears. */
  PTDP_GROUP_EXPERT_MODEL = 9,             /**< e ranks splitting the experts of every MoE layer
                                                (expert parallelism: the token all-to-all). */
  PTDP_GROUP_EXPERT_DATA = 10,             /**< edp = t * c * d / (e * etp) ranks holding the same
                                                experts: the group expert gradients are reduced
                                                over. */
  PTDP_GROUP_EXPERT_TENSOR_AND_MODEL = 11, /**< etp * e ranks (Megatron's tp_ep group): the
                                                allgather dispatcher's. */
  PTDP_GROUP_TENSOR_CONTEXT = 12           /**< t * c ranks holding pieces of the same samples
                                                (the router's losses and capacity drops are
                                                taken over them). */
} ptdp_group_kind;

/** Parallel sizes, with Megatron-LM's names. Initialise with ptdp_parallel_options_init(). */
typedef struct ptdp_parallel_options {
  size_t struct_size;                           /**< Set by ptdp_parallel_options_init(). */
  int32_t tensor_model_parallel_size;           /**< t; default 1. */
  int32_t pipeline_model_parallel_size;         /**< p; default 1. */
  int32_t virtual_pipeline_model_parallel_size; /**< v, model chunks per pipeline rank; default 1;
                                                     v > 1 needs p > 1. */
  /* Added after 0.2.0: Megatron-LM's uneven pipeline stages. Zero (the default, and what a
   * program built against an older header passes) is the even split of num_layers / (p * v)
   * layers per model chunk. They are 8-byte integers so that they start at 0.2's 24 bytes,
   * after its tail padding, which such a program leaves uninitialised. The stages without a
   * count of their own share the remaining layers evenly; each stage splits its layers evenly
   * over its v chunks, and chunk c = j * p + rank starts after the layers of chunks 0 .. c-1
   * (Megatron-Core's order). A model whose layers cannot be split so is refused by
   * ptdp_model_create() in Megatron's words (the middle stages' layers must divide evenly,
   * v must divide every stage's layers, ...). */
  int64_t decoder_first_pipeline_num_layers;    /**< Layers of the first pipeline stage
                                                     (`--decoder-first-pipeline-num-layers`);
                                                     0 (default): no count of its own; >= 0. */
  int64_t decoder_last_pipeline_num_layers;     /**< Layers of the last pipeline stage
                                                     (`--decoder-last-pipeline-num-layers`);
                                                     0 (default): no count of its own; >= 0. */
  /* Added after the uneven stages. */
  int64_t pipeline_chunk_placement;             /**< Where the p * v model chunks live, a
                                                     ::ptdp_chunk_placement: 0 (default),
                                                     round-robin; 1, V (v = 2, an even split),
                                                     what ::PTDP_SCHEDULE_ZB_V and
                                                     ::PTDP_SCHEDULE_DUALPIPE_V run. */
  int32_t sequence_parallel;                    /**< 1: sequence parallelism (`--sequence-parallel`,
                                                     Korthikanti et al. 2022): with t > 1 the norms,
                                                     dropouts and residuals of each tensor rank work
                                                     on s/t of the sequence, the tensor-parallel
                                                     blocks all-gather it and reduce-scatter their
                                                     outputs, so activation memory shrinks with t;
                                                     the results equal those without it. Needs
                                                     seq_length divisible by t. Default 0; 0 or 1. */
  /* Added after sequence parallelism: an 8-byte integer at offset 56, after the tail padding of
   * the 56-byte struct before it, which a program built against that header leaves
   * uninitialised (its struct_size of 56 reads as the default, 1). */
  int64_t context_parallel_size;                /**< c, context parallelism
                                                     (`--context-parallel-size`): each sample's
                                                     sequence is cut into 2c chunks and context
                                                     rank r holds chunks r and 2c - 1 - r
                                                     (Megatron's causal load balance); the world
                                                     is t * c * d * p ranks in Megatron's order
                                                     (tensor fastest, then context, data,
                                                     pipeline). The layers outside attention work
                                                     on s/c positions; attention is ring
                                                     attention: the keys and values pass
                                                     around the ring of context ranks and the
                                                     backend's fused kernel runs per (query
                                                     chunk, key chunk) pair, the partial
                                                     results merged by their log-sum-exps
                                                     (either attention setting, packed
                                                     documents and dropout included; see
                                                     docs/guides/choosing-layout.md).
                                                     The gradients are reduced over the d * c
                                                     ranks of ::PTDP_GROUP_DATA_CONTEXT. Needs
                                                     seq_length divisible by 2c (and by 2c t
                                                     with sequence parallelism); no key/value
                                                     cache decoding or logits with c > 1.
                                                     Default 1; >= 1. */
  const char* pipeline_model_parallel_layout;   /**< Megatron's `--pipeline-model-parallel-layout`:
                                                     the layers of every model chunk, one '|'-separated
                                                     entry per chunk in chunk order (c = vp_stage * p +
                                                     pp_rank) of E (embedding), t (decoder layer) and L
                                                     (loss, with the final norm and output layer);
                                                     "x*n" repeats a character, "(...)*n" a group,
                                                     commas are cosmetic. E opens it and L closes it,
                                                     once each; a chunk may hold no decoder layer. Its
                                                     entries / p give v (virtual_pipeline_model_parallel_size
                                                     1 takes it, another value must agree); not with
                                                     the decoder_first/last counts or the V placement.
                                                     NULL or "" (default): none. Read when the
                                                     groups are created; not kept. */
  /* Added after 0.3.0: Megatron-Core's expert parallelism (MoE parallel folding; the group
   * kinds from ::PTDP_GROUP_EXPERT_TENSOR on). Zero, what a program built against an older
   * header passes, means the default. */
  int32_t expert_model_parallel_size;           /**< e (`--expert-model-parallel-size`): every
                                                     MoE layer's experts are split over e ranks of
                                                     a pipeline stage, and e must divide the
                                                     model's num_experts; e * etp must divide the
                                                     stage's t * c * d ranks. 0 (default) means 1;
                                                     >= 0. */
  int32_t expert_tensor_parallel_size;          /**< etp (`--expert-tensor-parallel-size`): each
                                                     expert's linears are split over etp ranks;
                                                     0 (default) means t. Expert biases (without
                                                     disable_bias_linear) need etp = 1. >= 0. */
} ptdp_parallel_options;

/** Placements of the model chunks on the pipeline ranks (ptdp_parallel_options). */
typedef enum ptdp_chunk_placement PTDP_ENUM_INT {
  PTDP_CHUNK_PLACEMENT_ROUND_ROBIN = 0, /**< Chunk c on pipeline rank c % p (Megatron's interleaving). */
  PTDP_CHUNK_PLACEMENT_V = 1            /**< v = 2: rank r holds chunks r and 2p - 1 - r; the first and
                                             last chunk (embedding and loss) share rank 0, and chunk
                                             p - 1 hands its output to chunk p on rank p - 1 without
                                             a transfer. */
} ptdp_chunk_placement;

/** Opaque handle to the process groups of one layout. */
typedef struct ptdp_groups_impl* ptdp_groups;

/**
 * @brief Fills @p options with the defaults (t = p = v = 1, an even split) and sets its
 *        struct_size.
 * @param[out] options Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p options is NULL.
 */
PTDP_API ptdp_status ptdp_parallel_options_init(ptdp_parallel_options* options);

/**
 * @brief The world ranks of @p world_rank's group of @p kind in a layout of @p world_size
 *        ranks, computed without any communication (any size, no processes needed).
 * @param options Parallel sizes; NULL means t = p = v = 1.
 * @param world_size W, the number of ranks; must be divisible by t * p.
 * @param world_rank A rank in [0, W).
 * @param kind Which group.
 * @param[out] world_ranks Receives the members in group-rank order; may be NULL when
 *             @p capacity is 0.
 * @param capacity Number of elements @p world_ranks can hold.
 * @param[out] count Receives the number of members (0 for an embedding group of a middle stage);
 *             must not be NULL. Set even when @p capacity is too small.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT an invalid layout (message names the numbers), rank out
 *         of range, unknown kind, NULL @p count, or @p capacity smaller than the group.
 */
PTDP_API ptdp_status ptdp_layout_members(const ptdp_parallel_options* options, int32_t world_size,
                                         int32_t world_rank, ptdp_group_kind kind,
                                         int32_t* world_ranks, int32_t capacity, int32_t* count);

/**
 * @brief Which decoder layers a model chunk holds in a layout: chunk @p virtual_stage of
 *        pipeline rank @p pipeline_rank (global chunk c = virtual_stage * p + pipeline_rank)
 *        of a model of @p num_layers layers, as ptdp_model_create() lays the model out; computed
 *        without any communication. With an even split every chunk holds l / (p * v) layers;
 *        with ptdp_parallel_options' decoder_first_pipeline_num_layers and
 *        decoder_last_pipeline_num_layers the counts and offsets are Megatron-Core's (chunk c
 *        starts after the layers of chunks 0 .. c-1). The first chunk also holds the
 *        embedding, the last the final norm, the output layer and the loss.
 * @param options Parallel sizes and stage layers; NULL means t = p = v = 1.
 * @param num_layers The model's decoder layers l; > 0.
 * @param pipeline_rank A pipeline rank in [0, p).
 * @param virtual_stage A chunk of that rank in [0, v).
 * @param[out] first_layer Receives the global index of the chunk's first layer; may be NULL.
 * @param[out] layer_count Receives the chunk's number of layers; may be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT invalid sizes or stage layers, @p num_layers not > 0, a
 *         rank or stage out of range, or layers that do not split so (the message names the
 *         numbers, in Megatron's words for an uneven split). Nothing is written.
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_layout_chunk_layers(const ptdp_parallel_options* options, int32_t num_layers,
                                              int32_t pipeline_rank, int32_t virtual_stage,
                                              int32_t* first_layer, int32_t* layer_count);

/**
 * @brief Creates the tensor, pipeline, data, model and embedding groups of a layout.
 * @param runtime A live runtime; it must outlive the groups.
 * @param options Parallel sizes; NULL means t = p = v = 1 (pure data parallelism).
 * @param[out] out Receives the handle; must not be NULL. Unchanged on error.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT invalid layout (W not divisible by t*p, non-positive sizes,
 *         v > 1 with p == 1) or ranks passing different sizes; the message names the numbers.
 * @retval PTDP_ERR_TIMEOUT a rank did not join within the runtime's timeout.
 * @par Thread safety
 * Collective over the runtime's world.
 */
PTDP_API ptdp_status ptdp_groups_create(ptdp_runtime runtime, const ptdp_parallel_options* options,
                                        ptdp_groups* out);

/**
 * @brief Releases the groups. NULL is accepted and ignored.
 * @param groups A groups handle, or NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT not a live groups handle.
 * @retval PTDP_ERR_INVALID_STATE non-blocking operations on them are still alive (destroy their
 *         ptdp_work first); the groups are left intact.
 * @par Thread safety
 * Collective over the runtime's world.
 */
PTDP_API ptdp_status ptdp_groups_destroy(ptdp_groups groups);

/**
 * @brief This rank's rank in its group of @p kind, or -1 when it belongs to none.
 * @param groups A live groups handle.
 * @param kind Which group.
 * @param[out] rank Receives the rank; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, unknown kind or NULL output.
 */
PTDP_API ptdp_status ptdp_groups_rank(ptdp_groups groups, ptdp_group_kind kind, int32_t* rank);

/**
 * @brief The size of this rank's group of @p kind, or 0 when it belongs to none.
 * @param groups A live groups handle.
 * @param kind Which group.
 * @param[out] size Receives the size; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, unknown kind or NULL output.
 */
PTDP_API ptdp_status ptdp_groups_size(ptdp_groups groups, ptdp_group_kind kind, int32_t* size);

/**
 * @brief The world ranks of this rank's group of @p kind, in group-rank order.
 * @param groups A live groups handle.
 * @param kind Which group.
 * @param[out] world_ranks Receives the members; may be NULL when @p capacity is 0.
 * @param capacity Number of elements @p world_ranks can hold.
 * @param[out] count Receives the number of members; must not be NULL. Set even when
 *             @p capacity is too small.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, unknown kind, NULL @p count, or @p capacity
 *         smaller than the group.
 */
PTDP_API ptdp_status ptdp_groups_members(ptdp_groups groups, ptdp_group_kind kind,
                                         int32_t* world_ranks, int32_t capacity, int32_t* count);

/** @} */

/* ---------------------------------------------------------------------------------------- */
/** @name Collectives and point-to-point transfers
 *  On tensors, over this rank's group of a kind. Each call takes a `ptdp_work* work`: pass NULL
 *  to block until the operation completes, or a pointer to receive a handle to wait on later
 *  (the operation then overlaps with the caller's computation; the tensors must not be touched
 *  until it completes). Every wait has the runtime's deadline: a rank that never arrives makes
 *  the others return ::PTDP_ERR_TIMEOUT naming the operation, the group, its size, the sequence
 *  number and the rank; the group's communicator is unusable afterwards.
 *  @{ */

/** Reductions. */
typedef enum ptdp_reduce_op PTDP_ENUM_INT {
  PTDP_REDUCE_SUM = 0, /**< Sum. */
  PTDP_REDUCE_AVG = 1, /**< Sum divided by the group size (floating dtypes). */
  PTDP_REDUCE_MAX = 2, /**< Maximum. */
  PTDP_REDUCE_MIN = 3  /**< Minimum. */
} ptdp_reduce_op;

/** Direction of one transfer in ptdp_batch_send_recv(). */
typedef enum ptdp_p2p_kind PTDP_ENUM_INT {
  PTDP_P2P_SEND = 0, /**< Send the tensor to the peer. */
  PTDP_P2P_RECV = 1  /**< Receive into the tensor from the peer. */
} ptdp_p2p_kind;

/** One transfer of a batch. */
typedef struct ptdp_p2p_op {
  ptdp_p2p_kind kind; /**< Send or receive. */
  ptdp_tensor tensor; /**< Data to send, or buffer to receive into (same size as the sender's). */
  int32_t peer;       /**< The other side's rank in the group. */
  int32_t tag;        /**< 0 to 32767; transfers with the same peer and tag arrive in order. */
} ptdp_p2p_op;

/** Opaque handle to a non-blocking operation. */
typedef struct ptdp_work_impl* ptdp_work;

/**
 * @brief All-reduce in place.
 * @param groups A live groups handle.
 * @param kind The group to reduce over; this rank must belong to it.
 * @param tensor Reduced in place; the same element count and dtype on every rank.
 * @param op The reduction.
 * @param[out] work NULL to block, or receives a handle to wait on.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT bad handle, kind or op; AVG on an integer tensor; ranks
 *         disagreeing on size, dtype or operation (with verification on, reported on all ranks).
 * @retval PTDP_ERR_INVALID_STATE this rank is not in such a group, or the group's communicator
 *         failed earlier.
 * @retval PTDP_ERR_TIMEOUT the other ranks did not arrive in time.
 * @retval PTDP_ERR_COMMUNICATION MPI or NCCL reported an error.
 */
PTDP_API ptdp_status ptdp_all_reduce(ptdp_groups groups, ptdp_group_kind kind, ptdp_tensor tensor,
                                     ptdp_reduce_op op, ptdp_work* work);

/**
 * @brief Reduce-scatter: @p in holds one chunk per group rank; @p out receives this rank's
 *        chunk of the reduction.
 * @param groups A live groups handle.
 * @param kind The group.
 * @param in Group size times the elements of @p out, same dtype.
 * @param out This rank's reduced chunk.
 * @param op The reduction.
 * @param[out] work NULL to block, or receives a handle to wait on.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT as ptdp_all_reduce(), or sizes that do not divide.
 * @retval PTDP_ERR_INVALID_STATE as ptdp_all_reduce().
 * @retval PTDP_ERR_TIMEOUT as ptdp_all_reduce().
 * @retval PTDP_ERR_COMMUNICATION as ptdp_all_reduce().
 */
PTDP_API ptdp_status ptdp_reduce_scatter(ptdp_groups groups, ptdp_group_kind kind, ptdp_tensor in,
                                         ptdp_tensor out, ptdp_reduce_op op, ptdp_work* work);

/**
 * @brief All-gather: @p out receives every rank's @p in, in group-rank order.
 * @param groups A live groups handle.
 * @param kind The group.
 * @param in This rank's chunk.
 * @param out Group size times the elements of @p in, same dtype.
 * @param[out] work NULL to block, or receives a handle to wait on.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT bad handles or kind, sizes that do not match.
 * @retval PTDP_ERR_INVALID_STATE as ptdp_all_reduce().
 * @retval PTDP_ERR_TIMEOUT as ptdp_all_reduce().
 * @retval PTDP_ERR_COMMUNICATION as ptdp_all_reduce().
 */
PTDP_API ptdp_status ptdp_all_gather(ptdp_groups groups, ptdp_group_kind kind, ptdp_tensor in,
                                     ptdp_tensor out, ptdp_work* work);

/**
 * @brief Broadcast from the group rank @p root.
 * @param groups A live groups handle.
 * @param kind The group.
 * @param tensor Sent by the root, overwritten on the others.
 * @param root A rank of the group.
 * @param[out] work NULL to block, or receives a handle to wait on.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT bad handles, kind or root.
 * @retval PTDP_ERR_INVALID_STATE as ptdp_all_reduce().
 * @retval PTDP_ERR_TIMEOUT as ptdp_all_reduce().
 * @retval PTDP_ERR_COMMUNICATION as ptdp_all_reduce().
 */
PTDP_API ptdp_status ptdp_broadcast(ptdp_groups groups, ptdp_group_kind kind, ptdp_tensor tensor,
                                    int32_t root, ptdp_work* work);

/**
 * @brief Sends @p tensor to the group rank @p peer.
 * @param groups A live groups handle.
 * @param kind The group.
 * @param tensor The data; the receiver's buffer must have the same size.
 * @param peer A rank of the group.
 * @param tag 0 to 32767.
 * @param[out] work NULL to block, or receives a handle to wait on.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT bad handles, kind, peer or tag.
 * @retval PTDP_ERR_INVALID_STATE as ptdp_all_reduce().
 * @retval PTDP_ERR_TIMEOUT the peer did not receive in time.
 * @retval PTDP_ERR_COMMUNICATION as ptdp_all_reduce().
 */
PTDP_API ptdp_status ptdp_send(ptdp_groups groups, ptdp_group_kind kind, ptdp_tensor tensor,
                               int32_t peer, int32_t tag, ptdp_work* work);

/**
 * @brief Receives into @p tensor from the group rank @p peer.
 * @param groups A live groups handle.
 * @param kind The group.
 * @param tensor The buffer; a message of another size is reported as
 *        ::PTDP_ERR_INVALID_ARGUMENT (shorter) or ::PTDP_ERR_COMMUNICATION (longer).
 * @param peer A rank of the group.
 * @param tag 0 to 32767.
 * @param[out] work NULL to block, or receives a handle to wait on.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT bad handles, kind, peer or tag, or a short message.
 * @retval PTDP_ERR_INVALID_STATE as ptdp_all_reduce().
 * @retval PTDP_ERR_TIMEOUT nothing arrived in time.
 * @retval PTDP_ERR_COMMUNICATION a longer message, or an MPI/NCCL error.
 */
PTDP_API ptdp_status ptdp_recv(ptdp_groups groups, ptdp_group_kind kind, ptdp_tensor tensor,
                               int32_t peer, int32_t tag, ptdp_work* work);

/**
 * @brief Issues several sends and receives together, so that neighbours exchanging in both
 *        directions at once never deadlock, whatever order each lists its transfers in.
 * @param groups A live groups handle.
 * @param kind The group the peers are ranks of.
 * @param ops @p count transfers.
 * @param count Number of transfers, >= 0.
 * @param[out] work NULL to block, or receives a handle to wait on.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT as ptdp_send() and ptdp_recv(), naming the bad entry.
 * @retval PTDP_ERR_INVALID_STATE as ptdp_all_reduce().
 * @retval PTDP_ERR_TIMEOUT a peer did not take part in time.
 * @retval PTDP_ERR_COMMUNICATION as ptdp_recv().
 */
PTDP_API ptdp_status ptdp_batch_send_recv(ptdp_groups groups, ptdp_group_kind kind,
                                          const ptdp_p2p_op* ops, int32_t count, ptdp_work* work);

/**
 * @brief Returns once every rank of the group has entered the barrier.
 * @param groups A live groups handle.
 * @param kind The group.
 * @param[out] work NULL to block, or receives a handle to wait on.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT bad handle or kind.
 * @retval PTDP_ERR_INVALID_STATE as ptdp_all_reduce().
 * @retval PTDP_ERR_TIMEOUT a rank did not arrive in time.
 */
PTDP_API ptdp_status ptdp_barrier(ptdp_groups groups, ptdp_group_kind kind, ptdp_work* work);

/**
 * @brief Blocks until a non-blocking operation completes or the runtime's deadline passes.
 *        Waiting again on a completed operation returns its result again.
 * @param work A live work handle.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT not a live work handle; a received message of the wrong size.
 * @retval PTDP_ERR_TIMEOUT the other ranks did not take part in time.
 * @retval PTDP_ERR_COMMUNICATION MPI or NCCL reported an error.
 */
PTDP_API ptdp_status ptdp_work_wait(ptdp_work work);

/**
 * @brief Checks without blocking whether a non-blocking operation has completed.
 * @param work A live work handle.
 * @param[out] done Receives 1 when complete, else 0; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle or NULL @p done.
 * @retval PTDP_ERR_COMMUNICATION the operation failed.
 */
PTDP_API ptdp_status ptdp_work_test(ptdp_work work, int32_t* done);

/**
 * @brief Releases a work handle, first waiting (under the runtime's deadline) for an operation
 *        still in flight, so its result is complete when this returns. The handle is released
 *        whatever the operation's outcome, which is returned. NULL is accepted and ignored.
 * @param work A work handle, or NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT not a live work handle (nothing released), or the
 *         operation failed as in ptdp_work_wait().
 * @retval PTDP_ERR_TIMEOUT the operation did not complete in time.
 * @retval PTDP_ERR_COMMUNICATION the operation failed.
 */
PTDP_API ptdp_status ptdp_work_destroy(ptdp_work work);

/** @} */

/* ---------------------------------------------------------------------------------------- */
/** @name GPT model
 *  A GPT-2 (pre-LN, learned positions, GeLU, tied LM head) split over the tensor group of a
 *  ptdp_groups, or with the Llama family's options (RMSNorm, SwiGLU, rotary positions,
 *  grouped-query attention, no biases, an untied head; ::ptdp_gpt_options), and named presets
 *  of both families (ptdp_gpt_options_from_preset()). Parameters are named and shaped as in
 *  Megatron-Core's GPT
 *  (`embedding.word_embeddings.weight` [V_padded, h], `decoder.layers.{i}.self_attention.
 *  linear_qkv.weight` [3h, h], ...), start from a pure function of (seed, name, element index)
 *  and draw dropout masks keyed by (seed, iteration, microbatch, layer, element index), so every
 *  tensor-parallel size computes the serial run's loss and gradients.
 *  @{ */

/** Activation recomputation (Megatron's `--recompute-granularity`). */
typedef enum ptdp_recompute PTDP_ENUM_INT {
  PTDP_RECOMPUTE_NONE = 0,     /**< Keep every activation. */
  PTDP_RECOMPUTE_FULL = 1,     /**< Keep each layer's input; re-run its forward before its backward. */
  PTDP_RECOMPUTE_SELECTIVE = 2 /**< Recompute only the attention probabilities. */
} ptdp_recompute;

/** How self-attention computes its context (ptdp_gpt_options::attention). */
typedef enum ptdp_attention PTDP_ENUM_INT {
  PTDP_ATTENTION_AUTO = 0,    /**< The fused (flash) kernel where the device has one for the
                                   precision and head dim (the CPU: every precision; CUDA:
                                   bf16/f16, head dim 64 or 128), else the unfused path. */
  PTDP_ATTENTION_FUSED = 1,   /**< Always the fused kernel, which never stores the s x s
                                   scores; an error where the device has none (the CPU has one
                                   for every precision: the reference the GPU is tested against). */
  PTDP_ATTENTION_UNFUSED = 2  /**< Scores GEMM, scale + causal mask + softmax, dropout, context
                                   GEMM; the probabilities are kept for the backward. */
} ptdp_attention;

/** The norm of every norm layer of the model (Megatron's `--normalization`;
 *  ptdp_gpt_options::normalization). */
typedef enum ptdp_normalization PTDP_ENUM_INT {
  PTDP_NORMALIZATION_LAYERNORM = 0, /**< LayerNorm: (x - mean) / sqrt(var + eps) * weight + bias. */
  PTDP_NORMALIZATION_RMSNORM = 1    /**< RMSNorm: x / sqrt(mean(x^2) + eps) * weight; no bias. */
} ptdp_normalization;

/** How positions enter the model (Megatron's `--position-embedding-type`;
 *  ptdp_gpt_options::position_embedding_type). */
typedef enum ptdp_position_embedding PTDP_ENUM_INT {
  PTDP_POSITION_EMBEDDING_LEARNED_ABSOLUTE = 0, /**< A learned table
                                                     `embedding.position_embeddings.weight`
                                                     [max_position_embeddings, h] added to the
                                                     word embeddings (GPT-2). */
  PTDP_POSITION_EMBEDDING_ROPE = 1,             /**< Rotary embeddings applied to each query and
                                                     key head (Llama); no position table. */
  PTDP_POSITION_EMBEDDING_NONE = 2              /**< No position information at all. */
} ptdp_position_embedding;

/** How RoPE's frequencies are made (Megatron's `--rope-type`; ptdp_gpt_options::rope_type). */
typedef enum ptdp_rope_type PTDP_ENUM_INT {
  PTDP_ROPE_TYPE_ROPE = 0, /**< base^(-2i / d), with Llama 3.1's scaling where use_rope_scaling. */
  PTDP_ROPE_TYPE_YARN = 1  /**< YaRN's scaling, with Hugging Face's numbers (docs/deepseek.md). */
} ptdp_rope_type;

/** The router's score function (Megatron's `--moe-router-score-function`;
 *  ptdp_gpt_options::moe_router_score_function). */
typedef enum ptdp_moe_score_function PTDP_ENUM_INT {
  PTDP_MOE_SCORE_SOFTMAX = 0, /**< A softmax of the router's logits (over the k selected ones, or
                                   over all E with moe_router_pre_softmax). */
  PTDP_MOE_SCORE_SIGMOID = 1  /**< Each expert's sigmoid; the top k renormalised to sum to 1. */
} ptdp_moe_score_function;

/** The router's load balancing (Megatron's `--moe-router-load-balancing-type`;
 *  ptdp_gpt_options::moe_router_load_balancing_type). */
typedef enum ptdp_moe_load_balancing PTDP_ENUM_INT {
  PTDP_MOE_BALANCING_AUX_LOSS = 0,        /**< GShard's and Switch's auxiliary loss over each microbatch. */
  PTDP_MOE_BALANCING_SEQ_AUX_LOSS = 1,    /**< DeepSeek-V2's, per sample. */
  PTDP_MOE_BALANCING_GLOBAL_AUX_LOSS = 2, /**< Megatron's: the expert loads summed over the data-parallel replicas and
                                             averaged over the step's microbatches so far (its value depends on d). */
  PTDP_MOE_BALANCING_NONE = 3     /**< No balancing loss (`none`). */
} ptdp_moe_load_balancing;

/** Which tokens an expert keeps with a capacity factor (Megatron's `--moe-token-drop-policy`). */
typedef enum ptdp_moe_drop_policy PTDP_ENUM_INT {
  PTDP_MOE_DROP_PROBS = 0,   /**< Those with the highest routing probabilities (`probs`). */
  PTDP_MOE_DROP_POSITION = 1 /**< The first ones of the microbatch (`position`). */
} ptdp_moe_drop_policy;

/** How tokens reach their experts' ranks (Megatron's `--moe-token-dispatcher-type`); the
 *  results are the same. */
typedef enum ptdp_moe_dispatcher PTDP_ENUM_INT {
  PTDP_MOE_DISPATCHER_ALLTOALL = 0, /**< All-to-all-v exchanges over the e ranks. */
  PTDP_MOE_DISPATCHER_ALLGATHER = 1 /**< Every token gathered over the e * etp ranks. */
} ptdp_moe_dispatcher;

/** GPT shape and settings, with Megatron-LM's names. Initialise with ptdp_gpt_options_init(). */
typedef struct ptdp_gpt_options {
  size_t struct_size;                   /**< Set by ptdp_gpt_options_init(). */
  int32_t num_layers;                   /**< Transformer layers; default 2. */
  int32_t hidden_size;                  /**< h; default 64. */
  int32_t num_attention_heads;          /**< a; must divide h (unless kv_channels is set), and t
                                             must divide a; default 4. */
  int32_t ffn_hidden_size;              /**< MLP width; 0 (default) means 4h, or with swiglu
                                             Megatron's int(8h / 3 / 64) * 64. */
  int32_t vocab_size;                   /**< V, the true vocabulary; default 256. */
  int32_t make_vocab_size_divisible_by; /**< The vocabulary is padded to a multiple of this times t;
                                             padded rows never change the loss. Default 128. */
  int32_t seq_length;                   /**< s, tokens per sample; default 32. */
  int32_t max_position_embeddings;      /**< Rows of the position table (learned positions),
                                             at least s; 0 (default) means s. */
  float hidden_dropout;                 /**< Default 0.1. */
  float attention_dropout;              /**< Default 0.1. */
  float init_method_std;                /**< Normal init std; output projections use
                                             std / sqrt(2 * num_layers). Default 0.02. */
  float layernorm_epsilon;              /**< Epsilon of every norm, LayerNorm or RMSNorm
                                             (`--norm-epsilon`). Default 1e-5. */
  int32_t untie_embeddings_and_output_weights; /**< 1: a separate `output_layer.weight`. Default 0. */
  ptdp_recompute recompute_granularity; /**< Default ::PTDP_RECOMPUTE_NONE. */
  uint64_t seed;                        /**< Initialisation and dropout seed; default 1234. */
  ptdp_device device;                   /**< Where parameters and activations live:
                                             ::PTDP_DEVICE_CPU (default) or ::PTDP_DEVICE_CUDA, the
                                             runtime's GPU (ptdp_runtime_gpu()). */
  ptdp_dtype precision;                 /**< Storage type of the weights and activations the model
                                             computes with: ::PTDP_DTYPE_F32 (default),
                                             ::PTDP_DTYPE_BF16 or ::PTDP_DTYPE_F16 (Megatron's --bf16 /
                                             --fp16). Matrix products and reductions accumulate in
                                             fp32; the optimizer keeps fp32 master weights and the
                                             gradients are fp32. Parameter getters and setters and
                                             checkpoints always see the fp32 masters. With f16, use
                                             a loss scale (ptdp_optimizer_options). On both
                                             devices. */
  ptdp_attention attention;             /**< How attention is computed; default
                                             ::PTDP_ATTENTION_AUTO. */
  /* Added after 0.2.0: the Llama family's options, with Megatron-LM's names. Each one's zero means
   * the GPT's behaviour, so a struct whose bytes from here on are zero (a program built against
   * an older header, or one that leaves them as ptdp_gpt_options_init() set them) describes
   * the model it always did. rotary_base comes first because it is 8-byte aligned: it starts
   * after the 4 bytes of padding that ended 0.2's 88-byte struct, so the uninitialised padding
   * of a program built against 0.2 is never read as a field. */
  double rotary_base;                   /**< RoPE's base theta (`--rotary-base`); 0 (default)
                                             means 10000. Llama 3: 500000. */
  ptdp_normalization normalization;     /**< Every norm of the model (`--normalization`); default
                                             ::PTDP_NORMALIZATION_LAYERNORM. */
  int32_t swiglu;                       /**< 1: a SwiGLU MLP (`--swiglu`): linear_fc1 is
                                             [2 ffn, h], the gate rows then the up rows, and
                                             ffn_hidden_size 0 means Megatron's
                                             int(8h / 3 / 64) * 64. Default 0 (GeLU). */
  ptdp_position_embedding position_embedding_type; /**< `--position-embedding-type`; default
                                             ::PTDP_POSITION_EMBEDDING_LEARNED_ABSOLUTE. */
  float rotary_percent;                 /**< Share of each head's dims that RoPE rotates
                                             (`--rotary-percent`), in (0, 1]; 0 (default)
                                             means 1. The rotated dims must be even. */
  int32_t use_rope_scaling;             /**< 1: Llama 3.1's frequency scaling of RoPE
                                             (`--use-rope-scaling`; needs
                                             ::PTDP_POSITION_EMBEDDING_ROPE). Default 0. */
  float rope_scaling_factor;            /**< Its factor (`--rope-scaling-factor`), >= 1; 0
                                             (default) means 8. */
  float rope_low_freq_factor;           /**< Its low-frequency factor
                                             (`--rope-scaling-low-freq-factor`); 0 (default)
                                             means 1. */
  float rope_high_freq_factor;          /**< Its high-frequency factor, above the low one
                                             (`--rope-scaling-high-freq-factor`); 0 (default)
                                             means 4. */
  int32_t rope_original_max_position_embeddings; /**< The context length the frequencies were
                                             trained for
                                             (`--rope-scaling-original-max-position-embeddings`);
                                             0 (default) means 8192. */
  int32_t num_query_groups;             /**< Key/value heads g of grouped-query attention
                                             (`--group-query-attention --num-query-groups g`):
                                             g divides a and t divides g; 1 is multi-query
                                             attention. 0 (default) means a (multi-head). */
  int32_t kv_channels;                  /**< Head dim (`--kv-channels`); 0 (default) means
                                             h / a. */
  int32_t disable_bias_linear;          /**< 1: no linear layer has a bias
                                             (`--disable-bias-linear`). Default 0 (biases). */
  int32_t add_qkv_bias;                 /**< 1: linear_qkv keeps its bias even with
                                             disable_bias_linear (`--add-qkv-bias`, Qwen2).
                                             Default 0. */
  int32_t qk_layernorm;                 /**< 1: a norm (of the normalization's kind) over each
                                             query and key head (`--qk-layernorm`). Default 0. */
  /* Added after 0.3.0: mixture of experts with Megatron-Core's names, semantics and refusals
   * (docs/moe.md); num_experts 0, what a program built against an older header passes, is a
   * dense model, and each other field's 0 means Megatron's default. The fields start at the
   * 152 bytes of 0.3.0's struct, which had no tail padding. */
  const char* moe_layer_freq;           /**< Which layers are MoE (`--moe-layer-freq`): an integer
                                             N as a string, every N-th layer from layer 0, or
                                             Megatron's list pattern of 1 (MoE) and 0 (dense) per
                                             layer, e.g. "([0]*3+[1]*1)*3" or "[1,0,1]" (read
                                             without evaluation). NULL or "" (default): every
                                             layer. Read when the options are; the options the
                                             library fills point to storage it keeps for the life
                                             of the process. */
  int32_t num_experts;                  /**< E, routed experts per MoE layer (`--num-experts`);
                                             0 (default): a dense model. */
  int32_t moe_router_topk;              /**< k, experts per token (`--moe-router-topk`), <= E;
                                             0 means 2. */
  int32_t moe_ffn_hidden_size;          /**< Each routed expert's MLP width
                                             (`--moe-ffn-hidden-size`); 0 (default):
                                             ffn_hidden_size. */
  int32_t moe_shared_expert_intermediate_size; /**< Total width of the shared experts
                                             (`--moe-shared-expert-intermediate-size`),
                                             divisible by t; 0 (default): none. */
  int32_t moe_shared_expert_gate;       /**< 1: the shared experts' output is scaled by
                                             sigmoid(x . gate_weight) (Qwen2-MoE,
                                             `--moe-shared-expert-gate`). Default 0. */
  ptdp_moe_score_function moe_router_score_function; /**< Default ::PTDP_MOE_SCORE_SOFTMAX. */
  int32_t moe_router_pre_softmax;       /**< 1: softmax over all E logits before the top k
                                             (`--moe-router-pre-softmax`); needed for k = 1 with
                                             softmax. Default 0. */
  float moe_router_topk_scaling_factor; /**< Multiplies the top-k probabilities
                                             (`--moe-router-topk-scaling-factor`); 0 (default):
                                             none. */
  int32_t moe_router_num_groups;        /**< Group-limited routing's groups
                                             (`--moe-router-num-groups`), dividing E; 0
                                             (default): none. */
  int32_t moe_router_group_topk;        /**< Groups per token (`--moe-router-group-topk`),
                                             dividing k; with moe_router_num_groups only. */
  int32_t moe_router_enable_expert_bias; /**< 1: aux-loss-free balancing's expert bias
                                             (`--moe-router-enable-expert-bias`; needs
                                             ::PTDP_MOE_SCORE_SIGMOID). Default 0. */
  float moe_router_bias_update_rate;    /**< The expert bias's step per iteration
                                             (`--moe-router-bias-update-rate`); 0 means 1e-3. */
  ptdp_moe_load_balancing moe_router_load_balancing_type; /**< Default ::PTDP_MOE_BALANCING_AUX_LOSS. */
  float moe_aux_loss_coeff;             /**< `--moe-aux-loss-coeff`, >= 0; default 0. */
  float moe_z_loss_coeff;               /**< `--moe-z-loss-coeff`, >= 0; 0 (default): no z-loss. */
  float moe_expert_capacity_factor;     /**< `--moe-expert-capacity-factor`, >= 0; 0 (default):
                                             dropless. */
  ptdp_moe_drop_policy moe_token_drop_policy; /**< Default ::PTDP_MOE_DROP_PROBS. */
  int32_t moe_pad_expert_input_to_capacity; /**< 1: pad each expert's tokens to its capacity
                                             (needs a capacity factor). Default 0. */
  ptdp_moe_dispatcher moe_token_dispatcher_type; /**< Default ::PTDP_MOE_DISPATCHER_ALLTOALL. */
  int32_t moe_layer_recompute;          /**< 1: recompute each MoE layer in the backward
                                             (`--recompute-modules moe`); not with
                                             ::PTDP_RECOMPUTE_FULL. Default 0. */
  int32_t qk_layernorm_across_heads;    /**< 1: with qk_layernorm and ::PTDP_NORMALIZATION_RMSNORM,
                                             the q and k norms are over a token's whole query
                                             projection (weight [heads x head dim]) and key
                                             projection (weight [query groups x head dim]), not
                                             over each head (OLMo 2, OLMoE;
                                             `--qk-layernorm-across-heads`). Default 0. */
  /* Added after 0.3.0: YaRN (Megatron-Core's MLA flags, for every RoPE model; docs/deepseek.md).
   * Each field's 0, what a program built against an older header passes, means Megatron's
   * default: plain RoPE. */
  ptdp_rope_type rope_type;             /**< `--rope-type`; ::PTDP_ROPE_TYPE_YARN needs
                                             ::PTDP_POSITION_EMBEDDING_ROPE and not
                                             use_rope_scaling. Default ::PTDP_ROPE_TYPE_ROPE. */
  float rotary_scaling_factor;          /**< YaRN's factor (`--rotary-scaling-factor`), > 0;
                                             0 (default) means 1. */
  float mscale;                         /**< YaRN's mscale (`--mscale`), > 0; other than 1 only
                                             with mscale_all_dim. 0 (default) means 1. */
  float mscale_all_dim;                 /**< YaRN's mscale_all_dim (`--mscale-all-dim`), >= 0;
                                             0 (default): unset. */
  int32_t original_max_position_embeddings; /**< The context length the frequencies were
                                             trained for (`--original-max-position-embeddings`);
                                             0 (default) means 4096. */
  float beta_fast;                      /**< `--beta-fast`, >= beta_slow; 0 (default) means 32. */
  float beta_slow;                      /**< `--beta-slow`, > 0; 0 (default) means 1. */
  int32_t yarn_no_round_to_int;         /**< 1: YaRN's correction range unrounded (Hugging Face's
                                             truncate false,
                                             `--no-yarn-correction-range-round-to-int`). Default 0. */
  /* Multi-latent attention (DeepSeek-V2/V3; docs/deepseek.md). Each 0 is Megatron's default. */
  int32_t multi_latent_attention;       /**< 1: every layer's attention is multi-latent attention
                                             (`--multi-latent-attention`): parameters
                                             self_attention.linear_q_down_proj, q_layernorm,
                                             linear_q_up_proj (or linear_q_proj),
                                             linear_kv_down_proj, kv_layernorm, linear_kv_up_proj,
                                             linear_proj; q_layernorm and kv_layernorm with
                                             qk_layernorm. Needs ::PTDP_POSITION_EMBEDDING_ROPE
                                             and num_query_groups 0 or num_attention_heads.
                                             Default 0. */
  int32_t q_lora_rank;                  /**< The query latent's width (`--q-lora-rank`); 0
                                             (default): no query compression, one linear_q_proj. */
  int32_t kv_lora_rank;                 /**< The compressed key/value latent's width
                                             (`--kv-lora-rank`); 0 means 32. */
  int32_t qk_head_dim;                  /**< Each query/key head's part without RoPE
                                             (`--qk-head-dim`); 0 means 128. */
  int32_t qk_pos_emb_head_dim;          /**< Each query/key head's RoPE part, shared by the keys
                                             of all heads (`--qk-pos-emb-head-dim`); 0 means 64. */
  int32_t v_head_dim;                   /**< Each value head's width (`--v-head-dim`), at most
                                             qk_head_dim + qk_pos_emb_head_dim; 0 means 128. */
  int32_t mtp_num_layers;               /**< Multi-token prediction depth D (`--mtp-num-layers`,
                                             DeepSeek-V3's MTP as Megatron-Core has it), >= 0:
                                             D modules `mtp.layers.{k}.*` (enorm, hnorm, eh_proj,
                                             transformer_layer, final_layernorm) after the
                                             decoder, on the last pipeline stage, module k
                                             predicting the token k + 1 ahead with the shared
                                             embedding and output layer. Each module's
                                             transformer_layer is of the decoder's last layer's
                                             kind (Megatron's MTP block spec): an MoE layer
                                             (router, experts split over the expert-parallel
                                             ranks, shared experts) when that layer is one, its
                                             aux losses and expert bias handled as a decoder
                                             MoE layer's (see ptdp_model_moe_metrics()). Needs
                                             ::PTDP_POSITION_EMBEDDING_ROPE or none. Training
                                             only: evaluation, logits and generation ignore the
                                             modules. Default 0: none. */
  float mtp_loss_scaling_factor;        /**< `--mtp-loss-scaling-factor`, >= 0: the D depths'
                                             losses enter the gradient as this / D times their
                                             sum (the reported loss is the main one; see
                                             ptdp_model_mtp_losses()). 0 means Megatron's
                                             default 0.1. */
  int32_t moe_router_group_score_topk;  /**< Group-limited routing: a group's score is the sum of
                                             its m best selection values
                                             (`--moe-router-group-score-topk`, ptdp's); 1: the
                                             group's maximum (DeepSeek-V2's
                                             group_limited_greedy), 2: its top-2 sum (DeepSeek-V3);
                                             then k need not be a multiple of
                                             moe_router_group_topk. 0 (default): k /
                                             moe_router_group_topk, Megatron's. */
  int32_t moe_router_topk_limited_devices; /**< Device-limited routing
                                             (`--moe-router-topk-limited-devices` M): each token
                                             uses at most M of the moe_router_num_groups groups
                                             (required here), each the experts of one rank at that
                                             expert-parallel size; sets moe_router_group_topk to M
                                             (which must be 0 or M). A run's e must divide
                                             moe_router_num_groups (docs/deepseek.md). 0
                                             (default): none. */
} ptdp_gpt_options;

/** Opaque handle to a model. */
typedef struct ptdp_model_impl* ptdp_model;

/**
 * @brief Fills @p options with the defaults and sets its struct_size.
 * @param[out] options Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p options is NULL.
 */
PTDP_API ptdp_status ptdp_gpt_options_init(ptdp_gpt_options* options);

/**
 * @brief Number of named model presets (`--model-preset` of ptdp-train and ptdp-plan): the
 *        GPT-2 sizes, the GPTs of the paper's Table 1, Llama 3 / 3.2 and Qwen2.5 shapes.
 * @param[out] count Receives the count; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p count is NULL.
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_model_preset_count(int32_t* count);

/**
 * @brief The name of preset @p index (lower case, e.g. "gpt2-124m", "llama-3.2-1b"), in a fixed
 *        order.
 * @param index 0 to ptdp_model_preset_count() - 1.
 * @param[out] buffer Receives the NUL-terminated name; may be NULL when @p capacity is 0.
 * @param capacity Bytes @p buffer can hold.
 * @param[out] length Receives strlen of the name (also when @p capacity is too small); must not
 *             be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p index out of range, NULL @p length, or @p capacity too
 *         small (nothing written to @p buffer; @p length tells the size needed).
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_model_preset_name(int32_t index, char* buffer, size_t capacity, size_t* length);

/**
 * @brief Fills @p options with a preset's shape and architecture (vocabulary, layers, heads,
 *        query groups, MLP width, norms, RoPE base and scaling, biases, tying, and its dropout:
 *        0 for the Llama and Qwen2.5 presets); the other fields (seed, device, precision, ...)
 *        take their defaults. Change fields afterwards
 *        as needed.
 * @param name A preset's name, case-insensitive.
 * @param[in,out] options Its struct_size must be set by the caller (ptdp_gpt_options_init()
 *        does); the library writes that many bytes at most and sets struct_size to what it
 *        wrote. Unchanged on error.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL arguments, an unknown name (the message lists the
 *         known ones), a struct_size below the first published size, or a preset that needs
 *         fields beyond the caller's struct_size (named).
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_gpt_options_from_preset(const char* name, ptdp_gpt_options* options);

/**
 * @brief Builds this rank's share of a GPT: split over the tensor group of @p groups, and with
 *        pipeline size p and virtual size v, the chunks c = j * p + (pipeline rank) of p * v
 *        equal chunks of layers (round-robin); initialises its parameters.
 * @param groups Live groups; they must outlive the model.
 * @param options Shape and settings; NULL for the defaults.
 * @param[out] out Receives the handle; must not be NULL. Unchanged on error.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT a config that cannot be built, named with its numbers: a
 *         non-positive size, heads not divisible by t, hidden not divisible by heads, ffn not
 *         divisible by t, seq_length above max_position_embeddings, a dropout outside [0, 1),
 *         query groups that do not divide the heads or are not divisible by t, an odd number of
 *         rotated dims with RoPE, rope scaling without RoPE, an enum value out of range or a
 *         flag that is not 0 or 1 (named with its field), or layers that do not split evenly
 *         over p * v chunks (named with layers, p and v), or sizes whose derived sizes (MLP and
 *         attention widths, weight and activation element counts, the parameter count)
 *         overflow (named with the fields and values).
 * @retval PTDP_ERR_OUT_OF_MEMORY this rank's parameters and gradients would not fit the memory it
 *         can have (as in ptdp_trainer_create(); PTDP_MEMORY_CHECK=0 skips the check); refused
 *         before anything is allocated.
 * @retval PTDP_ERR_UNSUPPORTED a CUDA model in a build without CUDA.
 * @retval PTDP_ERR_DEVICE a CUDA model on a rank that has no GPU.
 * @par Thread safety
 * Collective over the model-parallel group.
 */
PTDP_API ptdp_status ptdp_model_create(ptdp_groups groups, const ptdp_gpt_options* options, ptdp_model* out);

/**
 * @brief Releases a model. NULL is accepted and ignored.
 * @param model A model handle, or NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT not a live model handle.
 * @retval PTDP_ERR_INVALID_STATE an optimizer still uses the model (destroy it first).
 */
PTDP_API ptdp_status ptdp_model_destroy(ptdp_model model);

/**
 * @brief The options a model was built with, every default resolved (rotary_base 10000 rather
 *        than 0, and so on; ffn_hidden_size and max_position_embeddings as given).
 * @param model A live model.
 * @param[in,out] options Its struct_size must be set by the caller (ptdp_gpt_options_init()
 *        does); the library writes that many bytes at most and sets struct_size to what it
 *        wrote. Unchanged on error.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, NULL @p options, a struct_size below the first
 *         published size, or a model whose options need fields beyond the caller's
 *         struct_size (named).
 * @par Thread safety
 * No communication.
 */
PTDP_API ptdp_status ptdp_model_get_options(ptdp_model model, ptdp_gpt_options* options);

/**
 * Per-token inputs of a batch besides its tokens and labels, laid out like the tokens
 * ([rows, seq_length] row-major: b rows for one microbatch, m * b for a batch). Initialise with
 * ptdp_batch_masks_init(); a NULL member means its default. The arrays are read during the call
 * only. Given as ptdp_pipeline_options::masks; see "Loss masks and documents" for the semantics.
 */
typedef struct ptdp_batch_masks {
  size_t struct_size;             /**< Set by ptdp_batch_masks_init(). */
  const int32_t* position_ids;    /**< Each token's position: >= 0, and below
                                       max_position_embeddings with learned position
                                       embeddings. NULL (default): token i of a sample is at
                                       position i. */
  const int32_t* document_starts; /**< The first position of each token's document: in each
                                       sample, 0 <= start[i] <= i and start[i] >= start[i - 1].
                                       Token i attends to tokens start[i] .. i. NULL (default):
                                       causal attention over the whole sample. */
} ptdp_batch_masks;

/**
 * @brief Fills @p masks with the defaults (no position ids, no documents) and sets its
 *        struct_size.
 * @param[out] masks Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p masks is NULL.
 */
PTDP_API ptdp_status ptdp_batch_masks_init(ptdp_batch_masks* masks);

/**
 * Options of every call that runs a batch through the model: ptdp_model_forward_backward(),
 * ptdp_model_forward(), ptdp_model_pipeline_forward_backward(), ptdp_train_iteration() and
 * ptdp_model_evaluate(), and of ptdp_pipeline_run(). Initialise with ptdp_pipeline_options_init().
 *
 * One struct for all of them, grown through struct_size, rather than a twin of each function
 * per feature: the masks were first given to `_masked` twins of the five (deprecated since
 * 0.4.0, kept as wrappers), and each later per-call option would have doubled them again. The
 * three calls that took no options before 0.4.0 take this struct rather than one of their own,
 * which would have held the masks alone and split one concept over two types. A program built
 * against an older ptdp.h keeps calling their old versions (symbol version PTDP_0, without the
 * argument); one rebuilt against this header passes NULL or its options there.
 * A field means the same wherever it is read; where a call has nothing to apply it to, it
 * either has no effect, as scatter_gather for a model in one pipeline stage (like any p = 1
 * run), or is refused, as a trace_path where no schedule is traced: ptdp_model_forward_backward()
 * and ptdp_model_forward() run the whole model on this rank and ptdp_model_evaluate() runs the
 * forward-only schedule untraced, so they refuse it rather than write no trace; and
 * ptdp_pipeline_run(), whose stages are the caller's callbacks, refuses masks.
 */
typedef struct ptdp_pipeline_options {
  size_t struct_size;      /**< Set by ptdp_pipeline_options_init(). */
  int32_t scatter_gather;  /**< 1 (default): with t > 1 each tensor rank sends 1/t of a
                                stage-boundary tensor and the receiving stage all-gathers it
                                (the paper's scatter/gather); 0: send whole tensors. No effect
                                where no tensor crosses a stage boundary (one stage, and
                                ptdp_model_evaluate(), whose transfers are whole tensors). */
  const char* trace_path;  /**< NULL (default): no trace. Otherwise the spans of every rank's
                                forward, backward and communication are written by world rank 0
                                to this path as one Chrome/Perfetto trace JSON (collective over
                                the runtime's world). Only ptdp_model_pipeline_forward_backward(),
                                ptdp_train_iteration() and ptdp_pipeline_run() write traces; the
                                other calls refuse a non-NULL path. */
  /* Added in 0.4.0 (a struct from before it has none: the defaults). */
  const ptdp_batch_masks* masks; /**< The batch's position ids and document starts, laid out
                                      like its tokens (see ptdp_batch_masks; read during the
                                      call only). NULL (default): token i of a sample is at
                                      position i and attends to the whole sample before it.
                                      Refused by ptdp_pipeline_run(). */
} ptdp_pipeline_options;

/**
 * @brief Fills @p options with the defaults and sets its struct_size.
 * @param[out] options Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p options is NULL.
 */
PTDP_API ptdp_status ptdp_pipeline_options_init(ptdp_pipeline_options* options);

/**
 * @brief Forward and backward of one microbatch; adds the gradients of
 *        mean loss * @p grad_scale to the model's gradients.
 * @param model A live model.
 * @param tokens @p micro_batch_size * seq_length token ids, row-major [b, s], in [0, V).
 * @param labels The same shape: the next token of each position, in [0, V), or
 *        ::PTDP_IGNORE_INDEX (no part in the loss; see ptdp_batch_masks).
 * @param micro_batch_size b, > 0.
 * @param iteration Optimizer step; keys the dropout masks.
 * @param microbatch Index of the microbatch within the iteration; keys the dropout masks.
 * @param grad_scale Factor on the gradients (e.g. 1 / number of microbatches).
 * @param options NULL for the defaults; its masks ([b, seq_length]) give positions and
 *        documents. Its trace_path must be NULL (no schedule runs).
 * @param[out] loss Receives the masked mean loss over the b * s tokens (the mean over the
 *        tokens whose label is not ignored; 0 when all are); may be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL tokens or labels, b <= 0, an id outside the
 *         vocabulary (named with its index; a negative label other than ::PTDP_IGNORE_INDEX),
 *         bad options (a struct_size, scatter_gather or trace_path, named), or a position id or
 *         document start outside its range (named with its index). Nothing is changed.
 * @retval PTDP_ERR_UNSUPPORTED the model is split into pipeline stages (use
 *         ptdp_model_pipeline_forward_backward()).
 * @retval PTDP_ERR_TIMEOUT a tensor-parallel peer did not take part in time.
 * @par Thread safety
 * Collective over the tensor group; all ranks pass the same tokens, labels and masks.
 * @par Since 0.4.0
 * @p options is new: a program built against an older ptdp.h calls the version without it
 * (symbol version PTDP_0), and one rebuilt against this header passes NULL or its options.
 */
PTDP_API ptdp_status ptdp_model_forward_backward(ptdp_model model, const int32_t* tokens, const int32_t* labels,
                                                 int32_t micro_batch_size, int64_t iteration, int64_t microbatch,
                                                 float grad_scale, const ptdp_pipeline_options* options,
                                                 float* loss);

/**
 * @brief Forward only (evaluation): the mean loss, nothing kept, gradients untouched.
 * @param model A live model.
 * @param tokens As in ptdp_model_forward_backward().
 * @param labels As in ptdp_model_forward_backward().
 * @param micro_batch_size b, > 0.
 * @param iteration Keys the dropout masks when @p training is 1.
 * @param microbatch Keys the dropout masks when @p training is 1.
 * @param training 1: dropout on; 0: off.
 * @param options As in ptdp_model_forward_backward().
 * @param[out] loss Receives the mean loss; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT as ptdp_model_forward_backward(), or NULL @p loss.
 * @retval PTDP_ERR_UNSUPPORTED the model is split into pipeline stages.
 * @retval PTDP_ERR_TIMEOUT a tensor-parallel peer did not take part in time.
 * @par Thread safety
 * Collective over the tensor group.
 * @par Since 0.4.0
 * @p options is new, as for ptdp_model_forward_backward().
 */
PTDP_API ptdp_status ptdp_model_forward(ptdp_model model, const int32_t* tokens, const int32_t* labels,
                                        int32_t micro_batch_size, int64_t iteration, int64_t microbatch,
                                        int32_t training, const ptdp_pipeline_options* options, float* loss);

/**
 * @brief Sets every gradient to zero.
 * @param model A live model.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT not a live model handle.
 */
PTDP_API ptdp_status ptdp_model_zero_grad(ptdp_model model);

/**
 * @brief Number of named parameters of the whole model: every stage's, and every expert of a
 *        mixture of experts, wherever it is held.
 * @param model A live model.
 * @param[out] count Receives the count; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle or NULL output.
 */
PTDP_API ptdp_status ptdp_model_num_params(ptdp_model model, int32_t* count);

/**
 * @brief Name, global shape and partition dimension of parameter @p index.
 * @param model A live model.
 * @param index 0 to ptdp_model_num_params() - 1.
 * @param[out] name Receives the NUL-terminated name; may be NULL when @p name_capacity is 0.
 * @param name_capacity Bytes @p name can hold, terminator included.
 * @param[out] ndim Receives 1 or 2; may be NULL.
 * @param[out] global_shape Receives ndim extents (room for 2); may be NULL.
 * @param[out] partition_dim Receives -1 (the same on every tensor rank), 0 (rows split) or
 *             1 (columns split); may be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, index out of range, or a name longer than
 *         @p name_capacity - 1 (nothing written).
 */
PTDP_API ptdp_status ptdp_model_param_info(ptdp_model model, int32_t index, char* name, size_t name_capacity,
                                           int32_t* ndim, int64_t* global_shape, int32_t* partition_dim);

/**
 * @brief Copies the full global-shape value of a parameter, gathered from the tensor ranks
 *        (an expert's from its expert-tensor-parallel ranks, and broadcast from the
 *        expert-parallel rank holding it; and broadcast from the pipeline stage holding it),
 *        into host memory.
 * @param model A live model.
 * @param name A parameter name.
 * @param[out] host Room for the global element count.
 * @param bytes Size of @p host in bytes; must be at least global elements * 4.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, unknown name, NULL @p host, @p bytes too small.
 * @par Thread safety
 * Collective over the model-parallel group; also over the data-parallel group while a
 * distributed optimizer shards the model's fp32 master weights (16-bit weights, d > 1), which
 * are then gathered.
 */
PTDP_API ptdp_status ptdp_model_get_param(ptdp_model model, const char* name, float* host, size_t bytes);

/**
 * @brief Sets a parameter from its full global-shape value; each rank holding it keeps its
 *        slice (both copies of a tied word embedding are set). Every rank must pass the same
 *        value. No communication.
 * @param model A live model.
 * @param name A parameter name.
 * @param host The global-shape value.
 * @param bytes Size of @p host in bytes; must equal global elements * 4.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, unknown name, NULL @p host, @p bytes mismatched.
 */
PTDP_API ptdp_status ptdp_model_set_param(ptdp_model model, const char* name, const float* host, size_t bytes);

/**
 * @brief Copies the full global-shape gradient of a parameter, gathered from the tensor ranks
 *        (and broadcast from the pipeline stage holding it), into host memory.
 * @param model A live model.
 * @param name A parameter name.
 * @param[out] host Room for the global element count.
 * @param bytes Size of @p host in bytes; must be at least global elements * 4.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT as ptdp_model_get_param().
 * @par Thread safety
 * Collective over the model-parallel group.
 */
PTDP_API ptdp_status ptdp_model_get_grad(ptdp_model model, const char* name, float* host, size_t bytes);

/** Opaque handle to a pipeline schedule (see ptdp_schedule_create()). */
typedef struct ptdp_schedule_impl* ptdp_schedule;

/**
 * @brief Forward and backward of one global batch through a pipeline schedule: m microbatches
 *        of @p micro_batch_size samples, each rank running its actions of @p schedule on its
 *        chunks. Gradients of the mean loss accumulate (call ptdp_model_zero_grad() between
 *        steps); the tied word embedding's gradients are summed over the embedding group.
 * @param model A live model; its groups' pipeline and virtual sizes must match the schedule's.
 * @param schedule A schedule for (p, m, v).
 * @param tokens m * micro_batch_size * seq_length ids, row-major [m * b, s], the same on every
 *        rank of a pipeline (each data-parallel replica passes its own batch).
 * @param labels The same shape; the next token of each position, or ::PTDP_IGNORE_INDEX.
 * @param micro_batch_size b, > 0.
 * @param iteration Optimizer step; keys the dropout masks (microbatch i of the batch keys its own).
 * @param options NULL for the defaults; its masks ([m * b, seq_length], read by every stage)
 *        give positions and documents.
 * @param[out] loss Receives the mean of the m microbatches' masked mean losses on every rank;
 *        may be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handles, NULL data, b <= 0, ids outside the vocabulary,
 *         a schedule for another (p, v), bad options, or a position id or document start outside
 *         its range.
 * @retval PTDP_ERR_TIMEOUT a peer stage did not take part in time (the message names it).
 * @retval PTDP_ERR_IO the trace could not be written.
 * @par Thread safety
 * Collective over the model-parallel group (and the world when tracing).
 */
PTDP_API ptdp_status ptdp_model_pipeline_forward_backward(ptdp_model model, ptdp_schedule schedule,
                                                          const int32_t* tokens, const int32_t* labels,
                                                          int32_t micro_batch_size, int64_t iteration,
                                                          const ptdp_pipeline_options* options, float* loss);

/**
 * @brief Deprecated since 0.2: the old name of ptdp_model_pipeline_forward_backward() (it never
 *        took an optimizer step), kept so that programs built against 0.1 still link and run.
 *        Same arguments, statuses and behaviour.
 * @param model As in ptdp_model_pipeline_forward_backward().
 * @param schedule As there.
 * @param tokens As there.
 * @param labels As there.
 * @param micro_batch_size As there.
 * @param iteration As there.
 * @param options As there.
 * @param[out] loss As there.
 * @return The status ptdp_model_pipeline_forward_backward() returns.
 * @deprecated Use ptdp_model_pipeline_forward_backward().
 */
PTDP_API PTDP_DEPRECATED("ptdp_model_pipeline_forward_backward") ptdp_status ptdp_model_train_step(
    ptdp_model model, ptdp_schedule schedule, const int32_t* tokens, const int32_t* labels, int32_t micro_batch_size,
    int64_t iteration, const ptdp_pipeline_options* options, float* loss);

/**
 * @brief Forward of one (chunk, microbatch) for ptdp_pipeline_run().
 * @param user_data ptdp_stage_callbacks::user_data.
 * @param chunk Global chunk index (chunk c runs on pipeline rank c % p).
 * @param microbatch Microbatch index in [0, m).
 * @param input The previous chunk's output, borrowed for the call; NULL for chunk 0.
 * @param[out] output Set to a new tensor of the activation shape (the library takes ownership
 *        and destroys the handle); the last chunk may leave it NULL.
 * @return ::PTDP_SUCCESS, or a status that stops the run and is returned by ptdp_pipeline_run().
 */
typedef ptdp_status (*ptdp_stage_forward_fn)(void* user_data, int32_t chunk, int32_t microbatch, ptdp_tensor input,
                                             ptdp_tensor* output);

/**
 * @brief Input gradient of one (chunk, microbatch) for ptdp_pipeline_run().
 * @param user_data ptdp_stage_callbacks::user_data.
 * @param chunk Global chunk index.
 * @param microbatch Microbatch index.
 * @param grad_output Gradient of the chunk's output, borrowed; NULL for the last chunk (which
 *        starts from its own loss).
 * @param[out] grad_input Set to a new tensor of the activation shape (the library takes
 *        ownership); chunk 0 may leave it NULL.
 * @return ::PTDP_SUCCESS, or a status that stops the run.
 */
typedef ptdp_status (*ptdp_stage_backward_input_fn)(void* user_data, int32_t chunk, int32_t microbatch,
                                                    ptdp_tensor grad_output, ptdp_tensor* grad_input);

/**
 * @brief Weight gradients of one (chunk, microbatch), after its input gradient.
 * @param user_data ptdp_stage_callbacks::user_data.
 * @param chunk Global chunk index.
 * @param microbatch Microbatch index.
 * @return ::PTDP_SUCCESS, or a status that stops the run.
 */
typedef ptdp_status (*ptdp_stage_backward_weight_fn)(void* user_data, int32_t chunk, int32_t microbatch);

/** A user's model chunks for ptdp_pipeline_run(). Initialise with ptdp_stage_callbacks_init(). */
typedef struct ptdp_stage_callbacks {
  size_t struct_size;                            /**< Set by ptdp_stage_callbacks_init(). */
  ptdp_stage_forward_fn forward;                 /**< Required. */
  ptdp_stage_backward_input_fn backward_input;   /**< Required. */
  ptdp_stage_backward_weight_fn backward_weight; /**< Optional: NULL when weight gradients are
                                                      computed in backward_input (then schedules
                                                      with separate W actions are refused). */
  void* user_data;                               /**< Passed to every callback. */
  int32_t activation_ndim;                       /**< Dimensions of the f32 tensor passed between
                                                      chunks (and of its gradient). */
  int64_t activation_shape[PTDP_MAX_DIMS];       /**< Its extents. */
} ptdp_stage_callbacks;

/**
 * @brief Fills @p callbacks with NULL functions and an empty shape, and sets its struct_size.
 * @param[out] callbacks Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p callbacks is NULL.
 */
PTDP_API ptdp_status ptdp_stage_callbacks_init(ptdp_stage_callbacks* callbacks);

/**
 * @brief Runs this rank's actions of @p schedule on a user's model chunks: the library calls
 *        the callbacks in schedule order and moves activations and gradients between pipeline
 *        stages (batched send/recv, scatter/gather over the tensor group when t > 1).
 * @param groups Live groups whose pipeline size equals the schedule's p.
 * @param schedule The schedule.
 * @param callbacks The chunks; see ::ptdp_stage_callbacks.
 * @param options NULL for the defaults (trace_path as in ptdp_model_pipeline_forward_backward());
 *        its masks must be NULL (the callbacks read their own inputs).
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handles, missing callbacks, a bad activation shape, a
 *         schedule for another p, a W action without a backward_weight callback, bad options, or
 *         a callback output of the wrong shape.
 * @retval PTDP_ERR_TIMEOUT a peer stage did not take part in time.
 * @return Otherwise the first non-success status a callback returned (its message kept).
 * @par Thread safety
 * Collective over the pipeline group (and the world when tracing). Callbacks run on the
 * calling thread.
 */
PTDP_API ptdp_status ptdp_pipeline_run(ptdp_groups groups, ptdp_schedule schedule, const ptdp_stage_callbacks* callbacks,
                                       const ptdp_pipeline_options* options);

/** @} */

/* ---------------------------------------------------------------------------------------- */
/** @name Parallel layers
 *  The tensor-parallel building blocks on their own, for users who build their own models.
 *  Each layer owns its parameters (initialised from @p seed like the model's) and gradients;
 *  activations are kept per microbatch between forward and backward, so several microbatches
 *  can be in flight. Tensors are f32 (token ids and labels i32) with the row count N first.
 *  @{ */

/** Opaque handle to a parallel layer. */
typedef struct ptdp_layer_impl* ptdp_layer;

/**
 * @brief A column-parallel linear layer y = x W^T + b, W [out, in] split by output features.
 * @param groups Live groups; the layer is split over their tensor group, which must outlive it.
 * @param in_features Input width (the same input on every tensor rank).
 * @param out_features Global output width; divisible by t.
 * @param bias 1 for a bias (split like the output), 0 without.
 * @param gather_output 1: forward returns [N, out] on every rank; 0: this rank's [N, out/t].
 * @param init_std Weights are normal(0, init_std); the bias starts at zero.
 * @param seed Initialisation seed (parameter "weight" and "bias" keyed by name).
 * @param[out] out Receives the handle; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT non-positive sizes, out_features not divisible by t, bad flags.
 */
PTDP_API ptdp_status ptdp_column_parallel_linear_create(ptdp_groups groups, int64_t in_features,
                                                        int64_t out_features, int32_t bias, int32_t gather_output,
                                                        float init_std, uint64_t seed, ptdp_layer* out);

/**
 * @brief A row-parallel linear layer y = sum over ranks of x_r W_r^T, + b: W [out, in] split by
 *        input features; the input arrives split ([N, in/t], e.g. a column-parallel output).
 * @param groups Live groups (tensor group used).
 * @param in_features Global input width; divisible by t.
 * @param out_features Output width.
 * @param bias 1 for a bias (the same on every rank, added after the sum), 0 without.
 * @param init_std Weights are normal(0, init_std).
 * @param seed Initialisation seed.
 * @param[out] out Receives the handle; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT non-positive sizes, in_features not divisible by t.
 */
PTDP_API ptdp_status ptdp_row_parallel_linear_create(ptdp_groups groups, int64_t in_features, int64_t out_features,
                                                     int32_t bias, float init_std, uint64_t seed, ptdp_layer* out);

/**
 * @brief A vocabulary-parallel embedding: table [vocab, hidden] split by rows; forward takes
 *        i32 ids [N] and returns [N, hidden] on every rank.
 * @param groups Live groups (tensor group used).
 * @param vocab Rows of the table; divisible by t.
 * @param hidden Width.
 * @param init_std Normal init std.
 * @param seed Initialisation seed.
 * @param[out] out Receives the handle; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT non-positive sizes, vocab not divisible by t.
 */
PTDP_API ptdp_status ptdp_vocab_parallel_embedding_create(ptdp_groups groups, int64_t vocab, int64_t hidden,
                                                          float init_std, uint64_t seed, ptdp_layer* out);

/**
 * @brief Cross-entropy over vocabulary-parallel logits [N, padded_vocab / t] that never gathers
 *        them; columns of ids >= @p vocab are padding and take no part. Forward takes the logits
 *        and i32 labels [N] and returns per-token losses [N]; backward takes dloss [N] and
 *        returns dlogits.
 * @param groups Live groups (tensor group used).
 * @param vocab The true vocabulary size.
 * @param padded_vocab Global logit width; >= @p vocab and divisible by t.
 * @param[out] out Receives the handle; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT non-positive sizes, padded_vocab < vocab or not divisible by t.
 */
PTDP_API ptdp_status ptdp_vocab_parallel_cross_entropy_create(ptdp_groups groups, int64_t vocab,
                                                              int64_t padded_vocab, ptdp_layer* out);

/**
 * @brief Runs a layer's forward for one microbatch and keeps what its backward needs.
 * @param layer A live layer.
 * @param microbatch Key of the activation slot (any integer; one forward per key until its backward).
 * @param input [N, in] f32 (linear layers), i32 ids [N] (embedding), logits (cross-entropy).
 * @param labels i32 [N] for the cross-entropy; NULL for the other layers.
 * @param[out] output Receives a new tensor (the caller destroys it); must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handles, wrong shapes or dtypes, labels missing or given
 *         to a layer that takes none.
 * @retval PTDP_ERR_INVALID_STATE @p microbatch is already in flight.
 * @par Thread safety
 * Collective over the tensor group.
 */
PTDP_API ptdp_status ptdp_layer_forward(ptdp_layer layer, int64_t microbatch, ptdp_tensor input, ptdp_tensor labels,
                                        ptdp_tensor* output);

/**
 * @brief Runs a layer's backward for one microbatch: the input gradient and the parameter
 *        gradients (added to the layer's gradients), then frees the microbatch's slot.
 * @param layer A live layer.
 * @param microbatch The key passed to ptdp_layer_forward().
 * @param grad_output Gradient of the forward output (dloss [N] for the cross-entropy).
 * @param[out] grad_input Receives a new tensor with the input gradient; must be NULL for the
 *             embedding (ids have none) and non-NULL otherwise.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handles, shapes not matching the forward.
 * @retval PTDP_ERR_INVALID_STATE no forward ran for @p microbatch.
 * @par Thread safety
 * Collective over the tensor group.
 */
PTDP_API ptdp_status ptdp_layer_backward(ptdp_layer layer, int64_t microbatch, ptdp_tensor grad_output,
                                         ptdp_tensor* grad_input);

/**
 * @brief A tensor viewing this rank's slice of a layer parameter ("weight" or "bias"); writing
 *        it changes the layer. Destroy the handle when done (the layer keeps the storage).
 * @param layer A live linear or embedding layer.
 * @param which "weight" or "bias".
 * @param[out] out Receives the view; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, NULL arguments, or no such parameter.
 */
PTDP_API ptdp_status ptdp_layer_param(ptdp_layer layer, const char* which, ptdp_tensor* out);

/**
 * @brief A tensor viewing this rank's slice of a parameter's gradient.
 * @param layer A live linear or embedding layer.
 * @param which "weight" or "bias".
 * @param[out] out Receives the view; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, NULL arguments, or no such parameter.
 */
PTDP_API ptdp_status ptdp_layer_grad(ptdp_layer layer, const char* which, ptdp_tensor* out);

/**
 * @brief Sets the layer's gradients to zero.
 * @param layer A live layer.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT not a live layer handle.
 */
PTDP_API ptdp_status ptdp_layer_zero_grad(ptdp_layer layer);

/**
 * @brief Releases a layer. NULL is accepted and ignored. Tensors viewing its parameters keep
 *        their storage alive.
 * @param layer A layer handle, or NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT not a live layer handle.
 */
PTDP_API ptdp_status ptdp_layer_destroy(ptdp_layer layer);

/** @} */

/* ---------------------------------------------------------------------------------------- */
/** @name Pipeline schedules
 *  A pipeline schedule as data: for each of the p pipeline ranks, the ordered list of actions
 *  it performs in one training iteration (forward and backward passes of (microbatch, chunk)
 *  pairs, and the sends and receives between them). Schedules can be generated, inspected,
 *  checked, simulated with a cost model and drawn; users can also build their own and check
 *  them. No communication and no device are involved.
 *
 *  Model chunks are numbered 0 .. p*v - 1 in model order and assigned round-robin: chunk c
 *  lives on rank c % p, or, for ::PTDP_SCHEDULE_ZB_V and ::PTDP_SCHEDULE_DUALPIPE_V (the V
 *  placement, v = 2), on rank c for c < p and rank 2p - 1 - c otherwise, chunks p - 1 and p
 *  sharing rank p - 1 without a transfer; a custom schedule takes the placement of its kind
 *  label. Communication semantics: a ::PTDP_ACTION_SEND_ACTIVATION of
 *  (microbatch, c) sends chunk c's output to the rank of chunk c + 1, a
 *  ::PTDP_ACTION_RECV_ACTIVATION of (microbatch, c) receives chunk c's input from the rank of
 *  chunk c - 1; ::PTDP_ACTION_SEND_GRADIENT of (microbatch, c) sends the gradient of chunk c's
 *  input to the rank of chunk c - 1, ::PTDP_ACTION_RECV_GRADIENT of (microbatch, c) receives
 *  the gradient of chunk c's output from the rank of chunk c + 1. Between two ranks, transfers
 *  of one kind are matched in order. A maximal run of consecutive communication actions in a
 *  rank's list is one batch, posted together and completed once every transfer in it has met
 *  its counterpart (the peer has posted the batch holding it).
 *
 *  A schedule handle is immutable: any number of threads may query, check, simulate or draw the
 *  same schedule at once; only ptdp_schedule_destroy() must not race with other calls on it.
 *  @{ */

/* The handle type ::ptdp_schedule is declared with the GPT model above, which runs schedules. */

/** Schedules ptdp_schedule_create() can generate. */
typedef enum ptdp_schedule_kind PTDP_ENUM_INT {
  PTDP_SCHEDULE_GPIPE = 0,            /**< All forwards, then all backwards; holds m microbatches. */
  PTDP_SCHEDULE_1F1B = 1,             /**< PipeDream-Flush: warm-up of p - rank - 1 forwards, then
                                           one forward, one backward; holds at most p. */
  PTDP_SCHEDULE_INTERLEAVED_1F1B = 2, /**< Megatron-LM's interleaved 1F1B with v > 1 chunks per
                                           rank; m must be a multiple of p. */
  PTDP_SCHEDULE_ZB_H1 = 3,            /**< Zero bubble ZB-H1 (Qi et al. 2024): backward split into
                                           input and weight gradients, weight gradients deferred
                                           into the bubbles; same peak memory as 1F1B. */
  PTDP_SCHEDULE_FORWARD_ONLY = 4,     /**< Forward passes only (evaluation): microbatch after
                                           microbatch through every chunk; any v. Since 0.2. */
  PTDP_SCHEDULE_ZB_V = 5,            /**< ZB-V (Qi et al., "Pipeline Parallelism with Controllable
                                           Memory"): v = 2 chunks per rank in the V placement
                                           (::PTDP_CHUNK_PLACEMENT_V), B and W split, list-scheduled
                                           with 1F1B's activation memory (p microbatches per rank). */
  PTDP_SCHEDULE_DUALPIPE_V = 6,      /**< DeepSeek's DualPipeV: v = 2 in the V placement, the order of
                                           dualpipev.py (overlapped F/B pairs run in sequence); needs
                                           m >= 2p. */
  PTDP_SCHEDULE_INTERLEAVED_ZB = 7   /**< Interleaved zero bubble: interleaved 1F1B (v > 1, m a
                                           multiple of p) with B and W split and the W passes
                                           filling the waits. */
} ptdp_schedule_kind;

/** What an action does. */
typedef enum ptdp_action_kind PTDP_ENUM_INT {
  PTDP_ACTION_FORWARD = 0,          /**< Forward of (microbatch, chunk). */
  PTDP_ACTION_BACKWARD = 1,         /**< Full backward: input and weight gradients together. */
  PTDP_ACTION_BACKWARD_INPUT = 2,   /**< Input-gradient part of the backward (zero-bubble "B"). */
  PTDP_ACTION_BACKWARD_WEIGHT = 3,  /**< Weight-gradient part of the backward (zero-bubble "W"). */
  PTDP_ACTION_SEND_ACTIVATION = 4,  /**< Send chunk's output to the rank of chunk + 1. */
  PTDP_ACTION_RECV_ACTIVATION = 5,  /**< Receive chunk's input from the rank of chunk - 1. */
  PTDP_ACTION_SEND_GRADIENT = 6,    /**< Send the gradient of chunk's input to the rank of chunk - 1. */
  PTDP_ACTION_RECV_GRADIENT = 7     /**< Receive the gradient of chunk's output from the rank of chunk + 1. */
} ptdp_action_kind;

/** One action of a rank's list. */
typedef struct ptdp_action {
  ptdp_action_kind kind; /**< What the action does. */
  int32_t microbatch;    /**< Microbatch, in [0, m). */
  int32_t chunk;         /**< Global chunk index, in [0, p*v); chunk c lives on rank c % p. */
  int32_t peer;          /**< The other pipeline rank of a transfer; -1 for compute actions
                              (ignored there). */
} ptdp_action;

/**
 * @brief Costs for ptdp_schedule_simulate() and ptdp_schedule_write_svg(): the time one
 *        pipeline rank's whole share of the model takes for one microbatch, in any unit. With
 *        v chunks per rank an action on one chunk costs 1/v of these. Initialise with
 *        ptdp_schedule_costs_init().
 */
typedef struct ptdp_schedule_costs {
  size_t struct_size;     /**< sizeof(ptdp_schedule_costs), set by ptdp_schedule_costs_init(). */
  double forward;         /**< Forward; default 1. */
  double backward;        /**< Full backward; default 2. */
  double backward_input;  /**< Input-gradient backward (zero bubble); default 1. */
  double backward_weight; /**< Weight-gradient backward (zero bubble); default 1. */
  double p2p_latency;     /**< Time from a transfer's two sides both being posted to its
                               completion; default 0. */
  /* Added with the trace-fed predictor: measured costs per global chunk. When set (non-NULL,
   * each p * v entries of the schedule simulated), an action of a kind on chunk c costs
   * entry c, instead of the per-rank costs above divided by v; all four or none. */
  const double* chunk_forward;         /**< Forward of each chunk, or NULL (default). */
  const double* chunk_backward;        /**< Full backward of each chunk, or NULL. */
  const double* chunk_backward_input;  /**< Input-gradient backward (B) of each chunk, or NULL. */
  const double* chunk_backward_weight; /**< Weight-gradient backward (W) of each chunk, or NULL. */
} ptdp_schedule_costs;

/**
 * @brief Fills @p costs with the defaults (forward 1, backward 2, backward_input 1,
 *        backward_weight 1, p2p_latency 0) and sets its struct_size.
 * @param[out] costs Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p costs is NULL.
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_schedule_costs_init(ptdp_schedule_costs* costs);

/**
 * @brief Generates a schedule.
 *
 * Every generated schedule passes ptdp_schedule_check(). Send and receive actions sit where
 * the rank issues them, paired like Megatron-LM's batched p2p calls (e.g. in the 1F1B steady
 * state "send activation" and "receive gradient" form one batch). With p = 1 there are no
 * communication actions.
 * @param kind Which schedule.
 * @param p Pipeline ranks, > 0.
 * @param m Microbatches per iteration, > 0 (a multiple of @p p for interleaved 1F1B).
 * @param v Chunks per rank: 1 for GPipe, 1F1B and ZB-H1; > 1 for interleaved 1F1B.
 * @param[out] out Receives the handle; must not be NULL. Unchanged on error.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT unknown @p kind, NULL @p out, non-positive sizes, v > 1 for
 *         a kind without chunks, v = 1 for interleaved 1F1B, m not a multiple of p for
 *         interleaved 1F1B, or a schedule too large (p*m*v > 2^24); the message names the numbers.
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_schedule_create(ptdp_schedule_kind kind, int32_t p, int32_t m, int32_t v,
                                          ptdp_schedule* out);

/**
 * @brief Builds a schedule from action lists supplied by the caller, e.g. to check or simulate
 *        a schedule of one's own.
 *
 * Only the representation is validated here (sizes, counts, action kinds); whether the lists
 * form a correct schedule is what ptdp_schedule_check() reports, and ptdp_schedule_simulate()
 * and ptdp_schedule_write_svg() refuse schedules that fail it.
 * @param kind_label The kind reported for the schedule (a label only; not enforced).
 * @param p Pipeline ranks, > 0.
 * @param m Microbatches, > 0.
 * @param v Chunks per rank, > 0 (p*m*v at most 2^24).
 * @param actions The lists of ranks 0 .. p-1 one after another: counts_per_rank[0] actions
 *        of rank 0, then those of rank 1, and so on. May be NULL when every count is 0.
 * @param counts_per_rank @p p counts, each >= 0; must not be NULL.
 * @param[out] out Receives the handle; must not be NULL. Unchanged on error.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT unknown @p kind_label, non-positive or too large sizes,
 *         NULL @p counts_per_rank, @p actions or @p out, a negative count, or an action with
 *         an unknown kind (the message names its index).
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_schedule_create_custom(ptdp_schedule_kind kind_label, int32_t p, int32_t m,
                                                 int32_t v, const ptdp_action* actions,
                                                 const int32_t* counts_per_rank, ptdp_schedule* out);

/**
 * @brief Releases a schedule. NULL is accepted and ignored.
 * @param schedule A schedule handle, or NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT not a live schedule handle.
 * @par Thread safety
 * Must not race with any other call on the same schedule.
 */
PTDP_API ptdp_status ptdp_schedule_destroy(ptdp_schedule schedule);

/**
 * @brief The schedule's kind and sizes.
 * @param schedule A live schedule handle.
 * @param[out] kind Receives the kind (the label for a custom schedule); may be NULL.
 * @param[out] p Receives the number of pipeline ranks; may be NULL.
 * @param[out] m Receives the number of microbatches; may be NULL.
 * @param[out] v Receives the number of chunks per rank; may be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT not a live schedule handle.
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_schedule_info(ptdp_schedule schedule, ptdp_schedule_kind* kind, int32_t* p,
                                        int32_t* m, int32_t* v);

/**
 * @brief Number of actions in one rank's list.
 * @param schedule A live schedule handle.
 * @param rank A pipeline rank in [0, p).
 * @param[out] count Receives the number; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, @p rank out of range, NULL @p count.
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_schedule_num_actions(ptdp_schedule schedule, int32_t rank, int32_t* count);

/**
 * @brief Copies one rank's actions, in the order the rank performs them.
 * @param schedule A live schedule handle.
 * @param rank A pipeline rank in [0, p).
 * @param[out] out Receives the actions; may be NULL when @p capacity is 0.
 * @param capacity Number of actions @p out can hold; must be >= the rank's count.
 * @param[out] count Receives the number of actions; must not be NULL. Unchanged on error
 *             (size the buffer with ptdp_schedule_num_actions()).
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, @p rank out of range, NULL @p count, negative
 *         or too small @p capacity, NULL @p out with a non-empty list.
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_schedule_actions(ptdp_schedule schedule, int32_t rank, ptdp_action* out,
                                           int32_t capacity, int32_t* count);

/**
 * @brief Checks a schedule: every (microbatch, chunk) has exactly one forward and one backward
 *        (or one input-gradient and, after it, one weight-gradient backward) in a valid order,
 *        every forward follows the arrival of its input and every backward that of its output
 *        gradient, every send has its matching receive (kind, peer, order, microbatch, chunk)
 *        and vice versa, peers are the right ranks, and running all ranks with the batch
 *        semantics above finishes (no deadlock).
 *
 * A schedule that fails is not an error: the call succeeds with *ok = 0 and the message
 * describing the first violation, e.g. "rank 1 action 7 (F mb3 c1): forward of microbatch 3
 * chunk 1 before its input was received" or "deadlock: rank 0 waits at action 5 (...) for rank
 * 1, which waits at action 9 (...) for rank 0".
 * @param schedule A live schedule handle.
 * @param[out] ok Receives 1 when the schedule is valid, 0 otherwise; must not be NULL.
 * @param[out] message Receives the message (empty when valid), NUL-terminated and truncated to
 *             @p capacity - 1 bytes; may be NULL when @p capacity is 0.
 * @param capacity Size of @p message in bytes.
 * @retval PTDP_SUCCESS the check ran (whatever its verdict).
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, NULL @p ok, NULL @p message with a non-zero
 *         @p capacity.
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_schedule_check(ptdp_schedule schedule, int32_t* ok, char* message,
                                         size_t capacity);

/**
 * @brief Simulates a schedule under a cost model.
 *
 * Compute actions run in list order; a batch is posted when its rank reaches it, each of its
 * transfers completes p2p_latency after both sides are posted, and the batch completes with
 * its last transfer. The bubble fraction is (makespan - ideal) / ideal, with ideal a rank's
 * total compute time (the paper's t_bubble / t_ideal). A slot is the activations of one
 * (microbatch, chunk), held from its forward until its backward (or weight-gradient backward);
 * with v chunks per rank a slot holds 1/v of a microbatch's activations on that rank.
 * With the chunk cost arrays of @p costs set (per-action times measured from a trace of a
 * run, as bench_schedule_predict measures them), the makespan is the predicted time of the
 * schedule's forward and backward passes.
 * @param schedule A live schedule handle that passes ptdp_schedule_check().
 * @param costs NULL for the defaults of ptdp_schedule_costs_init(); its chunk arrays, when
 *        set, must hold p * v entries each.
 * @param[out] makespan Receives the time the last rank finishes; may be NULL.
 * @param[out] bubble_fraction Receives the bubble fraction; may be NULL.
 * @param[out] peak_slots Receives, for each of the p ranks, the most slots held at once; may
 *             be NULL.
 * @param capacity Number of elements @p peak_slots can hold; must be >= p when @p peak_slots
 *        is not NULL (ignored otherwise).
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, bad @p costs (struct_size, a negative or
 *         non-finite cost, no compute time at all), @p capacity too small, or a schedule that
 *         fails ptdp_schedule_check() (the message gives the check's).
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_schedule_simulate(ptdp_schedule schedule, const ptdp_schedule_costs* costs,
                                            double* makespan, double* bubble_fraction,
                                            int32_t* peak_slots, int32_t capacity);

/**
 * @brief Per-chunk costs measured from a trace of a run, to feed ptdp_schedule_simulate() (the
 *        simulator as a predictor): the Chrome trace a run writes with
 *        ptdp_pipeline_options::trace_path or `ptdp-train --profile-trace`.
 *
 * For each global chunk c of the traced run: the mean duration, in seconds, of its forward,
 * full backward, input-gradient backward (B) and weight-gradient backward (W) spans over every
 * rank and microbatch of the trace; and the lower quartile of the communication batches'
 * durations as the transfer time (a batch whose peer was already there costs just the
 * transfer). A kind the trace lacks is derived: a full backward as B + W, B and W as halves of
 * a full backward. Point ptdp_schedule_costs' chunk arrays at the results to predict the
 * iteration time of any schedule for the same p and v (and chunk placement's layers).
 * @param path The trace file.
 * @param chunks p * v of the traced run; > 0.
 * @param[out] forward,backward,backward_input,backward_weight Arrays of @p chunks entries each
 *             (any may be NULL).
 * @param[out] p2p_latency Receives the transfer time; may be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p path NULL, @p chunks <= 0, or a chunk with no forward or
 *         no backward span in the trace (the message names it).
 * @retval PTDP_ERR_IO @p path cannot be read or is not a Chrome trace.
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_schedule_costs_from_trace(const char* path, int32_t chunks, double* forward, double* backward,
                                                    double* backward_input, double* backward_weight,
                                                    double* p2p_latency);

/**
 * @brief Draws the simulated timeline as a standalone SVG file, like the schedule figures of
 *        the pipeline papers: one row per rank, one box per compute action labelled with its
 *        microbatch, forward, backward, input- and weight-gradient backward in different
 *        colours, higher chunks lighter, with a legend and a time axis.
 * @param schedule A live schedule handle that passes ptdp_schedule_check().
 * @param costs NULL for the defaults of ptdp_schedule_costs_init().
 * @param path The file to write (created or replaced); must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT as ptdp_schedule_simulate(), or NULL @p path.
 * @retval PTDP_ERR_IO the file could not be written; the message names @p path.
 * @par Thread safety
 * Thread-safe (for distinct paths).
 */
PTDP_API ptdp_status ptdp_schedule_write_svg(ptdp_schedule schedule, const ptdp_schedule_costs* costs,
                                             const char* path);

/** @} */

/* ---------------------------------------------------------------------------------------- */
/** @name Indexed data sets
 *  Read-only access to Megatron-LM's tokenized corpora: the `MMIDIDX` indexed data set (index
 *  version 1) that Megatron's `tools/preprocess_data.py` writes as PREFIX.idx (the index:
 *  sequence lengths, byte offsets and document boundaries) and PREFIX.bin (the tokens of every
 *  sequence back to back). Every integer dtype Megatron writes is read (uint8, int8, int16,
 *  uint16, int32, int64) and returned as int32 token ids; float data sets are refused. Both
 *  files are validated when the data set is opened; file problems give ::PTDP_ERR_IO with a
 *  message that names the file. A ptdp_dataset may be read from several threads at once.
 *  @{ */

/** Opaque handle to an opened indexed data set. */
typedef struct ptdp_dataset_impl* ptdp_dataset;

/**
 * @brief Opens and validates PREFIX.idx and PREFIX.bin.
 * @param prefix Path without the extension, e.g. `data/my-corpus_text_document`. Must not be NULL.
 * @param[out] out Receives the handle; release it with ptdp_dataset_destroy(). Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL @p prefix or @p out.
 * @retval PTDP_ERR_IO a file is missing or unreadable, not a regular file (a directory, FIFO or
 *         device: the message says which), or malformed: truncated index (counts whose sizes
 *         overflow 64 bits included), bad magic, unsupported version, unknown or float dtype, a
 *         sequence past the end of PREFIX.bin, document boundaries that decrease or lie out of
 *         range. The message names the file.
 */
PTDP_API ptdp_status ptdp_dataset_open(const char* prefix, ptdp_dataset* out);

/**
 * @brief Closes a data set; NULL is accepted.
 * @param dataset The handle; unusable afterwards.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p dataset is not a live handle (best effort).
 */
PTDP_API ptdp_status ptdp_dataset_destroy(ptdp_dataset dataset);

/**
 * @brief The number of sequences (entries of the index) in the data set.
 * @param dataset A live handle.
 * @param[out] count Receives the number. Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or dead @p dataset, or NULL @p count.
 */
PTDP_API ptdp_status ptdp_dataset_num_sequences(ptdp_dataset dataset, int64_t* count);

/**
 * @brief The number of documents in the data set (one less than the index's document-index count).
 * @param dataset A live handle.
 * @param[out] count Receives the number. Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or dead @p dataset, or NULL @p count.
 */
PTDP_API ptdp_status ptdp_dataset_num_documents(ptdp_dataset dataset, int64_t* count);

/**
 * @brief Copies the tokens of one document (its sequences concatenated) as int32 token ids.
 *
 * An exception to "no side effects on error": @p count is always written when it is not NULL,
 * so a call with @p capacity 0 asks for the length.
 * @param dataset A live handle.
 * @param index The document, in [0, number of documents).
 * @param[out] tokens Receives the tokens; may be NULL when @p capacity is 0. Left unchanged
 *             on error.
 * @param capacity Number of tokens @p tokens can hold.
 * @param[out] count Receives the document's length in tokens (also when @p capacity is too
 *             small), or 0 when @p dataset or @p index is invalid. Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or dead @p dataset, @p index out of range, NULL
 *         @p count, negative @p capacity or @p capacity smaller than the document, NULL
 *         @p tokens with a positive @p capacity.
 * @retval PTDP_ERR_IO a stored token is negative or does not fit in int32; the message names
 *         PREFIX.bin, the sequence and the position.
 */
PTDP_API ptdp_status ptdp_dataset_document(ptdp_dataset dataset, int64_t index, int32_t* tokens, int64_t capacity,
                                           int64_t* count);

/** @} */

/* ---------------------------------------------------------------------------------------- */
/** @name Tokenizers
 *  Text to token ids and back, with Megatron-LM's `--tokenizer-type` names and flags, giving the
 *  ids the reference implementations give for the same files and text:
 *
 *  - ::PTDP_TOKENIZER_BYTE_LEVEL: one token per byte (ptdp's `--text-file`); 256 ids.
 *  - ::PTDP_TOKENIZER_NULL: Megatron's NullTokenizer; the text is space-separated ids below
 *    `vocab_size`, and `vocab_size` itself is the end-of-document id (vocab_size + 1 ids).
 *  - ::PTDP_TOKENIZER_GPT2_BPE: `vocab_file` (vocab.json) and `merge_file` (merges.txt): GPT-2's
 *    byte-level BPE and pre-tokenisation regex; "<|endoftext|>" is end of document and, as in
 *    Megatron, ordinary text inside the text.
 *  - ::PTDP_TOKENIZER_HUGGING_FACE: `tokenizer_model` names a tokenizer.json with a BPE model
 *    (GPT-2, GPT-NeoX, Llama 2, Llama 3, Qwen2 files): the ids of Hugging Face tokenizers'
 *    `Tokenizer.from_file(path).encode(text, add_special_tokens=False)`, added and special tokens
 *    included. End of document and beginning of sequence come from `tokenizer_config.json` beside
 *    the file when it exists (eos_token, bos_token).
 *  - ::PTDP_TOKENIZER_SENTENCE_PIECE: `tokenizer_model` names a SentencePiece .model (Llama 2,
 *    Mistral), read with libsentencepiece; Megatron's special tokens "<CLS>", "<SEP>", "<EOD>",
 *    "<MASK>" follow the model's pieces, and "<EOD>" is end of document.
 *
 *  No special token is added around the text (no BOS, no EOS). Byte-level tokenizers accept any
 *  bytes, UTF-8 or not, and decode gives them back: decode(encode(x)) == x. A tokenizer is
 *  immutable once created: encode and decode may be called on one handle from several threads at
 *  once.
 *  @{ */

/** Opaque handle to a tokenizer. */
typedef struct ptdp_tokenizer_impl* ptdp_tokenizer;

/** Kind of tokenizer (Megatron's `--tokenizer-type`). */
typedef enum ptdp_tokenizer_type PTDP_ENUM_INT {
  PTDP_TOKENIZER_BYTE_LEVEL = 0,    /**< "ByteLevel": bytes are tokens 0..255. */
  PTDP_TOKENIZER_NULL = 1,          /**< "NullTokenizer": the text is the ids. */
  PTDP_TOKENIZER_GPT2_BPE = 2,      /**< "GPT2BPETokenizer": vocab.json + merges.txt. */
  PTDP_TOKENIZER_HUGGING_FACE = 3,  /**< "HuggingFaceTokenizer": tokenizer.json. */
  PTDP_TOKENIZER_SENTENCE_PIECE = 4 /**< "SentencePieceTokenizer": a SentencePiece .model. */
} ptdp_tokenizer_type;

/** What a tokenizer is made from. Initialise with ptdp_tokenizer_options_init(). */
typedef struct ptdp_tokenizer_options {
  size_t struct_size;          /**< Set by ptdp_tokenizer_options_init(). */
  ptdp_tokenizer_type type;    /**< Default ::PTDP_TOKENIZER_BYTE_LEVEL. */
  const char* vocab_file;      /**< `--vocab-file`: vocab.json (GPT2BPETokenizer); NULL otherwise. */
  const char* merge_file;      /**< `--merge-file`: merges.txt (GPT2BPETokenizer); NULL otherwise. */
  const char* tokenizer_model; /**< `--tokenizer-model`: tokenizer.json or a .model file; NULL otherwise. */
  int64_t vocab_size;          /**< `--vocab-size`: NullTokenizer's V (ids below it); 0 otherwise. */
} ptdp_tokenizer_options;

/**
 * @brief Fills @p options with the defaults (a byte-level tokenizer) and sets its struct_size.
 * @param[out] options Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p options is NULL.
 */
PTDP_API ptdp_status ptdp_tokenizer_options_init(ptdp_tokenizer_options* options);

/**
 * @brief Creates a tokenizer from its files.
 * @param options The type and its files; must not be NULL.
 * @param[out] out Receives the handle; release it with ptdp_tokenizer_destroy(). Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL arguments, an unknown type, a file the type needs that is
 *         not given or one it does not use that is (named by its flag, e.g. `--merge-file`),
 *         NullTokenizer without a vocab_size in [1, 2^31 - 1), or a tokenizer.json that uses a part
 *         ptdp does not support (the message names the part, e.g. `model: the model type
 *         'WordPiece' is not supported`).
 * @retval PTDP_ERR_IO a file is missing, unreadable or malformed (named).
 */
PTDP_API ptdp_status ptdp_tokenizer_create(const ptdp_tokenizer_options* options, ptdp_tokenizer* out);

/**
 * @brief Creates the tokenizer a ptdp-train checkpoint was trained with: the `--tokenizer-type`,
 *        `--vocab-file`, `--merge-file`, `--tokenizer-model` and `--vocab-size` recorded in its
 *        latest iteration's metadata.json (paths as they were given to ptdp-train). Without a
 *        recorded `--tokenizer-type`, the Hugging Face tokenizer files in @p directory itself, which
 *        `ptdp-convert --from-hf` copies there: `tokenizer.json` (HuggingFaceTokenizer, with its
 *        `tokenizer_config.json`), else `tokenizer.model` (SentencePieceTokenizer), else
 *        `vocab.json` + `merges.txt` (GPT2BPETokenizer); else the byte-level tokenizer when the
 *        checkpoint was trained on `--text-file`.
 * @param directory The checkpoint directory (`--load DIR`); must not be NULL.
 * @param[out] out Receives the handle; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL arguments; the checkpoint records no tokenizer (trained on
 *         mock or pre-tokenized data without `--tokenizer-type`, or saved without its flags) and
 *         its directory holds no tokenizer files.
 * @retval PTDP_ERR_IO no checkpoint in @p directory, its metadata.json or a tokenizer file missing
 *         or malformed (named).
 */
PTDP_API ptdp_status ptdp_tokenizer_create_from_checkpoint(const char* directory, ptdp_tokenizer* out);

/**
 * @brief Releases a tokenizer; NULL is accepted.
 * @param tokenizer The handle; unusable afterwards.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p tokenizer is not a live handle (best effort).
 */
PTDP_API ptdp_status ptdp_tokenizer_destroy(ptdp_tokenizer tokenizer);

/**
 * @brief The type a tokenizer was created as.
 * @param tokenizer A live handle.
 * @param[out] type Receives the type; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or dead handle, NULL @p type.
 */
PTDP_API ptdp_status ptdp_tokenizer_get_type(ptdp_tokenizer tokenizer, ptdp_tokenizer_type* type);

/**
 * @brief Token ids of @p length bytes of text.
 *
 * An exception to "no side effects on error": @p count is always written when it is not NULL, so
 * a call with @p capacity 0 asks for the number of ids.
 * @param tokenizer A live handle.
 * @param text The text (any bytes; NUL is a byte like the others); may be NULL when @p length is 0.
 * @param length Bytes of @p text.
 * @param[out] ids Receives the ids; may be NULL when @p capacity is 0. Nothing is written unless
 *             all of them fit.
 * @param capacity Number of ids @p ids can hold.
 * @param[out] count Receives the number of ids of the text (also when @p capacity is too small),
 *             or 0 when the text cannot be encoded. Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or dead handle, NULL @p count, NULL @p text with a
 *         positive @p length, NULL @p ids with a positive @p capacity, @p capacity smaller than the
 *         number of ids, or text the tokenizer cannot encode (NullTokenizer: a word that is not an
 *         id, named with its byte offset).
 */
PTDP_API ptdp_status ptdp_tokenizer_encode(ptdp_tokenizer tokenizer, const char* text, size_t length, int32_t* ids,
                                           size_t capacity, size_t* count);

/**
 * @brief The text of @p count token ids (special tokens written as their text).
 *
 * The count/capacity protocol of the text getters: @p length always receives the text's size in
 * bytes (the text may hold NUL bytes; a NUL follows it), and nothing is written unless the text
 * and its NUL fit in @p capacity bytes.
 * @param tokenizer A live handle.
 * @param ids The ids; may be NULL when @p count is 0.
 * @param count Number of ids.
 * @param[out] buffer Receives the text and a NUL; may be NULL when @p capacity is 0.
 * @param capacity Bytes @p buffer can hold.
 * @param[out] length Receives the text's size in bytes; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or dead handle, NULL @p length, NULL @p ids with a
 *         positive @p count, an id outside the vocabulary (named with its position), @p capacity
 *         too small.
 */
PTDP_API ptdp_status ptdp_tokenizer_decode(ptdp_tokenizer tokenizer, const int32_t* ids, size_t count, char* buffer,
                                           size_t capacity, size_t* length);

/**
 * @brief The number of ids: every id in [0, size) is valid (added and special tokens included).
 *        This is the vocabulary size Megatron pads (`--make-vocab-size-divisible-by`).
 * @param tokenizer A live handle.
 * @param[out] size Receives the number; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or dead handle, NULL @p size.
 */
PTDP_API ptdp_status ptdp_tokenizer_vocab_size(ptdp_tokenizer tokenizer, int64_t* size);

/**
 * @brief The end-of-document id (Megatron's `tokenizer.eod`: what `--append-eod` appends), or -1
 *        when the tokenizer has none (ByteLevel; a GPT-2 vocabulary without "<|endoftext|>"; a
 *        tokenizer.json without an end-of-sequence token).
 * @param tokenizer A live handle.
 * @param[out] id Receives the id; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or dead handle, NULL @p id.
 */
PTDP_API ptdp_status ptdp_tokenizer_eod(ptdp_tokenizer tokenizer, int32_t* id);

/**
 * @brief The beginning-of-sequence id, or -1 when the tokenizer has none.
 * @param tokenizer A live handle.
 * @param[out] id Receives the id; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or dead handle, NULL @p id.
 */
PTDP_API ptdp_status ptdp_tokenizer_bos(ptdp_tokenizer tokenizer, int32_t* id);

/**
 * @brief The id of one vocabulary entry, spelled as the model spells it (byte-level BPE's mapped
 *        characters, e.g. "Ġthe"; SentencePiece's pieces, e.g. "▁the"; added tokens as written).
 * @param tokenizer A live handle.
 * @param token The entry's bytes; may be NULL when @p length is 0.
 * @param length Bytes of @p token.
 * @param[out] id Receives the id, or -1 when @p token is not an entry; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or dead handle, NULL @p id, NULL @p token with a positive
 *         @p length.
 */
PTDP_API ptdp_status ptdp_tokenizer_token_to_id(ptdp_tokenizer tokenizer, const char* token, size_t length,
                                                int32_t* id);

/**
 * @brief The vocabulary entry of an id, as ptdp_tokenizer_token_to_id() spells it; the
 *        count/capacity protocol of ptdp_tokenizer_decode().
 * @param tokenizer A live handle.
 * @param id An id in [0, vocabulary size).
 * @param[out] buffer Receives the entry and a NUL; may be NULL when @p capacity is 0.
 * @param capacity Bytes @p buffer can hold.
 * @param[out] length Receives the entry's size in bytes; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or dead handle, NULL @p length, @p id outside the
 *         vocabulary, @p capacity too small.
 */
PTDP_API ptdp_status ptdp_tokenizer_id_to_token(ptdp_tokenizer tokenizer, int32_t id, char* buffer, size_t capacity,
                                                size_t* length);

/** @} */

/* ---------------------------------------------------------------------------------------- */
/** @name Optimizer
 *  AdamW, SGD or Muon over a model's flat parameter buffers (or a user's registered tensors), with
 *  Megatron's conventions: weight decay on weights only (not biases or LayerNorm), gradient
 *  clipping by the global L2 norm over the tensor and pipeline groups (tensor-replicated
 *  parameters counted once), loss scaling with a found-inf flag agreed by every rank (a skipped
 *  step is skipped everywhere), data-parallel gradient averaging in buckets started during the
 *  backward, and the distributed optimizer (each data-parallel rank keeps the optimizer state of
 *  1/d of the parameters).
 *  @{ */

/** Optimizer algorithm (Megatron's `--optimizer`). */
typedef enum ptdp_optimizer_kind PTDP_ENUM_INT {
  PTDP_OPTIMIZER_ADAM = 0, /**< AdamW: Adam with decoupled weight decay. */
  PTDP_OPTIMIZER_SGD = 1,  /**< SGD with momentum. */
  PTDP_OPTIMIZER_MUON = 2  /**< Muon: momentum orthogonalised by Newton-Schulz iterations for the hidden 2-D
                                weights, AdamW (the adam_* fields) for the embeddings, the output layer, norms
                                and biases; the muon_* and qk_clip* fields. Since 0.4. */
} ptdp_optimizer_kind;

/** Muon's scale of the orthogonalised update of an [out, in] matrix (Megatron's
 *  `--muon-scale-mode`; ptdp_optimizer_options::muon_scale_mode), times
 *  ptdp_optimizer_options::muon_extra_scale_factor. */
typedef enum ptdp_muon_scale_mode PTDP_ENUM_INT {
  PTDP_MUON_SCALE_SPECTRAL = 0,     /**< sqrt(max(out, in)); with factor 0.2, PyTorch's adjust_lr_fn
                                         "match_rms_adamw". */
  PTDP_MUON_SCALE_UNIT_RMS_NORM = 1, /**< sqrt(out / in). */
  PTDP_MUON_SCALE_SHAPE_SCALING = 2  /**< sqrt(max(1, out / in)); with factor 1, PyTorch's "original". */
} ptdp_muon_scale_mode;

/** How Muon orthogonalises a matrix split over the tensor group (Megatron's `--muon-tp-mode`;
 *  ptdp_optimizer_options::muon_tp_mode). */
typedef enum ptdp_muon_tp_mode PTDP_ENUM_INT {
  PTDP_MUON_TP_DISTRIBUTED = 0, /**< The whole matrix, its work spread over the ranks (ptdp's default). */
  PTDP_MUON_TP_DUPLICATED = 1,  /**< The whole matrix on every tensor rank holding a piece: the same update. */
  PTDP_MUON_TP_BLOCKWISE = 2    /**< Each rank's piece on its own: a different update, which depends on t
                                     (Megatron's default). */
} ptdp_muon_tp_mode;

/** Muon's Newton-Schulz coefficient sets, used cyclically over the iterations (Megatron's
 *  `--muon-coefficient-type`; ptdp_optimizer_options::muon_coefficient_type). */
typedef enum ptdp_ns_coefficients PTDP_ENUM_INT {
  PTDP_NS_COEFFICIENTS_QUINTIC = 0,       /**< `quintic` (the default). */
  PTDP_NS_COEFFICIENTS_SIMPLE = 1,        /**< `simple`: the one set (3.4445, -4.775, 2.0315) of PyTorch's
                                               torch.optim.Muon. */
  PTDP_NS_COEFFICIENTS_POLAR_EXPRESS = 2, /**< `polar_express`. */
  PTDP_NS_COEFFICIENTS_AOL = 3            /**< `aol`. */
} ptdp_ns_coefficients;

/** Precision of Muon's Newton-Schulz products (Megatron's `--muon-fp32-matmul-prec`;
 *  ptdp_optimizer_options::muon_fp32_matmul_prec). */
typedef enum ptdp_ns_precision PTDP_ENUM_INT {
  PTDP_NS_PRECISION_HIGHEST = 0, /**< fp32 (ptdp's default). */
  PTDP_NS_PRECISION_HIGH = 1,    /**< TF32 on CUDA; fp32 on the CPU. */
  PTDP_NS_PRECISION_MEDIUM = 2   /**< bf16 operands and results with fp32 accumulation, as PyTorch's
                                      torch.optim.Muon (Megatron's default). */
} ptdp_ns_precision;

/** Learning-rate decay (Megatron's `--lr-decay-style`). */
typedef enum ptdp_lr_decay_style PTDP_ENUM_INT {
  PTDP_LR_CONSTANT = 0, /**< lr after warm-up. */
  PTDP_LR_LINEAR = 1,   /**< Linear from lr to min_lr over the decay iterations. */
  PTDP_LR_COSINE = 2    /**< Half a cosine from lr to min_lr. */
} ptdp_lr_decay_style;

/** Optimizer settings with Megatron's names. Initialise with ptdp_optimizer_options_init(). */
typedef struct ptdp_optimizer_options {
  size_t struct_size;                 /**< Set by ptdp_optimizer_options_init(). */
  ptdp_optimizer_kind optimizer;      /**< Default ::PTDP_OPTIMIZER_ADAM. */
  double lr;                          /**< Peak learning rate; default 1e-4. */
  double min_lr;                      /**< Floor of the decay; default 0. */
  ptdp_lr_decay_style lr_decay_style; /**< Default ::PTDP_LR_CONSTANT. */
  int64_t lr_warmup_iters;            /**< Linear warm-up steps; default 0. */
  int64_t lr_decay_iters;             /**< Step at which min_lr is reached; 0: no decay. */
  float adam_beta1;                   /**< Default 0.9. */
  float adam_beta2;                   /**< Default 0.999. */
  float adam_eps;                     /**< Default 1e-8. */
  float weight_decay;                 /**< Decoupled weight decay of weights; default 0.01. */
  float sgd_momentum;                 /**< Default 0.9. */
  float clip_grad;                    /**< Max global L2 norm; 0 disables clipping. Default 1.0. */
  int32_t dynamic_loss_scale;         /**< 1: back off on overflow and grow when clean. Default 0. */
  float initial_loss_scale;           /**< Starting (or constant) loss scale; default 1. */
  float min_loss_scale;               /**< Default 1. */
  int32_t loss_scale_window;          /**< Clean steps before the scale doubles; default 1000. */
  int32_t hysteresis;                 /**< Overflowing steps before the scale halves; default 2. */
  int32_t use_distributed_optimizer;  /**< 1: shard the optimizer state and, with 16-bit weights,
                                           the fp32 master weights over the data-parallel group. */
  int64_t ddp_bucket_size;            /**< Gradient elements per data-parallel bucket; 0 (default):
                                           one bucket per model chunk. */
  int32_t overlap_grad_reduce;        /**< 1: reduce each gradient bucket over the data-parallel
                                           group as soon as the backward completes it, overlapping
                                           the rest of the backward (`--overlap-grad-reduce`);
                                           0 (default): all buckets after the backward. The results
                                           are bitwise the same. With MPI, while an optimizer with
                                           this or overlap_param_gather lives, a thread of ptdp's
                                           enters MPI every 100 us to advance the collectives (only
                                           when MPI runs at MPI_THREAD_SERIALIZED or above; ptdp's
                                           own MPI calls are serialised with it): a program making
                                           MPI calls of its own meanwhile needs
                                           MPI_THREAD_MULTIPLE. Since 0.3; older programs get 0. */
  int32_t overlap_param_gather;       /**< 1: all-gather the updated weights bucket by bucket after
                                           the step and wait for each just before the next forward
                                           first uses it (`--overlap-param-gather`); needs
                                           use_distributed_optimizer and overlap_grad_reduce.
                                           0 (default): the step waits for the gathers. Bitwise the
                                           same results. Not for ptdp_optimizer_create_for_tensors(),
                                           whose step always waits. Since 0.3; older programs get 0. */
  /* Muon (optimizer ::PTDP_OPTIMIZER_MUON; read only with it, but range-checked always). Since 0.4;
     older programs get the defaults of ptdp_optimizer_options_init(). docs/guides/muon.md. */
  float muon_momentum;                /**< Momentum in [0, 1): the buffer moves by 1 - momentum
                                           towards each gradient (`--muon-momentum`). Default 0.95. */
  int32_t muon_nesterov;              /**< 1: Nesterov momentum, orthogonalising the gradient moved
                                           by the momentum towards the buffer (`--muon-nesterov`);
                                           0 (default): the buffer. */
  int32_t muon_num_ns_steps;          /**< Newton-Schulz iterations in [1, 100]
                                           (`--muon-num-ns-steps`). Default 5. */
  ptdp_ns_coefficients muon_coefficient_type; /**< `--muon-coefficient-type`; default
                                                   ::PTDP_NS_COEFFICIENTS_QUINTIC. */
  ptdp_ns_precision muon_fp32_matmul_prec;    /**< `--muon-fp32-matmul-prec`; default
                                                   ::PTDP_NS_PRECISION_HIGHEST. */
  ptdp_muon_scale_mode muon_scale_mode;       /**< `--muon-scale-mode`; default
                                                   ::PTDP_MUON_SCALE_SPECTRAL. */
  float muon_extra_scale_factor;      /**< Factor on the update's scale, > 0
                                           (`--muon-extra-scale-factor`). Default 1. */
  int32_t muon_split_qkv;             /**< 1 (default): q, k and v (per query group) and SwiGLU's
                                           gate and up orthogonalised as separate matrices; 0: each
                                           fused weight as one (`--muon-no-split-qkv`). */
  ptdp_muon_tp_mode muon_tp_mode;     /**< `--muon-tp-mode`; default ::PTDP_MUON_TP_DISTRIBUTED. */
  int32_t qk_clip;                    /**< 1: QK-clip (MuonClip) after each step (`--qk-clip`);
                                           0 (default): none. */
  float qk_clip_threshold;            /**< The largest attention logit a head keeps, > 0
                                           (`--qk-clip-threshold`). Default 100. */
  float qk_clip_alpha;                /**< The query weights' share of the clip in [0, 1], the keys
                                           taking the rest (`--qk-clip-alpha`). Default 0.5. */
} ptdp_optimizer_options;

/** Opaque handle to an optimizer. */
typedef struct ptdp_optimizer_impl* ptdp_optimizer;

/** What one training iteration reports (a Megatron log line's numbers). */
typedef struct ptdp_iteration_result {
  float loss;                 /**< Mean loss over the global batch (0 from ptdp_optimizer_step()). */
  double grad_norm;           /**< Global L2 norm of the gradients before clipping; inf when skipped. */
  double learning_rate;       /**< The learning rate of this step. */
  float loss_scale;           /**< The loss scale the gradients of this step were computed with. */
  int32_t skipped;            /**< 1 when a non-finite gradient skipped the step on every rank. */
  int64_t skipped_iterations; /**< Skipped steps so far. */
  double seconds;             /**< Wall time of the iteration on this rank (0 from ptdp_optimizer_step()). */
  double comm_wait_seconds;   /**< Of which this rank was blocked waiting on communication. */
} ptdp_iteration_result;

/** Flags of a registered parameter for ptdp_optimizer_create_for_tensors(). */
typedef enum ptdp_param_flags PTDP_ENUM_INT {
  PTDP_PARAM_DEFAULT = 0,          /**< Split over the tensor group (each rank's slice differs); decays. */
  PTDP_PARAM_REPLICATED = 1,       /**< The same on every tensor rank: counted once in the norm. */
  PTDP_PARAM_NO_WEIGHT_DECAY = 2   /**< Exempt from weight decay (biases, LayerNorm). */
} ptdp_param_flags;

/**
 * @brief Fills @p options with the defaults and sets its struct_size.
 * @param[out] options Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p options is NULL.
 */
PTDP_API ptdp_status ptdp_optimizer_options_init(ptdp_optimizer_options* options);

/**
 * @brief Creates an optimizer over this rank's chunks of @p model.
 * @param model A live model; it must outlive the optimizer.
 * @param options NULL for the defaults.
 * @param[out] out Receives the handle; must not be NULL. Unchanged on error.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle or bad options, named with their values.
 * @par Thread safety
 * Not collective; every rank of the job creates its optimizer with the same options.
 */
PTDP_API ptdp_status ptdp_optimizer_create(ptdp_model model, const ptdp_optimizer_options* options,
                                           ptdp_optimizer* out);

/**
 * @brief Creates an optimizer for a user's own model: its parameter and gradient tensors (CPU)
 *        are packed into one flat buffer each, and the handles are re-pointed at their place in
 *        it (values kept), so the model keeps using the same handles. Parameters may be f32, or
 *        bf16/f16 model weights (all of one dtype): the optimizer then keeps fp32 master weights,
 *        updates them, and writes their rounded values back to the model weights after every
 *        step that was not skipped. Gradients are f32 (accumulated in fp32).
 * @param groups Live groups (the data-parallel group reduces, the others bound the norm).
 * @param options NULL for the defaults.
 * @param params @p count parameter tensors (f32, bf16 or f16, all one dtype).
 * @param grads @p count f32 gradient tensors, each the shape of its parameter.
 * @param flags @p count combinations of ::ptdp_param_flags, or NULL for all default.
 * @param count Number of parameters, > 0.
 * @param[out] out Receives the handle; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handles, a dtype or shape mismatch (naming the index),
 *         a tensor given twice, bad flags or options.
 */
PTDP_API ptdp_status ptdp_optimizer_create_for_tensors(ptdp_groups groups, const ptdp_optimizer_options* options,
                                                       const ptdp_tensor* params, const ptdp_tensor* grads,
                                                       const int32_t* flags, int32_t count, ptdp_optimizer* out);

/**
 * @brief Releases an optimizer. NULL is accepted and ignored.
 * @param optimizer An optimizer handle, or NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT not a live optimizer handle.
 */
PTDP_API ptdp_status ptdp_optimizer_destroy(ptdp_optimizer optimizer);

/**
 * @brief Averages the gradients of a user's registered tensors over the data-parallel group
 *        (reduce-scatter with the distributed optimizer: in place, so that with d > 1 each
 *        rank's gradient tensors then hold the averages of its shard only, and other elements
 *        are undefined until the next backward).
 * @param optimizer A live optimizer.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle.
 * @retval PTDP_ERR_TIMEOUT a replica did not take part in time.
 * @par Thread safety
 * Collective over the data-parallel group.
 */
PTDP_API ptdp_status ptdp_optimizer_reduce_gradients(ptdp_optimizer optimizer);

/**
 * @brief One optimizer step: unscale, agree on non-finite gradients (skip everywhere), clip by
 *        the global norm, update (the own shard with the distributed optimizer, then
 *        all-gather). Reduces the gradients first if that was not done.
 * @param optimizer A live optimizer.
 * @param iteration The step number (for the learning-rate schedule), from 0.
 * @param[out] result Receives the step's numbers; may be NULL.
 * @retval PTDP_SUCCESS (also when the step was skipped; see ptdp_iteration_result::skipped)
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle or negative iteration.
 * @retval PTDP_ERR_TIMEOUT a rank did not take part in time.
 * @par Thread safety
 * Collective over the world of the groups.
 */
PTDP_API ptdp_status ptdp_optimizer_step(ptdp_optimizer optimizer, int64_t iteration, ptdp_iteration_result* result);

/**
 * @brief Bytes of optimizer state on this rank (Adam's two moments, SGD's momentum, and the
 *        fp32 master weights of 16-bit parameters); the moments take about 1/d of the total with
 *        the distributed optimizer.
 * @param optimizer A live optimizer.
 * @param[out] bytes Receives the size; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle or NULL output.
 */
PTDP_API ptdp_status ptdp_optimizer_state_bytes(ptdp_optimizer optimizer, size_t* bytes);

/** @} */

/* ---------------------------------------------------------------------------------------- */
/** @name Training configuration (ptdp-train's flags)
 *  The command line of `ptdp-train`, with Megatron-LM's flag names and meanings plus ptdp's
 *  own, parsed by the library so that every binding accepts the same flags. A parsed
 *  configuration hands out the option structs of the other sections (model, optimizer,
 *  layout, runtime) and the driver's own settings (::ptdp_train_settings).
 *  @{ */

/** Opaque handle to a parsed training configuration. */
typedef struct ptdp_train_config_impl* ptdp_train_config;

/**
 * @brief Parses a command line.
 * @param argc Number of entries of @p argv, >= 1.
 * @param argv argv[0] is the program name (ignored); then flags in Megatron's spelling,
 *        `--flag value` or `--flag=value`; boolean flags take no value.
 * @param[out] out Receives the configuration (also for `--help`: see
 *        ptdp_train_settings::help). Unchanged on error.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL arguments, an unknown flag, a missing or malformed
 *         value, a value out of range, or flags that contradict each other; the message names
 *         the flag and the value.
 * @par Thread safety
 * Any thread; no communication.
 */
PTDP_API ptdp_status ptdp_train_config_parse(int32_t argc, const char* const* argv, ptdp_train_config* out);

/**
 * @brief Releases a configuration. NULL is accepted and ignored.
 * @param config A configuration or NULL. Strings obtained from it become invalid.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT not a live handle.
 */
PTDP_API ptdp_status ptdp_train_config_destroy(ptdp_train_config config);

/**
 * @brief The `--help` text: every flag with its meaning and default.
 * @param program The program name shown in the usage line; NULL means "ptdp-train".
 * @param[out] buffer Receives the NUL-terminated text; may be NULL when @p capacity is 0.
 * @param capacity Bytes @p buffer can hold.
 * @param[out] length Receives strlen of the full text (also when @p capacity is too small);
 *             must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL @p length, or @p capacity too small (nothing written
 *         to @p buffer; @p length tells the size needed).
 */
PTDP_API ptdp_status ptdp_train_config_help(const char* program, char* buffer, size_t capacity, size_t* length);

/**
 * @brief The configuration as one JSON object, flag names without the dashes as keys (what a
 *        checkpoint's metadata.json records).
 * @param config A live configuration.
 * @param[out] buffer Receives the NUL-terminated JSON; may be NULL when @p capacity is 0.
 * @param capacity Bytes @p buffer can hold.
 * @param[out] length Receives strlen of the full text; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, NULL @p length, @p capacity too small.
 */
PTDP_API ptdp_status ptdp_train_config_to_json(ptdp_train_config config, char* buffer, size_t capacity,
                                               size_t* length);

/**
 * @brief The model options of the configuration (`--model-preset`, `--num-layers`,
 *        `--hidden-size`, ..., `--normalization`, `--swiglu`, `--position-embedding-type`,
 *        `--group-query-attention`, ...).
 * @param config A live configuration.
 * @param[out] options Receives them, struct_size set; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle or NULL @p options.
 */
PTDP_API ptdp_status ptdp_train_config_gpt_options(ptdp_train_config config, ptdp_gpt_options* options);

/**
 * @brief The optimizer options (`--optimizer`, `--lr`, `--lr-decay-style`, `--clip-grad`,
 *        `--fp16` dynamic loss scaling from `--initial-loss-scale`, `--use-distributed-optimizer`, ...).
 *        `--lr-decay-iters` left unset means `--train-iters`, as in Megatron.
 * @param config A live configuration.
 * @param[out] options Receives them, struct_size set; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle or NULL @p options.
 */
PTDP_API ptdp_status ptdp_train_config_optimizer_options(ptdp_train_config config,
                                                         ptdp_optimizer_options* options);

/**
 * @brief The parallel layout: t and p from their flags, v from
 *        `--num-virtual-stages-per-pipeline-rank`, or v = layers / (p * layers per virtual
 *        stage) when `--num-layers-per-virtual-pipeline-stage` is given, else 1; the first and
 *        last stage layers from `--decoder-first-pipeline-num-layers` and
 *        `--decoder-last-pipeline-num-layers` (0 when not given); v from the layout's entries
 *        and pipeline_model_parallel_layout pointing at the configuration's copy of
 *        `--pipeline-model-parallel-layout` (valid while @p config lives; NULL when not given);
 *        sequence_parallel from `--sequence-parallel`.
 * @param config A live configuration.
 * @param[out] options Receives them, struct_size set; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle or NULL @p options.
 */
PTDP_API ptdp_status ptdp_train_config_parallel_options(ptdp_train_config config,
                                                        ptdp_parallel_options* options);

/**
 * @brief The runtime options: `--comm-timeout` as the deadline of every blocking wait.
 *
 * Without `--comm-timeout`, comm_timeout_s is 0, so the runtime takes `PTDP_COMM_TIMEOUT_S`,
 * else 300 s (the flag wins over the variable, the variable over the default).
 * @param config A live configuration.
 * @param[out] options Receives them, struct_size set; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle or NULL @p options.
 */
PTDP_API ptdp_status ptdp_train_config_runtime_options(ptdp_train_config config,
                                                       ptdp_runtime_options* options);

/** Where the training data comes from. */
typedef enum ptdp_data_source PTDP_ENUM_INT {
  PTDP_DATA_MOCK = 0,    /**< `--mock-data`: synthetic tokens, a pure function of the seed. */
  PTDP_DATA_INDEXED = 1, /**< `--data-path PREFIX`: Megatron's indexed data set. */
  PTDP_DATA_TEXT = 2     /**< `--text-file PATH`: plain text, one token per byte. */
} ptdp_data_source;

/** The settings of the training driver itself. Strings point into the configuration and live
 *  as long as it; NULL when the flag was not given. */
typedef struct ptdp_train_settings {
  size_t struct_size;                  /**< Set by ptdp_train_config_settings(). */
  int32_t help;                        /**< 1: `--help` was given (print ptdp_train_config_help()). */
  int32_t micro_batch_size;            /**< `--micro-batch-size` b. */
  int32_t global_batch_size;           /**< `--global-batch-size` B; 0: b * d (one microbatch). */
  int64_t train_iters;                 /**< `--train-iters`. */
  int64_t log_interval;                /**< `--log-interval`. */
  int64_t save_interval;               /**< `--save-interval`; 0: save only at the end (with `--save`). */
  int64_t eval_interval;               /**< `--eval-interval`; 0: never. */
  int64_t eval_iters;                  /**< `--eval-iters`: global batches per evaluation. */
  ptdp_schedule_kind pipeline_schedule;/**< `--pipeline-schedule` (interleaved 1F1B when v > 1). */
  ptdp_data_source data_source;        /**< Which of the three data flags was given. */
  const char* data_path;               /**< `--data-path` prefix. */
  const char* split;                   /**< `--split`, e.g. "969,30,1". */
  const char* text_file;               /**< `--text-file`. */
  const char* tokenizer_type;          /**< `--tokenizer-type`: "ByteLevel" or "NullTokenizer". */
  const char* save;                    /**< `--save` directory. */
  const char* load;                    /**< `--load` directory. */
  const char* log_json;                /**< `--log-json` path. */
  const char* profile_trace;           /**< `--profile-trace` path (a Perfetto trace of one iteration). */
  const char* device;                  /**< `--device`: "auto", "cpu" or "cuda". */
  int32_t fp16;                        /**< `--fp16`. */
  int32_t bf16;                        /**< `--bf16`. */
  uint64_t seed;                       /**< `--seed`. */
  int64_t exit_interval;               /**< `--exit-interval`: stop after an iteration divisible by
                                            it (saving first with `--save`); 0: never. */
  int32_t check_for_nan_in_loss_and_grad; /**< `--check-for-nan-in-loss-and-grad`: stop (exit
                                            status 4) at the first non-finite loss or gradient. */
  int32_t max_restarts;                /**< `--max-restarts`: relaunches by the supervisor
                                            (ptdp_train_supervise()); 0: none. */
  int64_t max_skipped_iterations;      /**< `--max-skipped-iterations`: consecutive skipped
                                            iterations that stop the run (exit status 3); 0: never. */
  const char* launcher;                /**< `--launcher`: the supervised job's launcher command. */
} ptdp_train_settings;

/**
 * @brief The driver's settings.
 * @param config A live configuration.
 * @param[out] settings Receives them; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle or NULL @p settings.
 */
PTDP_API ptdp_status ptdp_train_config_settings(ptdp_train_config config, ptdp_train_settings* settings);

/** @} */

/* ---------------------------------------------------------------------------------------- */
/** @name Training
 *  One training iteration of a model (ptdp_train_iteration()), and the training loop every
 *  front end shares: `ptdp-train`, `ptdp.train()` in Python and the
 *  Rust, Julia and Fortran equivalents all call it, so the same flags print the same log lines
 *  and write byte-identical checkpoints in every language. From a parsed configuration it
 *  builds the groups, the model, the optimizer, the schedule and the samples, resumes from
 *  `--load`, and runs iterations with Megatron's log line (plus tokens/s, MFU and the memory
 *  high-water mark), JSON lines (`--log-json`), validation, checkpoints, `--exit-interval`,
 *  a progress bar on a terminal, a profile trace (`--profile-trace`) and the run's curves as an
 *  SVG (`--plot-file`). Each iteration reports the paper's model FLOPs, TFLOP/s per device and
 *  the model-FLOPs utilisation against the device's dense peak (the CPU's f32 GEMM rate
 *  measured at the start, a GPU's datasheet figure, or `--peak-tflops`).
 *  @{ */

/**
 * @brief One training iteration: zero the gradients, run the replica's global batch through
 *        @p schedule (data-parallel buckets reduced while the backward runs, the tied embedding
 *        summed over the embedding group), then the optimizer step. Dropout masks are keyed by
 *        (iteration, data-parallel rank * m + microbatch), so every layout reproduces the serial
 *        run of the same global batch.
 * @param model A live model.
 * @param optimizer An optimizer created for @p model.
 * @param schedule A schedule for the model's (p, v) and m microbatches.
 * @param tokens This replica's m * b samples, [m * b, seq_length] row-major (replica r of d
 *        holds samples r*m*b ... of the global batch).
 * @param labels The same shape; in [0, V), or ::PTDP_IGNORE_INDEX (see ptdp_batch_masks).
 * @param micro_batch_size b, > 0.
 * @param iteration The step number, from 0.
 * @param options NULL for the defaults; its masks are this replica's position ids and document
 *        starts ([m * b, seq_length]).
 * @param[out] result Receives loss (the mean of every replica's microbatches' masked mean
 *             losses), grad norm, lr, loss scale and skip; may be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handles, an optimizer of another model, bad data, bad
 *         options, or a position id or document start outside its range.
 * @retval PTDP_ERR_TIMEOUT a rank did not take part in time.
 * @par Thread safety
 * Collective over the world of the groups.
 */
PTDP_API ptdp_status ptdp_train_iteration(ptdp_model model, ptdp_optimizer optimizer, ptdp_schedule schedule,
                                          const int32_t* tokens, const int32_t* labels, int32_t micro_batch_size,
                                          int64_t iteration, const ptdp_pipeline_options* options,
                                          ptdp_iteration_result* result);

/** One MoE layer's expert load over an iteration's global batch: the (token, expert) pairs its
 *  experts kept after capacity drops, summed over every rank (the serial run's counts). */
typedef struct ptdp_moe_layer_load {
  int64_t layer;      /**< The decoder layer, 0-based; num_layers + k for multi-token prediction
                           module k's MoE layer (after the decoder's). */
  int64_t min_tokens; /**< The fewest pairs any expert of the layer kept. */
  int64_t max_tokens; /**< The most pairs any expert of the layer kept. */
} ptdp_moe_layer_load;

/** An iteration's mixture-of-experts figures, the same on every rank. The losses are
 *  Megatron-Core's logged values (track_moe_metrics): per MoE layer the loss over its coefficient
 *  averaged over the global batch's microbatches, then averaged over the MoE layers. The caller
 *  sets struct_size (sizeof its struct); the library writes no more and sets it to what it wrote.
 *  Since 0.4.0. */
typedef struct ptdp_moe_metrics {
  size_t struct_size;         /**< Bytes of this struct; set by the caller, updated by the library. */
  int64_t moe_layers;         /**< MoE layers of the model, the multi-token prediction modules'
                                   included (Megatron's count, over which the losses are
                                   averaged); 0 for a dense model or before the first
                                   iteration (the losses are then NaN). */
  double load_balancing_loss; /**< aux_loss or seq_aux_loss / moe_aux_loss_coeff; NaN when no
                                   balancing loss is configured. */
  double z_loss;              /**< z_loss / moe_z_loss_coeff; NaN without --moe-z-loss-coeff. */
  double exchange_seconds;    /**< This rank's own figure (not the same on every rank): the wall
                                   seconds of the iteration it spent in the MoE token
                                   dispatchers' communication (the count all-gathers, the
                                   all-to-all-v, the etp and allgather dispatchers' collectives,
                                   forward and backward, waits included), a part of
                                   ptdp_iteration_result::seconds; 0 for a dense model. */
} ptdp_moe_metrics;

/**
 * @brief The MoE figures of the last ptdp_train_iteration() of @p model (its losses and every MoE
 *        layer's expert load over the global batch; see ptdp_moe_metrics). That iteration also
 *        moved the routers' expert biases with aux-loss-free balancing
 *        (moe_router_enable_expert_bias): bias += moe_router_bias_update_rate *
 *        sign(mean load - load) per expert, the same on every rank.
 * @param model A live model.
 * @param[in,out] metrics Its struct_size must be set by the caller; may not be NULL.
 * @param[out] loads Receives min(@p capacity, metrics->moe_layers) entries, by layer; may be NULL
 *        when @p capacity is 0.
 * @param capacity Entries @p loads has room for, >= 0.
 * @retval PTDP_SUCCESS (moe_layers 0 before the first iteration and for a dense model)
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, NULL @p metrics, a struct_size too small, a
 *         negative @p capacity, or NULL @p loads with a positive @p capacity.
 * @par Thread safety
 * Not concurrently with a ptdp_train_iteration() of the same model.
 */
PTDP_API ptdp_status ptdp_model_moe_metrics(ptdp_model model, ptdp_moe_metrics* metrics, ptdp_moe_layer_load* loads,
                                            int64_t capacity);

/**
 * @brief Each multi-token prediction depth's loss of the last ptdp_train_iteration() of @p model
 *        (mtp_1 .. mtp_D: per depth the masked mean cross-entropy against the label k ahead,
 *        averaged over the global batch's microbatches as the loss is), the same on every rank.
 *        These are Megatron-Core's logged "mtp_k loss" values: the iteration's loss does not
 *        include them; its gradient includes mtp_loss_scaling_factor / D times their sum.
 * @param model A live model.
 * @param[out] losses Receives min(@p capacity, D) values, by depth; may be NULL when @p capacity
 *        is 0.
 * @param capacity Entries @p losses has room for, >= 0.
 * @param[out] count Receives D (0 without MTP or before the first iteration); may not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, NULL @p count, a negative @p capacity, or NULL
 *         @p losses with a positive @p capacity.
 * @par Thread safety
 * Not concurrently with a ptdp_train_iteration() of the same model.
 */
PTDP_API ptdp_status ptdp_model_mtp_losses(ptdp_model model, float* losses, int32_t capacity, int32_t* count);

/** Opaque handle to a training run (see ptdp_trainer_create()). */
typedef struct ptdp_trainer_impl* ptdp_trainer;

/** What one iteration reports, the same on every rank (the loss is the global batch's mean, the
 *  norm the global norm) except mem_high_water_mib, this rank's. The library fills struct_size
 *  with the size it knows: a reader built against an older header reads only the fields its
 *  struct has, a newer one checks struct_size before reading a field added later. */
typedef struct ptdp_iteration_report {
  size_t struct_size;           /**< Bytes of this struct the library filled in. */
  int64_t iteration;            /**< Iterations done, this one included (the log line's count). */
  int64_t train_iters;          /**< --train-iters. */
  int64_t consumed_samples;     /**< Training samples read so far. */
  int64_t global_batch_size;    /**< B. */
  float lm_loss;                /**< Mean loss of the global batch; NaN when it was not finite. */
  float loss_scale;             /**< The loss scale of this step. */
  double learning_rate;         /**< The learning rate of this step. */
  double grad_norm;             /**< Global L2 norm before clipping; not finite when skipped. */
  int32_t skipped;              /**< 1 when non-finite gradients skipped the step on every rank. */
  int32_t validated;            /**< 1 when a validation ran after this iteration. */
  int64_t skipped_iterations;   /**< Skipped steps so far. */
  double elapsed_seconds;       /**< Wall time of this iteration on this rank. */
  double tokens_per_second;     /**< B * seq_length / elapsed_seconds. */
  double model_flops;           /**< The model FLOPs of the iteration (ptdp_gpt_flops()); for the
                                     GPT 72 B s l h^2 (1 + s/(6h) + V/(12 l h)). */
  double executed_flops;        /**< With full recomputation's extra forward of the layers. */
  double tflops_per_device;     /**< executed_flops / elapsed_seconds / world size, in 1e12 (the
                                     paper's "TFLOP/s per GPU"). */
  double mfu;                   /**< model_flops / elapsed_seconds / world size / peak_flops: the
                                     model-FLOPs utilisation, 0 when the peak is unknown. */
  double peak_flops;            /**< One device's dense peak FLOP/s (ptdp_device_peak_flops(), the
                                     mean over the ranks, or --peak-tflops). */
  double mem_high_water_mib;    /**< This process's resident memory high-water mark, MiB. */
  float validation_loss;        /**< The validation loss, when validated. */
  int32_t saved;                /**< 1 when a checkpoint was saved after this iteration. */
} ptdp_iteration_report;

/**
 * @brief Called on every rank after each iteration (after its validation and the save of
 *        --save-interval or --exit-interval; a stop's own save comes after the call and shows
 *        in ptdp_trainer_last_report()).
 * @param report The iteration's report, valid during the call only.
 * @param user_data ptdp_trainer_options::user_data.
 * @return 0 to go on; non-zero to stop: the ranks agree (any rank's request stops all of them
 *         after the same iteration), save a checkpoint with --save, and ptdp_trainer_run()
 *         returns PTDP_SUCCESS.
 */
typedef int32_t (*ptdp_iteration_callback)(const ptdp_iteration_report* report, void* user_data);

/** Options for ptdp_trainer_create(). Initialise with ptdp_trainer_options_init(). */
typedef struct ptdp_trainer_options {
  size_t struct_size;              /**< Set by ptdp_trainer_options_init(). */
  ptdp_runtime runtime;            /**< NULL (default): the run creates its own runtime over
                                        MPI_COMM_WORLD (initialising MPI when nobody has) with the
                                        configuration's --comm-timeout (unset: PTDP_COMM_TIMEOUT_S,
                                        else 300 s). Otherwise the caller's
                                        runtime (e.g. over its own communicator); it must outlive
                                        the trainer. */
  ptdp_iteration_callback on_iteration; /**< NULL (default) or a callback per iteration. */
  void* user_data;                 /**< Passed to @ref on_iteration. */
  int32_t print_log;               /**< 1 (default): the logging rank (the last pipeline stage's
                                        first tensor and data-parallel rank) prints the log lines
                                        on stdout; 0: nothing is printed (JSON lines and the SVG
                                        are still written when asked for). */
} ptdp_trainer_options;

/**
 * @brief Fills @p options with the defaults and sets its struct_size.
 * @param[out] options Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p options is NULL.
 */
PTDP_API ptdp_status ptdp_trainer_options_init(ptdp_trainer_options* options);

/**
 * @brief Builds a training run from a parsed configuration: groups, model, optimizer, schedule
 *        and samples, and resumes from the configuration's --load when it holds a checkpoint.
 * @param config A live configuration (its settings are copied: it may be destroyed afterwards).
 * @param options NULL for the defaults.
 * @param[out] out Receives the handle; must not be NULL. Unchanged on error.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT bad handles or options; a world that is not a multiple of
 *         t x p; a global batch that does not split into micro-batches; a model, optimizer,
 *         schedule or data set that cannot be built (the message names the flag); a checkpoint
 *         saved with another model; a --load whose checkpoint recorded other trajectory flags
 *         (seed, data, tokenizer, model shape, global batch, optimizer, precision: each named
 *         with both values) without --override-resume-check. Every rank returns the same error.
 * @retval PTDP_ERR_INVALID_STATE another run holds the lock of the configuration's --save
 *         directory (`DIR/ptdp.lock`, named with its host, process id and start time). The
 *         trainer holds that lock (world rank 0) until ptdp_trainer_destroy(); a lock whose
 *         holder died is taken over.
 * @retval PTDP_ERR_IO a data file or checkpoint that cannot be read (named).
 * @retval PTDP_ERR_UNSUPPORTED --device cuda in a build without CUDA.
 * @retval PTDP_ERR_TIMEOUT a rank did not take part in time (the message names it).
 * @retval PTDP_ERR_OUT_OF_MEMORY the run would not fit, before anything big is allocated: the
 *         planner's per-rank estimate (parameters, gradients, optimizer state, activations of
 *         the schedule's in-flight microbatches) exceeds the memory this rank can have (the
 *         node's available memory or cgroup limit shared by its local ranks, or the GPU's free
 *         memory); the message gives the estimate, its largest items and the limit. The
 *         environment variable PTDP_MEMORY_CHECK=0 skips this check.
 * @par Thread safety
 * Collective over the runtime's world.
 */
PTDP_API ptdp_status ptdp_trainer_create(ptdp_train_config config, const ptdp_trainer_options* options,
                                         ptdp_trainer* out);

/**
 * @brief Trains from the current iteration to --train-iters, or until --exit-interval or a
 *        stop (ptdp_trainer_request_stop() or the callback's answer). May be called again after
 *        a stop to go on.
 * @param trainer A live trainer.
 * @retval PTDP_SUCCESS the run ended (done, exited or stopped: ptdp_trainer_last_report()).
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle.
 * @retval PTDP_ERR_IO a checkpoint, JSON log, trace or SVG that could not be written (named).
 * @retval PTDP_ERR_TIMEOUT a rank did not take part in time (named). After a failure of this
 *         rank alone, MPI initialised by ptdp is not finalised at exit, so the launcher ends the
 *         job instead of waiting for ranks that will never arrive.
 * @retval PTDP_ERR_INVALID_STATE the run stopped on every rank alike: `--max-skipped-iterations`
 *         consecutive skipped iterations, or a non-finite loss or gradient found by
 *         `--check-for-nan-in-loss-and-grad` (the message names the rank, its tensor, data and
 *         pipeline coordinates, the iteration and the parameter).
 * @par Thread safety
 * Collective over the runtime's world.
 */
PTDP_API ptdp_status ptdp_trainer_run(ptdp_trainer trainer);

/**
 * @brief Asks a run to stop after the iteration in progress (the ranks agree; with --save a
 *        checkpoint is written first). Returns at once.
 * @param trainer A live trainer.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle.
 * @par Thread safety
 * May be called from any thread while ptdp_trainer_run() runs (it only sets a flag).
 */
PTDP_API ptdp_status ptdp_trainer_request_stop(ptdp_trainer trainer);

/**
 * @brief The last iteration's report (zeros before the first iteration).
 * @param trainer A live trainer.
 * @param[in,out] report Its struct_size must be set by the caller (sizeof the caller's struct);
 *        the library writes that many bytes at most and sets struct_size to what it wrote.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, NULL @p report, or a struct_size too small for
 *         the first published fields.
 */
PTDP_API ptdp_status ptdp_trainer_last_report(ptdp_trainer trainer, ptdp_iteration_report* report);

/**
 * @brief The last iteration's MoE figures of a training run: its losses and every MoE layer's
 *        expert load (the JSON lines' load_balancing_loss, z_loss and moe_expert_load).
 * @param trainer A live trainer.
 * @param[in,out] metrics Its struct_size must be set by the caller; may not be NULL.
 * @param[out] loads Receives min(@p capacity, metrics->moe_layers) entries, by layer; may be NULL
 *        when @p capacity is 0 (ask for the count first).
 * @param capacity Entries @p loads has room for, >= 0.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, NULL @p metrics, a struct_size too small, a
 *         negative @p capacity, or NULL @p loads with a positive @p capacity.
 * @par Thread safety
 * Not from another thread during ptdp_trainer_run() of the same trainer; its callback may call
 * it and gets the iteration it is called for.
 */
PTDP_API ptdp_status ptdp_trainer_moe_metrics(ptdp_trainer trainer, ptdp_moe_metrics* metrics,
                                              ptdp_moe_layer_load* loads, int64_t capacity);

/**
 * @brief The last iteration's multi-token prediction losses of a training run (the log line's
 *        "mtp_1 loss" ... "mtp_D loss" for that iteration, the JSON lines' mtp_k_loss); see
 *        ptdp_model_mtp_losses().
 * @param trainer A live trainer.
 * @param[out] losses Receives min(@p capacity, D) values, by depth; may be NULL when @p capacity
 *        is 0.
 * @param capacity Entries @p losses has room for, >= 0.
 * @param[out] count Receives D (0 without MTP or before the first iteration); may not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, NULL @p count, a negative @p capacity, or NULL
 *         @p losses with a positive @p capacity.
 * @par Thread safety
 * As ptdp_trainer_moe_metrics().
 */
PTDP_API ptdp_status ptdp_trainer_mtp_losses(ptdp_trainer trainer, float* losses, int32_t capacity, int32_t* count);

/**
 * @brief Frees a trainer (its model, optimizer, groups, and its runtime when it created one).
 * @param trainer A trainer, or NULL (nothing happens).
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT not a live handle, or a run in progress.
 */
PTDP_API ptdp_status ptdp_trainer_destroy(ptdp_trainer trainer);

/**
 * @brief The whole of `ptdp-train` for any front end: parses @p argv, prints --help, trains on
 *        MPI_COMM_WORLD (initialising MPI when nobody has), and reports a failure on stderr as
 *        "PROGRAM: rank R: message", PROGRAM being argv[0]'s file name.
 * @param argc Number of entries in @p argv, >= 1.
 * @param argv argv[0] is the program name, then the flags (as ptdp_train_config_parse()).
 * @param[out] exit_code Receives the process exit status: 0 done, 1 failed (a run that would not
 *             fit is refused before it allocates, as in ptdp_trainer_create(); PTDP_MEMORY_CHECK=0
 *             skips that check), 2 bad flags (a size whose derived sizes overflow included), 3 the
 *             `--max-skipped-iterations` budget spent, 4 a non-finite value found by
 *             `--check-for-nan-in-loss-and-grad`, 5 the `--max-restarts` supervisor gave up
 *             (started outside an MPI launcher with `--max-restarts N`, ptdp_train_main()
 *             supervises the job as ptdp_train_supervise(), relaunching its own executable); must not
 *             be NULL.
 * @retval PTDP_SUCCESS the run happened (even when it failed: see @p exit_code).
 * @retval PTDP_ERR_INVALID_ARGUMENT argc < 1, NULL argv, an entry or @p exit_code NULL.
 * @par Thread safety
 * Collective over MPI_COMM_WORLD.
 */
PTDP_API ptdp_status ptdp_train_main(int32_t argc, const char* const* argv, int32_t* exit_code);

/**
 * @brief Supervises a training job that must survive rank failures (torchrun's --max-restarts,
 *        for MPI jobs): launches @p argv under @p launcher, waits, and after a failure relaunches
 *        the whole job from the latest complete checkpoint of its `--save DIR` (as `--load DIR`),
 *        after a back-off, at most @p max_restarts times. `ptdp-train --max-restarts N` calls it.
 *
 * An MPI job cannot outlive a dead rank, so the supervisor runs outside MPI (call it from a
 * process that no MPI launcher started, before MPI is initialised) and relaunches every rank.
 * Each attempt runs in a process group of its own with `PTDP_RESTART_ATTEMPT` (0, 1, ...) in its
 * environment; every process of a failed attempt is gone before the next starts. Attempts and
 * failures (exit status or signal) are logged on stderr as "ptdp-train supervisor: ...".
 * `--max-restarts N` and `--launcher C` in @p argv are left out of what is launched; a relaunch
 * while `--save DIR` holds no checkpoint yet runs @p argv as given, otherwise it drops any
 * `--load` and `--finetune` and adds `--load DIR`. A failure
 * that a restart would repeat is not retried: exit status 2 (bad flags), 3 (the
 * `--max-skipped-iterations` budget), 4 (`--check-for-nan-in-loss-and-grad`). SIGINT and SIGTERM
 * received meanwhile are passed on to the job, which is then not restarted.
 *
 * @param argc Entries of @p argv, >= 1.
 * @param argv The job's program (a path, or a name looked up in PATH) and its flags, e.g.
 *        {"ptdp-train", "--save", "ckpt", ...}; no entry NULL. With @p max_restarts > 0 it must
 *        hold `--save DIR`.
 * @param launcher The words put before the program, split at blanks (no quoting), e.g.
 *        "mpiexec -n 8 --oversubscribe"; NULL or "": the environment's PTDP_LAUNCHER, and without
 *        it the program runs as one process.
 * @param max_restarts Relaunches allowed after the first attempt, >= 0.
 * @param backoff_seconds The wait before the first relaunch, finite and >= 0; each further wait
 *        doubles, at most 60 s.
 * @param[out] exit_code The job's exit status when it succeeded (0) or failed in a way a restart
 *        would repeat; 5 when the restarts are spent (the message says so, with the latest
 *        checkpoint's iteration); 127 when the program cannot be started; 128 + N for a job
 *        killed by signal N. Must not be NULL.
 * @retval PTDP_SUCCESS the job ran (see @p exit_code).
 * @retval PTDP_ERR_INVALID_ARGUMENT argc < 1, NULL argv or an entry of it, an empty program,
 *         max_restarts < 0, a negative or non-finite back-off, max_restarts > 0 without `--save`
 *         in @p argv, NULL @p exit_code; nothing is launched.
 * @par Thread safety
 * One supervisor per process: it installs SIGINT and SIGTERM handlers while it runs (restored
 * afterwards) and forks.
 */
PTDP_API ptdp_status ptdp_train_supervise(int32_t argc, const char* const* argv, const char* launcher,
                                          int32_t max_restarts, double backoff_seconds, int32_t* exit_code);

/**
 * @brief The model FLOPs of one training iteration over a global batch: Megatron-LM's
 *        num_floating_point_operations (the paper's formula, Narayanan et al. 2021, with the
 *        grouped-query and SwiGLU terms) for the forward and backward,
 *        model_flops = 12 B s l h^2 ((1 + g/a + s/h) a dh / h + (ffn/h)(3/2 with SwiGLU) +
 *        V/(2 l h)), which is 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) for the GPT;
 *        executed_flops adds full recomputation's extra forward of the layers (16 instead of 12
 *        for the layer terms; 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) for the GPT) when
 *        options->recompute_granularity is FULL (else it equals model_flops). V is the
 *        vocabulary before padding (the paper's; Megatron counts the padded one).
 * @param options The model; NULL for the defaults.
 * @param global_batch_size B, > 0.
 * @param[out] model_flops May be NULL.
 * @param[out] executed_flops May be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT bad @p options or B <= 0.
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_gpt_flops(const ptdp_gpt_options* options, int64_t global_batch_size, double* model_flops,
                                    double* executed_flops);

/**
 * @brief One device's dense peak FLOP/s for a model stored in @p precision, what the MFU is
 *        measured against: a GPU's datasheet figure (H100 and H200 SXM: 989e12 for bf16/f16,
 *        67e12 for f32), or on the CPU the f32 GEMM rate measured now through the CPU engine
 *        (512^3 GEMMs for about 0.2 s, the best call; ranks sharing a node should measure at the
 *        same time).
 * @param device ::PTDP_DEVICE_CPU or ::PTDP_DEVICE_CUDA.
 * @param device_index The GPU ordinal (0 for the CPU).
 * @param precision ::PTDP_DTYPE_F32, ::PTDP_DTYPE_BF16 or ::PTDP_DTYPE_F16.
 * @param[out] flops Receives the peak; 0 for a GPU missing from ptdp's table. Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT a bad device, ordinal or precision, or NULL @p flops.
 * @retval PTDP_ERR_UNSUPPORTED ::PTDP_DEVICE_CUDA in a build without CUDA.
 * @par Thread safety
 * Thread-safe; the CPU measurement uses the engine's threads.
 */
PTDP_API ptdp_status ptdp_device_peak_flops(ptdp_device device, int32_t device_index, ptdp_dtype precision,
                                            double* flops);

/** @} */

/* ---------------------------------------------------------------------------------------- */
/** @name GPT training samples
 *  Samples of seq_length + 1 tokens (inputs and their next tokens) from a token stream, built
 *  as Megatron's GPTDataset builds them: the documents of a split repeated over as many epochs
 *  as the samples asked for need, shuffled from the seed (Fisher-Yates over Philox draws) and
 *  concatenated; cut into samples of s + 1 tokens that share their boundary token; the samples
 *  shuffled by a second permutation from the seed. Splits are document ranges (Megatron's
 *  `--split` rule). A text file is read as bytes, one document per paragraph (runs of non-blank
 *  lines, each ending in a blank line); mock data is 1000 documents of s/2 to 4s tokens, drawn
 *  from the seed.
 *  The same (source, seed, split) gives the same samples on every rank and every layout, so
 *  a global batch is the same set of samples whatever t, p and d are; each data-parallel rank
 *  asks for its share only.
 *  @{ */

/** Opaque handle to a sample source. */
typedef struct ptdp_gpt_data_impl* ptdp_gpt_data;

/** The three parts of a data set. */
typedef enum ptdp_data_split PTDP_ENUM_INT {
  PTDP_SPLIT_TRAIN = 0, /**< Training samples. */
  PTDP_SPLIT_VALID = 1, /**< Validation samples. */
  PTDP_SPLIT_TEST = 2   /**< Test samples. */
} ptdp_data_split;

/** Options of ptdp_gpt_data_create(). Initialise with ptdp_gpt_data_options_init(). */
typedef struct ptdp_gpt_data_options {
  size_t struct_size;          /**< Set by ptdp_gpt_data_options_init(). */
  ptdp_data_source source;     /**< Default ::PTDP_DATA_MOCK. */
  const char* path;            /**< The text file; or the indexed data set's prefix, or Megatron's
                                    `--data-path` list of several: "W1 PREFIX1 W2 PREFIX2 ..."
                                    (weights) or "PREFIX1 PREFIX2 ..." (weighed by their sizes),
                                    words separated by spaces, each data set split by `split`
                                    and each split blended (Megatron's BlendedDataset). NULL for
                                    mock. */
  const char* split;           /**< Megatron's `--split` weights, "969,30,1" (default) or "98/2/0". */
  int32_t seq_length;          /**< s; samples hold s + 1 tokens. Default 32. */
  int32_t vocab_size;          /**< Every token must be below it. Default 256. */
  uint64_t seed;               /**< Document and sample shuffling (and mock tokens). Default 1234. */
  int64_t num_samples[3];      /**< Samples wanted per split (train, valid, test); the documents
                                    are repeated over as many epochs as that takes. 0: one epoch
                                    (of each blended data set, every sample once). */
  const char* train_data_path; /**< `--train-data-path`: a prefix or Megatron's list, as `path`,
                                    whose data sets make the training split whole. When any of
                                    the three is set (source ::PTDP_DATA_INDEXED), `path` and
                                    `split` are not used and a split without one is empty. NULL:
                                    not set (default). */
  const char* valid_data_path; /**< `--valid-data-path`, as train_data_path. */
  const char* test_data_path;  /**< `--test-data-path`, as train_data_path. */
} ptdp_gpt_data_options;

/**
 * @brief Fills @p options with the defaults and sets its struct_size.
 * @param[out] options Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p options is NULL.
 */
PTDP_API ptdp_status ptdp_gpt_data_options_init(ptdp_gpt_data_options* options);

/**
 * @brief The data options a training configuration implies: its source, path, split, seed,
 *        sequence length and vocabulary, and the samples its iterations will read
 *        (train: train-iters * B; valid: (train-iters / eval-interval + 1) * eval-iters * B;
 *        test: eval-iters * B).
 * @param config A live configuration.
 * @param[out] options Receives them, struct_size set; strings point into @p config.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle or NULL @p options.
 */
PTDP_API ptdp_status ptdp_train_config_data_options(ptdp_train_config config, ptdp_gpt_data_options* options);

/**
 * @brief Opens a sample source and builds its document, sample and shuffle indices.
 * @param options NULL for the defaults (mock data).
 * @param[out] out Receives the handle; must not be NULL. Unchanged on error.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT bad options (named), a malformed split string, a token id
 *         >= vocab_size (naming the file, document and position), or a split with too few
 *         tokens for one sample (naming the split, its tokens and s + 1).
 * @retval PTDP_ERR_IO a missing, unreadable or malformed file (named).
 * @par Thread safety
 * No communication; every rank builds the same indices.
 */
PTDP_API ptdp_status ptdp_gpt_data_create(const ptdp_gpt_data_options* options, ptdp_gpt_data* out);

/**
 * @brief Releases a sample source. NULL is accepted and ignored.
 * @param data A handle or NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT not a live handle.
 */
PTDP_API ptdp_status ptdp_gpt_data_destroy(ptdp_gpt_data data);

/**
 * @brief Samples available in a split (at least the number asked for, unless the split is empty).
 * @param data A live handle.
 * @param split Which split.
 * @param[out] count Receives the number; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, bad @p split, NULL @p count.
 */
PTDP_API ptdp_status ptdp_gpt_data_num_samples(ptdp_gpt_data data, ptdp_data_split split, int64_t* count);

/**
 * @brief Copies samples [first, first + count) of a split (indices wrap around the split's
 *        samples): tokens[i] = the sample's first s tokens, labels[i] = its last s, both
 *        row-major [count, s].
 * @param data A live handle.
 * @param split Which split; it must have samples.
 * @param first Index of the first sample, >= 0.
 * @param count Number of samples, > 0.
 * @param[out] tokens Room for count * s ids.
 * @param[out] labels Room for count * s ids.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, an empty split, negative @p first,
 *         non-positive @p count, NULL outputs; a token >= vocab_size in an indexed data set
 *         (found when its sample is read; the message names PREFIX.bin, the document and the
 *         position). The outputs are unchanged on error.
 * @retval PTDP_ERR_IO reading PREFIX.bin failed (named).
 * @par Thread safety
 * Several threads may read one source at once.
 */
PTDP_API ptdp_status ptdp_gpt_data_batch(ptdp_gpt_data data, ptdp_data_split split, int64_t first, int32_t count,
                                         int32_t* tokens, int32_t* labels);

/** @} */

/* ---------------------------------------------------------------------------------------- */
/** @name Evaluation, logits and generation
 *  @{ */

/**
 * @brief Forward-only evaluation of a batch: the mean loss of the replica's m microbatches
 *        through the pipeline (dropout off, nothing kept, gradients untouched), averaged over
 *        the data-parallel group.
 * @param model A live model.
 * @param tokens This replica's m * b samples, [m * b, seq_length] row-major.
 * @param labels The same shape; in [0, V), or ::PTDP_IGNORE_INDEX.
 * @param micro_batch_size b, > 0.
 * @param num_microbatches m, > 0.
 * @param options NULL for the defaults; its masks ([m * b, seq_length], read by every stage)
 *        give positions and documents. Its trace_path must be NULL (the evaluation is not
 *        traced); scatter_gather has no effect (whole tensors cross the stage boundaries).
 * @param[out] loss Receives the mean of the microbatches' masked mean losses over the global
 *        batch on every rank; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, NULL data, b or m <= 0, ids outside the
 *         vocabulary, bad options (named), or a position id or document start outside its range.
 * @retval PTDP_ERR_TIMEOUT a rank did not take part in time.
 * @par Thread safety
 * Collective over the world of the model's groups.
 * @par Since 0.4.0
 * @p options is new, as for ptdp_model_forward_backward().
 */
PTDP_API ptdp_status ptdp_model_evaluate(ptdp_model model, const int32_t* tokens, const int32_t* labels,
                                         int32_t micro_batch_size, int32_t num_microbatches,
                                         const ptdp_pipeline_options* options, float* loss);

/**
 * @brief Next-token logits: forward of @p batch sequences of seq_length tokens (dropout off)
 *        and the logits of the true vocabulary at every position, gathered from the tensor ranks.
 *        Position i depends on tokens 0..i only (causal), so a shorter context may be padded
 *        with any token after its end.
 * @param model A live model that is not split into pipeline stages.
 * @param tokens [batch, seq_length] row-major.
 * @param batch > 0.
 * @param[out] logits Room for batch * seq_length * vocab_size floats, row-major [batch, s, V].
 * @param bytes Size of @p logits in bytes; at least that.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, NULL pointers, @p batch <= 0, ids outside the
 *         vocabulary, @p bytes too small, or a model whose layout has context_parallel_size > 1
 *         (each rank holds s / c positions).
 * @retval PTDP_ERR_UNSUPPORTED the model is split into pipeline stages.
 * @par Thread safety
 * Collective over the tensor group; all its ranks pass the same tokens.
 */
PTDP_API ptdp_status ptdp_model_logits(ptdp_model model, const int32_t* tokens, int32_t batch, float* logits,
                                       size_t bytes);

/** Options of ptdp_model_generate(). Initialise with ptdp_generate_options_init(). */
typedef struct ptdp_generate_options {
  size_t struct_size;  /**< Set by ptdp_generate_options_init(). */
  int32_t max_new_tokens; /**< Tokens to add; default 64. */
  int32_t top_k;       /**< Sample among the k most likely tokens; 0: all; 1: greedy. Default 0. */
  float temperature;   /**< Logits are divided by it; > 0. Default 1. */
  uint64_t seed;       /**< Sampling seed; default 1234. */
  /* Added after 0.2.0 (zero: the behaviour a program built against 0.2 gets). */
  int32_t no_kv_cache; /**< 0 (default): every layer's keys and values are cached, so each new
                            token costs one token's forward pass (the window is encoded again
                            only when it must slide); 1: the whole window is recomputed for every
                            token. Both draw the same tokens. */
} ptdp_generate_options;

/**
 * @brief Fills @p options with the defaults and sets its struct_size.
 * @param[out] options Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p options is NULL.
 */
PTDP_API ptdp_status ptdp_generate_options_init(ptdp_generate_options* options);

/**
 * @brief Continues a prompt: repeatedly takes the logits at the last position of the last
 *        seq_length tokens and samples the next token (temperature, then top-k; Philox draws from
 *        the seed).
 * @param model A live model not split into pipeline stages.
 * @param prompt @p prompt_length token ids, >= 1 of them.
 * @param prompt_length > 0.
 * @param options NULL for the defaults.
 * @param[out] out Room for @p capacity ids; receives the new tokens.
 * @param capacity At least max_new_tokens.
 * @param[out] count Receives the number of new tokens; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT as ptdp_model_logits(), bad options, @p capacity too small.
 * @retval PTDP_ERR_UNSUPPORTED the model is split into pipeline stages.
 * @par Thread safety
 * Collective over the tensor group; all its ranks pass the same prompt and options.
 */
PTDP_API ptdp_status ptdp_model_generate(ptdp_model model, const int32_t* prompt, int32_t prompt_length,
                                         const ptdp_generate_options* options, int32_t* out, int32_t capacity,
                                         int32_t* count);

/** @} */

/* ---------------------------------------------------------------------------------------- */
/** @name Loss masks and documents
 *  Supervised fine-tuning and packed documents, with the semantics of PyTorch, Hugging Face and
 *  Megatron-LM:
 *  - A label of ::PTDP_IGNORE_INDEX (-100, PyTorch's and Hugging Face's ignore_index) takes no
 *    part in the loss, so prompt tokens can be masked. Every function that takes labels accepts
 *    it (ptdp_model_forward_backward(), ptdp_model_forward(),
 *    ptdp_model_pipeline_forward_backward(), ptdp_train_iteration() and ptdp_model_evaluate());
 *    any other label outside [0, vocab_size) is still refused.
 *  - The loss of a microbatch is Megatron's masked mean: sum(loss * mask) / sum(mask) over its
 *    b * seq_length tokens, mask 0 where the label is ignored; a microbatch with no counted
 *    token has loss 0 and adds no gradient (never NaN). A batch of m microbatches averages
 *    their losses with equal weights (gradient scale 1 / m each), and data-parallel replicas
 *    average theirs (as Megatron does without --calculate-per-token-loss): the loss and the
 *    gradients of a global batch depend on how it is cut into microbatches, never on the
 *    layout (t, p, v, d), so every layout equals the serial run of the same microbatches.
 *  - ptdp_batch_masks, given to those functions as ptdp_pipeline_options::masks, gives each
 *    token's position id (read by learned position embeddings and by RoPE) and the first
 *    position of its document: a token attends only to the tokens of its own document (in the
 *    fused attention kernels, which skip what lies outside, and in the unfused path, where
 *    those probabilities are exactly 0). Dropout masks are unchanged.
 *  - ptdp_eod_masks() derives the ignored labels, positions and document starts from an
 *    end-of-document token, as Megatron's --eod-mask-loss, --reset-position-ids and
 *    --reset-attention-mask do (ptdp-train's flags of those names, with --eod-token-id).
 *  - Until 0.4.0 the masks were an argument of a `_masked` twin of each of the five functions.
 *    The twins remain, deprecated, as wrappers that put their masks into the options; they
 *    refuse options that hold masks of their own. The five take the masks in their options
 *    now, so that each operation is one function whatever it is given (ptdp_pipeline_options
 *    says why one options struct serves them all).
 *  @{ */

/** Label values with a meaning of their own. */
typedef enum ptdp_label_value PTDP_ENUM_INT {
  PTDP_IGNORE_INDEX = -100 /**< Takes no part in the loss (PyTorch's ignore_index). */
} ptdp_label_value;

/** Which of Megatron's end-of-document rules ptdp_eod_masks() applies (bits, OR them). */
typedef enum ptdp_eod_flags PTDP_ENUM_INT {
  PTDP_EOD_MASK_LOSS = 1,            /**< --eod-mask-loss: ignore the label of every position
                                          whose token is the end-of-document token. */
  PTDP_EOD_RESET_POSITION_IDS = 2,   /**< --reset-position-ids: positions restart after it. */
  PTDP_EOD_RESET_ATTENTION_MASK = 4  /**< --reset-attention-mask: no attention across it. */
} ptdp_eod_flags;

/**
 * @brief Megatron's _get_ltor_masks_and_position_ids: labels, position ids and document starts
 *        of @p count samples from their end-of-document tokens. A document ends with its
 *        end-of-document token (which belongs to it); the next token starts the next document.
 *        Each sample is taken on its own.
 * @param tokens [count, seq_length] row-major.
 * @param count Samples, >= 0.
 * @param seq_length Tokens per sample, > 0.
 * @param eod_token_id The end-of-document token.
 * @param flags A combination of ::ptdp_eod_flags naming what to fill.
 * @param[in,out] labels Room for [count, seq_length]; with ::PTDP_EOD_MASK_LOSS each label whose
 *        token is @p eod_token_id becomes ::PTDP_IGNORE_INDEX, the others are left as they are.
 *        May be NULL without that flag.
 * @param[out] position_ids Room for [count, seq_length], filled with
 *        ::PTDP_EOD_RESET_POSITION_IDS: each token's position within its document. May be NULL
 *        without that flag (ignored then).
 * @param[out] document_starts Room for [count, seq_length], filled with
 *        ::PTDP_EOD_RESET_ATTENTION_MASK: the first position of each token's document (one past
 *        the last end-of-document token before it, or 0), ptdp_batch_masks::document_starts's
 *        form. May be NULL without that flag (ignored then).
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL @p tokens, negative @p count, @p seq_length <= 0,
 *         unknown bits in @p flags, or a NULL output that a flag asks for (each named). Nothing
 *         is written.
 * @par Thread safety
 * Thread-safe; no communication.
 */
PTDP_API ptdp_status ptdp_eod_masks(const int32_t* tokens, int64_t count, int32_t seq_length, int32_t eod_token_id,
                                    int32_t flags, int32_t* labels, int32_t* position_ids,
                                    int32_t* document_starts);

/**
 * @brief Deprecated since 0.4.0: ptdp_model_forward_backward() with options whose masks are
 *        @p masks.
 * @param model A live model that is not split into pipeline stages.
 * @param tokens [b, seq_length] row-major, in [0, V).
 * @param labels The same shape: in [0, V), or ::PTDP_IGNORE_INDEX.
 * @param masks Position ids and document starts ([b, seq_length]); NULL for the defaults.
 * @param micro_batch_size b, > 0.
 * @param iteration Optimizer step; keys the dropout masks.
 * @param microbatch Index of the microbatch within the iteration; keys the dropout masks.
 * @param grad_scale Factor on the gradients of the masked mean loss.
 * @param[out] loss Receives the masked mean loss; may be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT as ptdp_model_forward_backward(), a bad @p masks
 *         struct_size, or a position id or document start outside its range (named with its
 *         index). Nothing is changed.
 * @retval PTDP_ERR_UNSUPPORTED the model is split into pipeline stages.
 * @retval PTDP_ERR_TIMEOUT a tensor-parallel peer did not take part in time.
 * @par Thread safety
 * Collective over the tensor group; all ranks pass the same tokens, labels and masks.
 * @deprecated Use ptdp_model_forward_backward() with ptdp_pipeline_options::masks.
 */
PTDP_API PTDP_DEPRECATED("ptdp_pipeline_options::masks") ptdp_status ptdp_model_forward_backward_masked(
    ptdp_model model, const int32_t* tokens, const int32_t* labels, const ptdp_batch_masks* masks,
    int32_t micro_batch_size, int64_t iteration, int64_t microbatch, float grad_scale, float* loss);

/**
 * @brief Deprecated since 0.4.0: ptdp_model_forward() with options whose masks are @p masks.
 * @param model A live model that is not split into pipeline stages.
 * @param tokens As in ptdp_model_forward_backward_masked().
 * @param labels As there.
 * @param masks As there.
 * @param micro_batch_size b, > 0.
 * @param iteration Keys the dropout masks when @p training is 1.
 * @param microbatch Keys the dropout masks when @p training is 1.
 * @param training 1: dropout on; 0: off.
 * @param[out] loss Receives the masked mean loss; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT as ptdp_model_forward_backward_masked(), or NULL @p loss.
 * @retval PTDP_ERR_UNSUPPORTED the model is split into pipeline stages.
 * @retval PTDP_ERR_TIMEOUT a tensor-parallel peer did not take part in time.
 * @par Thread safety
 * Collective over the tensor group.
 * @deprecated Use ptdp_model_forward() with ptdp_pipeline_options::masks.
 */
PTDP_API PTDP_DEPRECATED("ptdp_pipeline_options::masks") ptdp_status ptdp_model_forward_masked(
    ptdp_model model, const int32_t* tokens, const int32_t* labels, const ptdp_batch_masks* masks,
    int32_t micro_batch_size, int64_t iteration, int64_t microbatch, int32_t training, float* loss);

/**
 * @brief Deprecated since 0.4.0: ptdp_model_pipeline_forward_backward() with @p options' masks
 *        set to @p masks.
 * @param model A live model; its groups' pipeline and virtual sizes must match the schedule's.
 * @param schedule A schedule for (p, m, v).
 * @param tokens [m * b, seq_length] row-major, the same on every rank of a pipeline.
 * @param labels The same shape: in [0, V), or ::PTDP_IGNORE_INDEX.
 * @param masks Position ids and document starts ([m * b, seq_length], read by every stage);
 *        NULL for the defaults.
 * @param micro_batch_size b, > 0.
 * @param iteration Optimizer step; keys the dropout masks.
 * @param options NULL for the defaults; its own masks must be NULL.
 * @param[out] loss Receives the mean of the m microbatches' masked mean losses on every rank;
 *        may be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT as ptdp_model_pipeline_forward_backward(), a bad @p masks
 *         struct_size, a position id or document start outside its range, or masks given both
 *         as @p masks and in @p options.
 * @retval PTDP_ERR_TIMEOUT a peer stage did not take part in time.
 * @retval PTDP_ERR_IO the trace could not be written.
 * @par Thread safety
 * Collective over the model-parallel group (and the world when tracing).
 * @deprecated Use ptdp_model_pipeline_forward_backward() with ptdp_pipeline_options::masks.
 */
PTDP_API PTDP_DEPRECATED("ptdp_pipeline_options::masks") ptdp_status ptdp_model_pipeline_forward_backward_masked(
    ptdp_model model, ptdp_schedule schedule, const int32_t* tokens, const int32_t* labels,
    const ptdp_batch_masks* masks, int32_t micro_batch_size, int64_t iteration, const ptdp_pipeline_options* options,
    float* loss);

/**
 * @brief Deprecated since 0.4.0: ptdp_train_iteration() with @p options' masks set to
 *        @p masks.
 * @param model A live model.
 * @param optimizer An optimizer created for @p model.
 * @param schedule A schedule for the model's (p, v) and m microbatches.
 * @param tokens This replica's m * b samples, [m * b, seq_length] row-major.
 * @param labels The same shape: in [0, V), or ::PTDP_IGNORE_INDEX.
 * @param masks This replica's position ids and document starts ([m * b, seq_length]); NULL for
 *        the defaults.
 * @param micro_batch_size b, > 0.
 * @param iteration The step number, from 0.
 * @param options NULL for the defaults; its own masks must be NULL.
 * @param[out] result Receives the loss (the mean of every replica's microbatches' masked mean
 *             losses), grad norm, lr, loss scale and skip; may be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT as ptdp_train_iteration(), a bad @p masks struct_size, a
 *         position id or document start outside its range, or masks given both as @p masks and
 *         in @p options.
 * @retval PTDP_ERR_TIMEOUT a rank did not take part in time.
 * @par Thread safety
 * Collective over the world of the groups.
 * @deprecated Use ptdp_train_iteration() with ptdp_pipeline_options::masks.
 */
PTDP_API PTDP_DEPRECATED("ptdp_pipeline_options::masks") ptdp_status ptdp_train_iteration_masked(
    ptdp_model model, ptdp_optimizer optimizer, ptdp_schedule schedule, const int32_t* tokens, const int32_t* labels,
    const ptdp_batch_masks* masks, int32_t micro_batch_size, int64_t iteration, const ptdp_pipeline_options* options,
    ptdp_iteration_result* result);

/**
 * @brief Deprecated since 0.4.0: ptdp_model_evaluate() with options whose masks are @p masks.
 * @param model A live model.
 * @param tokens This replica's m * b samples, [m * b, seq_length] row-major.
 * @param labels The same shape: in [0, V), or ::PTDP_IGNORE_INDEX.
 * @param masks Position ids and document starts ([m * b, seq_length]); NULL for the defaults.
 * @param micro_batch_size b, > 0.
 * @param num_microbatches m, > 0.
 * @param[out] loss Receives the mean of the microbatches' masked mean losses over the global
 *        batch on every rank; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT as ptdp_model_evaluate(), a bad @p masks struct_size, or a
 *         position id or document start outside its range.
 * @retval PTDP_ERR_TIMEOUT a rank did not take part in time.
 * @par Thread safety
 * Collective over the world of the model's groups.
 * @deprecated Use ptdp_model_evaluate() with ptdp_pipeline_options::masks.
 */
PTDP_API PTDP_DEPRECATED("ptdp_pipeline_options::masks") ptdp_status ptdp_model_evaluate_masked(
    ptdp_model model, const int32_t* tokens, const int32_t* labels, const ptdp_batch_masks* masks,
    int32_t micro_batch_size, int32_t num_microbatches, float* loss);

/** @} */

/* ---------------------------------------------------------------------------------------- */
/** @name Checkpoints
 *  A checkpoint is a directory `DIR/iter_NNNNNNN/` (Megatron's naming) holding one safetensors
 *  file per model-parallel shard, `model_tpTT_ppPP.safetensors` (parameters, and the optimizer
 *  state when saved with an optimizer: Adam's moments or SGD's momentum, gathered over the
 *  data-parallel group), `metadata.json` (every tensor's name, global shape, partition
 *  dimension and the slices each file holds; the parallel layout; the model config; iteration,
 *  consumed samples, loss-scaler and optimizer counters; the training configuration when
 *  given) and `manifest.sha256` (the SHA-256 of every other file, `sha256sum -c` format). It is
 *  written into `DIR/iter_NNNNNNN.tmp`, every file synced, then renamed; then
 *  `DIR/latest_checkpointed_iteration.txt` is replaced, last, so an interrupted save leaves the
 *  previous checkpoint the latest. Loading verifies every file it reads against the manifest,
 *  and re-shards: any t, p, d and v can load a checkpoint saved under any other.
 *  @{ */

/** What a checkpoint records besides tensors. Initialise with ptdp_checkpoint_state_init(). */
typedef struct ptdp_checkpoint_state {
  size_t struct_size;               /**< Set by ptdp_checkpoint_state_init(). */
  int64_t iteration;                /**< Iterations completed. */
  int64_t consumed_train_samples;   /**< Training samples read so far (the data position). */
  int64_t consumed_valid_samples;   /**< Validation samples read so far. */
} ptdp_checkpoint_state;

/**
 * @brief Zeroes @p state and sets its struct_size.
 * @param[out] state Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p state is NULL.
 */
PTDP_API ptdp_status ptdp_checkpoint_state_init(ptdp_checkpoint_state* state);

/**
 * @brief Saves a checkpoint of @p model (and @p optimizer) as `DIR/iter_NNNNNNN` and makes it
 *        the latest.
 * @param directory DIR; created if missing.
 * @param model A live model.
 * @param optimizer The model's optimizer, or NULL to save the parameters only.
 * @param config The training configuration to record, or NULL.
 * @param state Iteration and data position; must not be NULL; iteration >= 0.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handles, an optimizer of another model, NULL @p state.
 * @retval PTDP_ERR_IO a file could not be written or synced (named); reported on every rank,
 *         the partial `iter_NNNNNNN.tmp` directory is removed, and the previous latest
 *         checkpoint stays the latest.
 * @retval PTDP_ERR_INVALID_STATE another process's run holds DIR's lock `DIR/ptdp.lock`; the
 *         message names its host, process id and start time. Nothing is written. World rank 0
 *         takes the lock for the save's duration, or shares it with a trainer of this process
 *         that holds it.
 * @retval PTDP_ERR_TIMEOUT a rank did not take part in time.
 * @par Thread safety
 * Collective over the world of the model's groups.
 */
PTDP_API ptdp_status ptdp_checkpoint_save(const char* directory, ptdp_model model, ptdp_optimizer optimizer,
                                          ptdp_train_config config, const ptdp_checkpoint_state* state);

/**
 * @brief Loads the latest checkpoint of DIR (as named by latest_checkpointed_iteration.txt)
 *        into @p model (and @p optimizer), re-sharding to their layout.
 * @param directory DIR.
 * @param model A live model whose config matches the checkpoint's (layers, hidden size, heads,
 *        ffn, vocabulary, sequence and position lengths).
 * @param optimizer The model's optimizer, or NULL to load the parameters only. Its state must
 *        be in the checkpoint (saved with an optimizer of the same kind).
 * @param[out] state Receives iteration and data position; may be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handles; a model config that differs from the
 *         checkpoint's (naming the field and both values); an optimizer state that is missing
 *         or of another kind.
 * @retval PTDP_ERR_IO no checkpoint in DIR, or a missing, truncated or corrupted file (named,
 *         with the expected and found SHA-256 or size), or a file that is no regular file; or
 *         metadata.json that makes no sense although its hash matches (an iteration other than
 *         its directory's, negative counters, an unknown optimizer kind or state, a loss scale
 *         that is not finite and > 0, a layout that cannot exist or whose shards are not the
 *         listed files; named). Reported on every rank; the model and optimizer are unchanged.
 * @retval PTDP_ERR_TIMEOUT a rank did not take part in time.
 * @par Thread safety
 * Collective over the world of the model's groups.
 */
PTDP_API ptdp_status ptdp_checkpoint_load(const char* directory, ptdp_model model, ptdp_optimizer optimizer,
                                          ptdp_checkpoint_state* state);

/**
 * @brief The model options a checkpoint was saved with (to build a model that loads it, e.g.
 *        for generation), and its iteration.
 * @param directory DIR (its latest checkpoint).
 * @param[out] options Receives the model options, struct_size set; must not be NULL.
 * @param[out] iteration Receives the checkpoint's iteration; may be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL arguments.
 * @retval PTDP_ERR_IO no checkpoint, or its metadata.json missing or malformed (named).
 */
PTDP_API ptdp_status ptdp_checkpoint_read_options(const char* directory, ptdp_gpt_options* options,
                                                  int64_t* iteration);

/** @} */

/* ---------------------------------------------------------------------------------------- */
/** @name Hugging Face checkpoints
 *  Import and export of Hugging Face `GPT2LMHeadModel`, `LlamaForCausalLM`,
 *  `MistralForCausalLM` and `Qwen2ForCausalLM` checkpoints, and of the mixtures of experts
 *  `MixtralForCausalLM`, `Qwen2MoeForCausalLM` and `Qwen3MoeForCausalLM` with their experts
 *  tensor by tensor as on the hub (`...experts.{J}.w1` / `gate_proj`, ...): a directory with `config.json` and
 *  `model.safetensors`, or the shards that `model.safetensors.index.json` lists; tensors stored
 *  as F32, BF16 or F16; tied or untied heads; names with or without the base model's
 *  `transformer.` / `model.` prefix. Read the options with ptdp_hf_read_options(), build a model
 *  at any (t, p, d, v, e, etp) with ptdp_model_create(), set its weights with ptdp_hf_load(); save it as
 *  a ptdp checkpoint (ptdp_checkpoint_save()) to train from it (`ptdp-train --finetune --load`),
 *  and write any model back with ptdp_hf_save(). `ptdp-convert` does both on the command line.
 *
 *  The layouts are converted, not reinterpreted: GPT-2's Conv1D weights ([in, out]) are
 *  transposed to ptdp's [out, in]; `c_attn` (q | k | v) and Llama's `q_proj`, `k_proj`,
 *  `v_proj` become `linear_qkv` with rows grouped per query group; `gate_proj` and `up_proj`
 *  become `linear_fc1` [gate; up]; the vocabulary is padded with zero rows on import and cut on
 *  export. RoPE needs no permutation: Hugging Face's Llama rotates halves of each head
 *  (rotate-half), as ptdp does. A mixture of experts' `w1`/`gate_proj` and `w3`/`up_proj`
 *  of expert J become `linear_fc1.weight{J}` [gate; up], its `w2`/`down_proj`
 *  `linear_fc2.weight{J}`, the router `gate` `mlp.router.weight`, Qwen2-MoE's shared expert and
 *  its gate `mlp.shared_experts.*`. A model imported and exported again gives the same tensors,
 *  bit for bit, in the dtype they were stored in, and the same files: a mixture of experts is
 *  sharded as transformers 5 shards it (each layer's experts of one projection kept together).
 *  @{ */

/** A Hugging Face model class (config.json's `model_type`). */
typedef enum ptdp_hf_architecture PTDP_ENUM_INT {
  PTDP_HF_ARCHITECTURE_AUTO = 0,     /**< On export: the class the model's settings call for
                                          (GPT-2 for LayerNorm with learned positions, Qwen2 for a
                                          qkv bias alone, Llama otherwise; for a mixture of
                                          experts Qwen3-MoE with q/k norms, Qwen2-MoE with shared
                                          experts, Mixtral otherwise; with multi-latent attention
                                          DeepSeek-V2 for a softmax router, DeepSeek-V3
                                          otherwise), or the base config's class when the model
                                          fits it. */
  PTDP_HF_ARCHITECTURE_GPT2 = 1,     /**< `gpt2`, GPT2LMHeadModel. */
  PTDP_HF_ARCHITECTURE_LLAMA = 2,    /**< `llama`, LlamaForCausalLM. */
  PTDP_HF_ARCHITECTURE_MISTRAL = 3,  /**< `mistral`, MistralForCausalLM. */
  PTDP_HF_ARCHITECTURE_QWEN2 = 4,    /**< `qwen2`, Qwen2ForCausalLM. */
  PTDP_HF_ARCHITECTURE_MIXTRAL = 5,  /**< `mixtral`, MixtralForCausalLM (mixture of experts). */
  PTDP_HF_ARCHITECTURE_QWEN3_MOE = 6, /**< `qwen3_moe`, Qwen3MoeForCausalLM (mixture of experts,
                                          q/k norms). */
  PTDP_HF_ARCHITECTURE_QWEN2_MOE = 7, /**< `qwen2_moe`, Qwen2MoeForCausalLM (mixture of experts
                                          with a gated shared expert). */
  PTDP_HF_ARCHITECTURE_OLMOE = 8,    /**< `olmoe`, OlmoeForCausalLM (mixture of experts, q/k
                                          norms over all heads). */
  PTDP_HF_ARCHITECTURE_DEEPSEEK_V2 = 9, /**< `deepseek_v2`, DeepseekV2ForCausalLM: multi-latent
                                          attention (with or without the query latent), the first
                                          first_k_dense_replace layers dense, the others MoE with
                                          shared experts and a softmax router (greedy or
                                          group_limited_greedy); RoPE rows stored interleaved. */
  PTDP_HF_ARCHITECTURE_DEEPSEEK_V3 = 10 /**< `deepseek_v3`, DeepseekV3ForCausalLM: as DeepSeek-V2
                                          with the sigmoid router, its expert bias
                                          (e_score_correction_bias) and top-2 group scores; RoPE
                                          rows interleaved as config.json's rope_interleave says.
                                          Its multi-token prediction layers (the hub's
                                          model.layers.{L + k}.*) become mtp_num_layers where the
                                          checkpoint holds them. */
} ptdp_hf_architecture;

/** Options of ptdp_hf_save(). Initialise with ptdp_hf_save_options_init(). */
typedef struct ptdp_hf_save_options {
  size_t struct_size;                /**< Set by ptdp_hf_save_options_init(). */
  ptdp_dtype dtype;                  /**< Storage type of the tensors: ::PTDP_DTYPE_F32 (default),
                                          ::PTDP_DTYPE_BF16 or ::PTDP_DTYPE_F16 (rounded to
                                          nearest even). */
  int64_t max_shard_size;            /**< Bytes per file (Hugging Face's max_shard_size): above it
                                          the tensors are split over
                                          `model-0000k-of-0000n.safetensors` as Hugging Face
                                          splits them, with `model.safetensors.index.json`.
                                          0 (default): one `model.safetensors`. */
  ptdp_hf_architecture architecture; /**< The class to write; default ::PTDP_HF_ARCHITECTURE_AUTO. */
  const char* base_config;           /**< Path of a config.json (e.g. the imported model's) whose
                                          fields ptdp does not describe (token ids, ...) are kept;
                                          NULL (default): none. */
} ptdp_hf_save_options;

/**
 * @brief Fills @p options with the defaults and sets its struct_size.
 * @param[out] options Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p options is NULL.
 */
PTDP_API ptdp_status ptdp_hf_save_options_init(ptdp_hf_save_options* options);

/**
 * @brief The model options a Hugging Face `config.json` describes: shape, vocabulary, norms and
 *        their epsilon, RoPE base (transformers 4's rope_theta or 5's rope_parameters), Llama 3.1
 *        scaling and YaRN (rope_type, rotary_scaling_factor, mscale, ...), grouped-query attention, biases, q/k norms, tying, dropout, init std; for a
 *        mixture of experts num_experts, moe_router_topk, moe_ffn_hidden_size, moe_layer_freq
 *        (Qwen's decoder_sparse_step and mlp_only_layers), the shared expert and its gate,
 *        moe_router_pre_softmax (norm_topk_prob false) and the aux loss's coefficient
 *        (router_aux_loss_coef); for DeepSeek-V2/V3 multi-latent attention (q_lora_rank,
 *        kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim, v_head_dim), the routers' score
 *        function, expert bias, groups, group_score_topk and topk scaling, and mtp_num_layers
 *        where the checkpoint holds the MTP layers (docs/deepseek.md). A mixture of experts with t > 1 needs
 *        ptdp_parallel_options::sequence_parallel, as every MoE model; read the options before
 *        creating the groups. seq_length is the model's context (n_positions or
 *        max_position_embeddings), or its sliding window when that is shorter (within the window
 *        the result is the same); lower it as needed. The other fields take their defaults.
 * @param directory The Hugging Face directory.
 * @param[in,out] options Its struct_size must be set by the caller (ptdp_gpt_options_init()
 *        does); the library writes that many bytes at most and sets struct_size to what it
 *        wrote. Unchanged on error.
 * @param[out] architecture Receives the model's class; may be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL @p directory or @p options, a struct_size too small for
 *         the model, or a shape ptdp refuses (named).
 * @retval PTDP_ERR_IO config.json missing, not JSON, or a field missing or mistyped (named).
 * @retval PTDP_ERR_UNSUPPORTED a model ptdp does not compute (another model_type, an activation
 *         other than GPT-2's tanh GeLU or SiLU, rope_scaling other than llama3 or yarn, YaRN's
 *         attention_factor, Llama's
 *         attention_bias without mlp_bias, ...), named.
 * @par Thread safety
 * No communication.
 */
PTDP_API ptdp_status ptdp_hf_read_options(const char* directory, ptdp_gpt_options* options,
                                          ptdp_hf_architecture* architecture);

/**
 * @brief Sets every parameter of @p model from a Hugging Face checkpoint; each rank reads the
 *        tensors of the parameters it holds, in any layout (of a mixture of experts, only the
 *        experts of its expert-parallel rank, sliced over its expert-tensor-parallel rank).
 * @param directory The Hugging Face directory.
 * @param model A live model built from matching options (ptdp_hf_read_options(); the training
 *        settings such as dropout, seq_length, precision and the layout may differ).
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL @p directory, dead handle, or a model that differs
 *         from config.json in a field the tensors or the computation depend on (named with both
 *         values).
 * @retval PTDP_ERR_IO a missing, truncated or malformed file; a tensor missing, of another shape
 *         or of a non-float dtype; tensors the model does not have (named); a tied
 *         lm_head.weight that differs from the embedding.
 * @retval PTDP_ERR_UNSUPPORTED a config ptdp does not compute, as ptdp_hf_read_options().
 * @retval PTDP_ERR_TIMEOUT a rank did not take part in time.
 * @par Failures
 * Every failure is reported on every rank and leaves the model unchanged.
 * @par Thread safety
 * Collective over the world of the model's groups.
 */
PTDP_API ptdp_status ptdp_hf_load(const char* directory, ptdp_model model);

/**
 * @brief Writes @p model as a Hugging Face checkpoint: `config.json` and `model.safetensors` (or
 *        shards and `model.safetensors.index.json`, see ptdp_hf_save_options::max_shard_size),
 *        with the safetensors metadata `{"format": "pt"}` that transformers expects. The global
 *        tensors are gathered to world rank 0, which writes; files of an earlier save in the
 *        directory that this one replaces are removed.
 * @param directory Created if missing.
 * @param model A live model, in any layout.
 * @param options NULL for the defaults.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL @p directory, dead handle, bad options (a dtype other
 *         than F32/BF16/F16, a negative max_shard_size, an architecture out of range).
 * @retval PTDP_ERR_UNSUPPORTED the model cannot be written as the architecture asked for
 *         (the setting is named, e.g. q/k norms, or RMSNorm as GPT-2).
 * @retval PTDP_ERR_IO the directory or a file cannot be written, or base_config cannot be read.
 * @retval PTDP_ERR_TIMEOUT a rank did not take part in time.
 * @par Failures
 * Every failure is reported on every rank.
 * @par Thread safety
 * Collective over the world of the model's groups.
 */
PTDP_API ptdp_status ptdp_hf_save(const char* directory, ptdp_model model, const ptdp_hf_save_options* options);

/** @} */

/* ---------------------------------------------------------------------------------------- */
/** @name Memory
 *  What the CPU engine's tensors hold, for checking memory estimates (the planner's, the
 *  activation formulas) against a run.
 *  @{ */

/**
 * @brief Host memory of this process's CPU engine: bytes in use by tensors now and the most in
 *        use since the start or the last ptdp_memory_reset_peak() (the high-water mark that
 *        memory estimates are checked against).
 * @param[out] current Receives the bytes in use; may be NULL.
 * @param[out] peak Receives the high-water mark; may be NULL.
 * @retval PTDP_SUCCESS
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_memory_stats(size_t* current, size_t* peak);

/**
 * @brief Restarts the high-water mark of ptdp_memory_stats() at the bytes in use now.
 * @retval PTDP_SUCCESS
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_memory_reset_peak(void);

/**
 * @brief Bytes the CPU engine keeps in freed blocks for reuse.
 *
 * Freed tensor blocks of 1 MiB or more are kept under their size and handed to the next
 * request of that size, so that a training step does not pay a page fault per 4 KiB of its
 * activations each time (glibc would unmap them). The cache holds at most the high-water mark
 * of tensor bytes (at least 64 MiB); ptdp_memory_stats() does not count it, the process's
 * resident memory does. A request the system cannot meet releases the cache and retries.
 * @param[out] cached Receives the bytes held in cached blocks.
 * @retval PTDP_ERR_INVALID_ARGUMENT cached is NULL.
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_memory_cached(size_t* cached);

/**
 * @brief Returns the CPU engine's cached free blocks (see ptdp_memory_cached()) to the system,
 *        for a program that is done training and wants its resident memory back.
 *
 * Tensors still alive are untouched; later allocations cache again.
 * @param[out] released Receives the bytes returned; may be NULL.
 * @retval PTDP_SUCCESS
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_memory_release_cache(size_t* released);

/**
 * @brief Bytes of the CPU engine's host blocks that are advised for transparent huge pages.
 *
 * Blocks of 2 MiB or more (parameters, gradients, optimizer states, most activations) are
 * aligned to 2 MiB and advised to the kernel with madvise(MADV_HUGEPAGE), so that Linux's
 * default transparent-huge-page mode ("madvise") backs them with 2 MiB pages: fewer TLB misses
 * for the optimizer's streams and the GEMMs' packing (AdamW of GPT-2 small: 53 ms instead of
 * 73). The count covers blocks held by tensors and in the cache (ptdp_memory_cached()); whether
 * the kernel backs them with huge pages is its choice (AnonHugePages in /proc/self/smaps).
 * The environment variable PTDP_CPU_HUGEPAGES=0 (or off, false, no), read at the first large
 * allocation, turns the advice off, for a node whose kernel stalls compacting memory for huge
 * pages; a kernel without transparent huge pages refuses the advice, and ptdp stops asking.
 * Either way the count is 0.
 * @param[out] advised Receives the bytes held in advised blocks.
 * @retval PTDP_ERR_INVALID_ARGUMENT advised is NULL.
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_memory_huge_pages(size_t* advised);

/** @} */

/* ---------------------------------------------------------------------------------------- */
/** @name Planner
 *  The paper's performance model as a tool: given a GPT, a global batch and a cluster, search
 *  every layout (tensor size t, pipeline size p with v chunks per rank, data-parallel size d,
 *  microbatch size b, schedule, recomputation, distributed optimizer), estimate for each the
 *  parameters, the memory per GPU (weights, gradients, optimizer state, activations of the
 *  schedule's in-flight microbatches) and the time per iteration (compute from FLOPs and the
 *  achieved GEMM efficiency, tensor all-reduces, pipeline transfers, the bubble from the schedule
 *  simulator, the data-parallel reduction), and rank the layouts that fit by time. This is what
 *  `ptdp-plan` prints. No device and no communication are involved.
 *
 *  Activation memory follows Korthikanti et al. (2022) for 16-bit training, and for fp32 the
 *  tensors ptdp's CPU engine really keeps, so an fp32 estimate can be checked against
 *  ptdp_memory_stats() after training.
 *
 *  A plan handle is immutable: any number of threads may query the same plan at once; only
 *  ptdp_plan_destroy() must not race with other calls on it.
 *  @{ */

/** A cluster of identical GPU nodes as the planner models it. Fill it with
 *  ptdp_cluster_init(), ptdp_cluster_preset() or ptdp_cluster_load(), then change what differs.
 *  Rates and bandwidths are what the hardware achieves, not data-sheet peaks, except
 *  the peak FLOP/s. */
typedef struct ptdp_cluster {
  size_t struct_size;          /**< Set by the functions that fill the struct. */
  char name[32];               /**< Name shown in reports, NUL-terminated. */
  int32_t gpus_per_node;       /**< GPUs per node (8 for DGX). */
  int32_t nodes;               /**< Nodes; default 1. */
  double memory_bytes;         /**< Memory per GPU in bytes. */
  double memory_reserve_bytes; /**< Bytes per GPU never planned for (CUDA context, communication
                                    buffers, allocator fragmentation). */
  double peak_flops_16bit;     /**< Dense bf16/fp16 FLOP/s per GPU. */
  double peak_flops_fp32;      /**< FLOP/s per GPU for fp32 training (TF32 on NVIDIA GPUs). */
  double gemm_efficiency;      /**< Achieved fraction of peak for a transformer layer at large
                                    sizes, memory-bound kernels included; in (0, 1]. */
  double memory_bandwidth;     /**< Achieved device-memory bytes/s (the optimizer step). */
  double intra_node_bandwidth; /**< Collective bus bandwidth per GPU inside a node, bytes/s. */
  double intra_node_latency;   /**< Seconds per collective or transfer inside a node. */
  double inter_node_bandwidth; /**< Bandwidth per GPU between nodes, bytes/s. */
  double inter_node_latency;   /**< Seconds per collective or transfer between nodes. */
  /* Added after 0.2.0; a struct from before them gets them from the preset its name names, else
   * ptdp_cluster_init()'s. */
  double elementwise_bandwidth; /**< Bytes/s of a layer's memory-bound kernels (norms, activation,
                                    softmax, dropout, the loss) with a GEMM table; 0:
                                    memory_bandwidth (GPUs). */
  char gemm_table_16bit[256];  /**< GEMM efficiency by shape for 16-bit training, NUL-terminated:
                                    a built-in table ("a100-16bit", "h100-16bit") or the path of a
                                    JSON file written by `bench_kernels --gemm-table`; every GEMM
                                    of a layer is then priced at its own shape's efficiency and
                                    the memory-bound kernels at memory_bandwidth. Empty:
                                    gemm_efficiency for every GEMM (the model before the
                                    tables). The presets name their device's tables. */
  char gemm_table_fp32[256];   /**< The same for fp32 training ("a100-tf32", "h100-tf32", or
                                    "cpu": OpenBLAS sgemm measured on the project's machine). */
} ptdp_cluster;

/**
 * @brief Fills @p cluster with the "dgx-a100" preset (one node) and sets its struct_size.
 * @param[out] cluster Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p cluster is NULL.
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_cluster_init(ptdp_cluster* cluster);

/**
 * @brief Fills @p cluster with one node of a preset: "dgx-a100" (8 x A100-SXM4-80GB, NVLink 3,
 *        HDR InfiniBand), "dgx-h100" (8 x H100-SXM5, NVLink 4, NDR), "dgx-h200" (as H100 with
 *        141 GB HBM3e) or "hgx-h800" (as H100 with NVLink cut to 400 GB/s, DeepSeek-V3's
 *        machine); see ptdp_cluster_preset_name().
 * @param name A preset name; must not be NULL.
 * @param[out] cluster Must not be NULL; unchanged on error.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL argument or an unknown name (the message lists the
 *         presets).
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_cluster_preset(const char* name, ptdp_cluster* cluster);

/**
 * @brief The name of preset @p index, for listing them.
 * @param index From 0.
 * @return A static string, or NULL when @p index is outside the presets. Thread-safe.
 */
PTDP_API const char* ptdp_cluster_preset_name(int32_t index);

/**
 * @brief Reads a cluster from a JSON file: an object with any of the keys "preset" (the
 *        starting point; default "dgx-a100"), "name", "gpus_per_node", "nodes", "memory_gib",
 *        "memory_reserve_gib", "peak_tflops_16bit", "peak_tflops_fp32", "gemm_efficiency",
 *        "memory_bandwidth_gbs", "elementwise_bandwidth_gbs", "intra_node_bandwidth_gbs", "intra_node_latency_us",
 *        "inter_node_bandwidth_gbs", "inter_node_latency_us" (GiB, TFLOP/s, GB/s, microseconds),
 *        "gemm_table_16bit", "gemm_table_fp32" (a built-in table's name or a file's path; see
 *        ptdp_cluster::gemm_table_16bit).
 * @param path The file; must not be NULL.
 * @param[out] cluster Must not be NULL; unchanged on error.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL argument, an unknown key, a value of the wrong type or
 *         out of range (the message names the file and the key).
 * @retval PTDP_ERR_IO the file cannot be read or is not JSON (named).
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_cluster_load(const char* path, ptdp_cluster* cluster);

/** What to plan. Initialise with ptdp_plan_options_init(). The model fields mean what they mean
 *  in ::ptdp_gpt_options; a pin of 0 (or -1 where stated) leaves that choice to the search. */
typedef struct ptdp_plan_options {
  size_t struct_size;                   /**< Set by ptdp_plan_options_init(). */
  int32_t num_layers;                   /**< l; default 2. */
  int32_t hidden_size;                  /**< h; default 64. */
  int32_t num_attention_heads;          /**< a; default 4. */
  int32_t ffn_hidden_size;              /**< MLP width; 0 (default): 4h. */
  int32_t vocab_size;                   /**< V; default 256. */
  int32_t make_vocab_size_divisible_by; /**< Default 128. */
  int32_t seq_length;                   /**< s; default 32. */
  int32_t max_position_embeddings;      /**< 0 (default): s. */
  int32_t untie_embeddings_and_output_weights; /**< 1: a separate LM head. Default 0. */
  float attention_dropout;              /**< Default 0.1 (the CPU engine then keeps the dropped
                                             attention probabilities as well). */
  int64_t global_batch_size;            /**< B, > 0; no default (0). */
  ptdp_dtype precision;                 /**< ::PTDP_DTYPE_F32 (default), ::PTDP_DTYPE_BF16 or
                                             ::PTDP_DTYPE_F16 (16-bit weights and activations,
                                             fp32 gradients and master weights). */
  int32_t use_distributed_optimizer;    /**< 1: the distributed optimizer may be used. Default 0. */
  int32_t recompute_granularity;        /**< -1 (default): search none, selective and full; else
                                             a ::ptdp_recompute to pin. */
  int32_t num_gpus;                     /**< World size t * p * d; 0 (default): every GPU of the
                                             cluster. */
  int32_t tensor_model_parallel_size;   /**< Pin t; 0: search. */
  int32_t pipeline_model_parallel_size; /**< Pin p; 0: search. */
  int32_t num_layers_per_virtual_pipeline_stage; /**< Pin v = l / (p * this); 0: search. */
  int32_t micro_batch_size;             /**< Pin b; 0: search. */
  int32_t pipeline_schedule;            /**< -1 (default): search 1F1B, interleaved 1F1B and ZB-H1;
                                             else a ::ptdp_schedule_kind to pin (1F1B includes
                                             interleaved when v > 1; GPipe only when pinned). */
  int32_t scatter_gather;               /**< 1 (default): pipeline transfers split over the tensor
                                             ranks and re-assembled inside the node. */
  int32_t overlap_grad_reduce;          /**< 1 (default): the data-parallel reduction overlaps the
                                             last microbatch's backward. */
  int32_t top;                          /**< Layouts to keep; default 5. */
  /* Added after 0.2.0: the model's Llama-family options, meaning what they mean in
   * ::ptdp_gpt_options (zero: the GPT's behaviour, so a zero tail describes the old model). */
  double rotary_base;                   /**< As ptdp_gpt_options::rotary_base (0: 10000). */
  ptdp_normalization normalization;     /**< As ptdp_gpt_options::normalization. */
  int32_t swiglu;                       /**< As ptdp_gpt_options::swiglu. */
  ptdp_position_embedding position_embedding_type; /**< As
                                             ptdp_gpt_options::position_embedding_type. */
  float rotary_percent;                 /**< As ptdp_gpt_options::rotary_percent (0: 1). */
  int32_t use_rope_scaling;             /**< As ptdp_gpt_options::use_rope_scaling. */
  float rope_scaling_factor;            /**< As ptdp_gpt_options::rope_scaling_factor (0: 8). */
  float rope_low_freq_factor;           /**< As ptdp_gpt_options::rope_low_freq_factor (0: 1). */
  float rope_high_freq_factor;          /**< As ptdp_gpt_options::rope_high_freq_factor (0: 4). */
  int32_t rope_original_max_position_embeddings; /**< As
                                             ptdp_gpt_options::rope_original_max_position_embeddings
                                             (0: 8192). */
  int32_t num_query_groups;             /**< As ptdp_gpt_options::num_query_groups (0: a). */
  int32_t kv_channels;                  /**< As ptdp_gpt_options::kv_channels (0: h / a). */
  int32_t disable_bias_linear;          /**< As ptdp_gpt_options::disable_bias_linear. */
  int32_t add_qkv_bias;                 /**< As ptdp_gpt_options::add_qkv_bias. */
  int32_t qk_layernorm;                 /**< As ptdp_gpt_options::qk_layernorm. */
  int32_t hidden_dropout_set;           /**< 1: hidden_dropout holds the model's hidden dropout
                                             rate; 0 (a struct from before the field): 0.1.
                                             ptdp_plan_options_init() sets 1. */
  float hidden_dropout;                 /**< The hidden dropout rate in [0, 1); default 0.1.
                                             Without dropout the 16-bit activation memory holds
                                             no masks (the Llama presets). */
  int32_t decoder_first_pipeline_num_layers; /**< Pin the first pipeline stage's layers
                                             (Megatron's uneven stages,
                                             `--decoder-first-pipeline-num-layers`); 0 (default):
                                             search, i.e. an even split and, for p > 1, the uneven
                                             first and last stages that balance the stage times
                                             best (the last stage also runs the logits layer and
                                             the loss). Not with
                                             num_layers_per_virtual_pipeline_stage. */
  int32_t decoder_last_pipeline_num_layers; /**< Pin the last pipeline stage's layers; as
                                             decoder_first_pipeline_num_layers. */
  int32_t sequence_parallel;            /**< 1: sequence parallelism (Megatron's
                                             `--sequence-parallel`) may be used where t > 1
                                             divides the sequence length; the plan's reasons
                                             say why it is used or not (activation memory
                                             against time). Default 0. */
  int32_t context_parallel_size;        /**< Context parallelism (Megatron's
                                             `--context-parallel-size`): 1 (default) none; N > 1
                                             pins c = N; 0 searches c = 1, 2, 4, ... The layout
                                             takes t c p d GPUs (ranks ordered t, c, d, p); each
                                             rank keeps s / c tokens of every sequence and the
                                             attention passes keys and values around a ring of
                                             c. */
  ptdp_attention attention;             /**< The attention the planned run uses, as
                                             ptdp_gpt_options::attention (`--attention-backend`):
                                             ::PTDP_ATTENTION_AUTO (default; also what a struct
                                             from before the field means) as the engine resolves
                                             it: fp32 plans the CPU engine, whose fused kernel
                                             takes every head dim; bf16 and fp16 plan the CUDA
                                             engine, fused for head dim 64 or 128. The fused
                                             kernel keeps a / t s b fp32 row statistics per layer
                                             where the unfused path keeps the a / t s^2 b
                                             probabilities (and their dropped copy). */
  /* Added after 0.3.0's last header: the model's mixture of experts, each field as in
   * ::ptdp_gpt_options (num_experts 0, what a program built against an older header passes, is a
   * dense model), and the expert-parallel pins. The planner costs the experts' memory, GEMMs
   * and token exchanges from the shape fields; the router's and the losses' settings change
   * neither and are kept so that the options describe the model ptdp-train would build. The
   * fields start at the 200 bytes of that header's struct, which had no tail padding. */
  const char* moe_layer_freq;           /**< As ptdp_gpt_options::moe_layer_freq (NULL or "":
                                             every layer is MoE). */
  int32_t num_experts;                  /**< E (`--num-experts`); 0 (default): a dense model. */
  int32_t moe_router_topk;              /**< k (`--moe-router-topk`); 0 means 2. */
  int32_t moe_ffn_hidden_size;          /**< Each expert's width (`--moe-ffn-hidden-size`); 0:
                                             ffn_hidden_size. */
  int32_t moe_shared_expert_intermediate_size; /**< The shared experts' width; 0: none. */
  int32_t moe_shared_expert_gate;       /**< As ptdp_gpt_options::moe_shared_expert_gate. */
  ptdp_moe_score_function moe_router_score_function; /**< As in ::ptdp_gpt_options. */
  int32_t moe_router_pre_softmax;       /**< As in ::ptdp_gpt_options. */
  float moe_router_topk_scaling_factor; /**< As in ::ptdp_gpt_options. */
  int32_t moe_router_num_groups;        /**< As in ::ptdp_gpt_options. */
  int32_t moe_router_group_topk;        /**< As in ::ptdp_gpt_options. */
  int32_t moe_router_enable_expert_bias; /**< As in ::ptdp_gpt_options. */
  float moe_router_bias_update_rate;    /**< As in ::ptdp_gpt_options. */
  ptdp_moe_load_balancing moe_router_load_balancing_type; /**< As in ::ptdp_gpt_options. */
  float moe_aux_loss_coeff;             /**< As in ::ptdp_gpt_options. */
  float moe_z_loss_coeff;               /**< As in ::ptdp_gpt_options. */
  float moe_expert_capacity_factor;     /**< As in ::ptdp_gpt_options. */
  ptdp_moe_drop_policy moe_token_drop_policy; /**< As in ::ptdp_gpt_options. */
  int32_t moe_pad_expert_input_to_capacity; /**< As in ::ptdp_gpt_options. */
  ptdp_moe_dispatcher moe_token_dispatcher_type; /**< As in ::ptdp_gpt_options. */
  int32_t moe_layer_recompute;          /**< As in ::ptdp_gpt_options. */
  int32_t expert_model_parallel_size;   /**< Pin e (`--expert-model-parallel-size`), dividing
                                             num_experts; 0 (default): search its divisors. */
  int32_t expert_tensor_parallel_size;  /**< Pin etp (`--expert-tensor-parallel-size`); 0
                                             (default): search 1 and t. */
  int32_t qk_layernorm_across_heads;    /**< As ptdp_gpt_options::qk_layernorm_across_heads (OLMoE,
                                             OLMo 2: the q/k norms over each token's whole
                                             projections; with qk_layernorm). Default 0. */
  /* The DeepSeek-V3 family's fields (docs/deepseek.md), each as in ::ptdp_gpt_options, its 0
   * Megatron's default (a zero tail from an older program is a model without them). The planner
   * prices multi-latent attention's projections, attention products and saved tensors
   * (qk_head_dim + qk_pos_emb_head_dim for the scores, v_head_dim for the values and linear_proj)
   * and the D MTP modules on the last pipeline stage (their layers, eh_proj, D more logits
   * layers, and their parameters); YaRN and the routing fields change neither memory nor time
   * and are kept so that the options describe the model ptdp-train would build. */
  ptdp_rope_type rope_type;             /**< As ptdp_gpt_options::rope_type. */
  float rotary_scaling_factor;          /**< As ptdp_gpt_options::rotary_scaling_factor. */
  float mscale;                         /**< As ptdp_gpt_options::mscale. */
  float mscale_all_dim;                 /**< As ptdp_gpt_options::mscale_all_dim. */
  int32_t original_max_position_embeddings; /**< As
                                             ptdp_gpt_options::original_max_position_embeddings. */
  float beta_fast;                      /**< As ptdp_gpt_options::beta_fast. */
  float beta_slow;                      /**< As ptdp_gpt_options::beta_slow. */
  int32_t yarn_no_round_to_int;         /**< As ptdp_gpt_options::yarn_no_round_to_int. */
  int32_t multi_latent_attention;       /**< As ptdp_gpt_options::multi_latent_attention. */
  int32_t q_lora_rank;                  /**< As ptdp_gpt_options::q_lora_rank. */
  int32_t kv_lora_rank;                 /**< As ptdp_gpt_options::kv_lora_rank (0 means 32). */
  int32_t qk_head_dim;                  /**< As ptdp_gpt_options::qk_head_dim (0 means 128). */
  int32_t qk_pos_emb_head_dim;          /**< As ptdp_gpt_options::qk_pos_emb_head_dim (0 means 64). */
  int32_t v_head_dim;                   /**< As ptdp_gpt_options::v_head_dim (0 means 128). */
  int32_t mtp_num_layers;               /**< MTP depth D, as ptdp_gpt_options::mtp_num_layers; here
                                             an MoE model may have modules (their layers MoE
                                             where the last decoder layer is, as Megatron builds
                                             them). Default 0. */
  float mtp_loss_scaling_factor;        /**< As ptdp_gpt_options::mtp_loss_scaling_factor. */
  int32_t moe_router_group_score_topk;  /**< As ptdp_gpt_options::moe_router_group_score_topk. */
  int32_t moe_router_topk_limited_devices; /**< As
                                             ptdp_gpt_options::moe_router_topk_limited_devices. */
  ptdp_optimizer_kind optimizer;        /**< The optimizer whose state and step the plan prices
                                             (`--optimizer`): ::PTDP_OPTIMIZER_ADAM (0, the
                                             default) two fp32 moments per parameter;
                                             ::PTDP_OPTIMIZER_SGD one fp32 momentum buffer;
                                             ::PTDP_OPTIMIZER_MUON one fp32 momentum buffer for
                                             the 2-D hidden weights (attention and MLP linears,
                                             every expert, the router, MLA's projections, MTP's
                                             eh_proj) and two moments for the rest, plus the
                                             Newton-Schulz iteration at the device's peak
                                             (ptdp_plan_layout::seconds_newton_schulz). */
  int32_t muon_num_ns_steps;            /**< Newton-Schulz steps per Muon step
                                             (`--muon-num-ns-steps`), 1..100; 0 (default): 5. */
  int32_t muon_no_split_qkv;            /**< 1: Muon orthogonalises linear_qkv and SwiGLU's
                                             linear_fc1 whole (`--muon-no-split-qkv`); 0
                                             (default): q, k, v and gate, up as separate
                                             matrices. */
} ptdp_plan_options;

/** The settings of the `ptdp-plan` tool itself, from ptdp_plan_parse_args(). */
typedef struct ptdp_plan_cli {
  size_t struct_size;       /**< Set by ptdp_plan_parse_args(). */
  int32_t help;             /**< 1: `--help` was given (print ptdp_plan_help()). */
  int32_t list_clusters;    /**< 1: `--list-clusters` was given. */
  int32_t json;             /**< 1: `--json` was given. */
  const char* schedule_svg; /**< `--schedule-svg` path (pointing into the argv given), or NULL. */
} ptdp_plan_cli;

/** Opaque handle to a plan: the ranked layouts and the reasons. */
typedef struct ptdp_plan_impl* ptdp_plan;

/** One layout of a plan with its estimates; the figures are per GPU of the most loaded
 *  pipeline rank, and seconds per iteration. */
typedef struct ptdp_plan_layout {
  size_t struct_size;             /**< Set by the caller to sizeof(ptdp_plan_layout). */
  int32_t t;                      /**< Tensor-parallel size. */
  int32_t p;                      /**< Pipeline-parallel size. */
  int32_t d;                      /**< Data-parallel size. */
  int32_t v;                      /**< Model chunks per pipeline rank. */
  int32_t b;                      /**< Microbatch size. */
  int32_t m;                      /**< Microbatches per pipeline per iteration. */
  ptdp_schedule_kind schedule;    /**< The schedule (1F1B when p = 1: no pipeline). */
  ptdp_recompute recompute;       /**< Activation recomputation. */
  int32_t distributed_optimizer;  /**< 1 with the distributed optimizer. */
  int32_t simulated;              /**< 1 when the bubble and in-flight counts come from the
                                       schedule simulator (else closed forms). */
  double parameters_formula;      /**< 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)). */
  int64_t parameters_exact;       /**< Parameters of ptdp's model (padded vocabulary). */
  int64_t parameters_per_gpu;     /**< The most parameters one GPU holds. */
  double memory_weights;          /**< Bytes of weights. */
  double memory_gradients;        /**< Bytes of gradients (fp32). */
  double memory_optimizer;        /**< Bytes of optimizer state: Adam moments (SGD's or Muon's
                                       momentum where ptdp_plan_options::optimizer says) and the
                                       fp32 master weights of 16-bit training, both / d with the
                                       distributed optimizer. */
  double memory_activations;      /**< Bytes of activations of the in-flight microbatches,
                                       the recomputation working set and the loss. */
  double memory_total;            /**< The sum. */
  int32_t memory_slots;           /**< (microbatch, chunk) activation sets held at once. */
  int32_t memory_pipeline_rank;   /**< The pipeline rank these figures are for. */
  double seconds_compute;         /**< Forward, backward and recomputation. */
  double seconds_tensor_comm;     /**< Tensor-parallel all-reduces. */
  double seconds_pipeline_comm;   /**< What pipeline transfers add to the makespan. */
  double seconds_bubble;          /**< Pipeline fill and drain. */
  double seconds_data_parallel;   /**< Exposed data-parallel reduction (and all-gather). */
  double seconds_embedding_sync;  /**< Tied-embedding gradient all-reduce. */
  double seconds_optimizer;       /**< Optimizer step. */
  double seconds_iteration;       /**< Time per iteration. */
  double bubble_fraction;         /**< Bubble over compute and tensor communication. */
  double tflops_per_gpu;          /**< Executed FLOPs (recomputation included) per second per
                                       GPU, / 1e12: the paper's figure. */
  double mfu;                     /**< Model FLOPs (no recomputation) / (time * GPUs * peak). */
  int32_t decoder_first_pipeline_num_layers; /**< Layers of the first pipeline stage with
                                       uneven stages (ptdp_parallel_options' field of the same
                                       name); 0: no count of its own (both 0: an even split). */
  int32_t decoder_last_pipeline_num_layers; /**< Layers of the last pipeline stage; as
                                       decoder_first_pipeline_num_layers. */
  int32_t sequence_parallel;      /**< 1 with sequence parallelism (only when
                                       ptdp_plan_options::sequence_parallel allows it). */
  int32_t context_parallel_size;  /**< Context-parallel size c (1: none). */
  /* MoE (all 1 or 0 for a dense model): */
  int32_t expert_model_parallel_size;  /**< e, the ranks the experts of a layer are split over. */
  int32_t expert_tensor_parallel_size; /**< etp, the ranks each expert's linears are split over
                                            (1 or t). */
  int64_t parameters_active;           /**< Parameters one token uses (the routed experts' k of
                                            E); parameters_exact for a dense model. */
  int64_t expert_parameters_per_gpu;   /**< Of parameters_per_gpu, the routed experts'. */
  double seconds_moe_exchange;         /**< The iteration's token exchanges (dispatch and combine,
                                            forward and backward) on the slowest rank; part of
                                            seconds_tensor_comm. */
  int32_t expert_crosses_nodes;        /**< 1 when an expert group's e etp ranks span nodes. */
  double seconds_newton_schulz;        /**< Of seconds_optimizer, Muon's Newton-Schulz products
                                            on the most loaded rank at the device's peak (0 for
                                            Adam and SGD). */
} ptdp_plan_layout;

/**
 * @brief Fills @p options with the defaults and sets its struct_size.
 * @param[out] options Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p options is NULL.
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_plan_options_init(ptdp_plan_options* options);

/**
 * @brief Parses `ptdp-plan`'s command line into plan options, a cluster and the tool's settings.
 *
 * Flags share ptdp-train's names where they overlap (`--num-layers`, `--hidden-size`,
 * `--num-attention-heads`, `--seq-length`, `--vocab-size`, `--global-batch-size`,
 * `--micro-batch-size`, `--tensor-model-parallel-size`, `--pipeline-model-parallel-size`,
 * `--num-layers-per-virtual-pipeline-stage`, `--pipeline-schedule`, `--recompute-granularity`,
 * `--use-distributed-optimizer`, `--bf16`, `--fp16`, ...); the cluster comes from `--cluster`
 * or `--cluster-file` with per-field overrides; see ptdp_plan_help().
 * @param argc Number of entries of @p argv, >= 1.
 * @param argv argv[0] is the program name (ignored).
 * @param[out] options Receives the plan options; must not be NULL.
 * @param[out] cluster Receives the cluster; must not be NULL.
 * @param[out] cli Receives the tool's settings; must not be NULL.
 * @retval PTDP_SUCCESS (also for `--help`: see ptdp_plan_cli::help; the other outputs then hold
 *         defaults)
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL arguments, an unknown flag, a missing or malformed
 *         value, a value out of range, flags that contradict each other, or no
 *         `--global-batch-size`; the message names the flag and the value. Outputs unchanged.
 * @retval PTDP_ERR_IO the `--cluster-file` cannot be read or is not JSON (named).
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_plan_parse_args(int32_t argc, const char* const* argv, ptdp_plan_options* options,
                                          ptdp_cluster* cluster, ptdp_plan_cli* cli);

/**
 * @brief The `--help` text of `ptdp-plan`: every flag with its meaning and default.
 * @param program The program name of the usage line; NULL means "ptdp-plan".
 * @param[out] buffer Receives the NUL-terminated text; may be NULL when @p capacity is 0.
 * @param capacity Bytes @p buffer can hold.
 * @param[out] length Receives strlen of the full text (also when @p capacity is too small);
 *             must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL @p length, or @p capacity too small (nothing written).
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_plan_help(const char* program, char* buffer, size_t capacity, size_t* length);

/**
 * @brief Searches every layout, estimates each and ranks those that fit in memory.
 *
 * A request that no layout can serve is not an error: the plan then holds no layout and
 * ptdp_plan_report() says what is missing (for instance "no layout fits in memory: the smallest
 * need is 92.1 GiB per GPU (...); the GPUs have 77.0 GiB usable (...): short by 15.1 GiB", or
 * which tensor sizes the number of heads rules out).
 * @param options What to plan; must not be NULL.
 * @param cluster The cluster; NULL for ptdp_cluster_init()'s.
 * @param[out] out Receives the plan; must not be NULL. Unchanged on error.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL @p options or @p out, a bad struct_size, a model that
 *         cannot exist (non-positive sizes, heads not dividing h), a non-positive global batch,
 *         a cluster field out of range, or more GPUs than the cluster has; named with values.
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_plan_create(const ptdp_plan_options* options, const ptdp_cluster* cluster, ptdp_plan* out);

/**
 * @brief Releases a plan. NULL is accepted and ignored.
 * @param plan A plan handle, or NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT not a live plan handle.
 * @par Thread safety
 * Must not race with any other call on the same plan.
 */
PTDP_API ptdp_status ptdp_plan_destroy(ptdp_plan plan);

/**
 * @brief Number of feasible layouts the plan holds, best first; 0 when nothing fits.
 * @param plan A live plan.
 * @param[out] count Receives the number; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle or NULL @p count.
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_plan_num_layouts(ptdp_plan plan, int32_t* count);

/**
 * @brief One layout and its estimates.
 * @param plan A live plan.
 * @param index In [0, ptdp_plan_num_layouts()); 0 is the best.
 * @param[in,out] layout Its struct_size must be set by the caller; the library writes the
 *        fields that size covers. Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, @p index out of range, NULL @p layout or a
 *         struct_size smaller than the first published version.
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_plan_get_layout(ptdp_plan plan, int32_t index, ptdp_plan_layout* layout);

/**
 * @brief The human-readable answer: model, cluster, the table of layouts, why the first was
 *        chosen and why each other is worse, the first's memory and time breakdown, what was
 *        ruled out; or, with no layout, what is missing.
 * @param plan A live plan.
 * @param[out] buffer Receives the NUL-terminated text; may be NULL when @p capacity is 0.
 * @param capacity Bytes @p buffer can hold.
 * @param[out] length Receives strlen of the full text; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, NULL @p length, @p capacity too small.
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_plan_report(ptdp_plan plan, char* buffer, size_t capacity, size_t* length);

/**
 * @brief The plan as one JSON object: "model", "cluster", "num_gpus", "feasible", "reason" (when
 *        not feasible), "layouts" (each with its sizes, "memory_bytes", "seconds", rates and
 *        "why") and "ruled_out".
 * @param plan A live plan.
 * @param[out] buffer Receives the NUL-terminated JSON; may be NULL when @p capacity is 0.
 * @param capacity Bytes @p buffer can hold.
 * @param[out] length Receives strlen of the full text; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, NULL @p length, @p capacity too small.
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_plan_to_json(ptdp_plan plan, char* buffer, size_t capacity, size_t* length);

/**
 * @brief Draws a layout's pipeline schedule, simulated with its estimated per-microbatch costs
 *        (milliseconds), as an SVG file like ptdp_schedule_write_svg().
 * @param plan A live plan.
 * @param index In [0, ptdp_plan_num_layouts()).
 * @param path The file to write; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT dead handle, @p index out of range, NULL @p path.
 * @retval PTDP_ERR_IO the file could not be written (named).
 * @par Thread safety
 * Thread-safe (for distinct paths).
 */
PTDP_API ptdp_status ptdp_plan_write_schedule_svg(ptdp_plan plan, int32_t index, const char* path);

/**
 * @brief The parameters of a model: the paper's formula 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h))
 *        and the exact count of ptdp's model with the vocabulary padded for tensor size @p t.
 * @param options The model (only its model fields are read); must not be NULL.
 * @param t Tensor-parallel size, > 0 (it pads the vocabulary).
 * @param[out] formula Receives the formula's value; may be NULL.
 * @param[out] exact Receives the exact count; may be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or bad @p options, or a model that cannot be built with
 *         @p t (heads not divisible by t, ...).
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_plan_parameters(const ptdp_plan_options* options, int32_t t, double* formula,
                                          int64_t* exact);

/**
 * @brief The inference key/value cache of the model in @p options, in bytes per token of
 *        context on one tensor rank, summed over the decoder layers (generation runs no MTP
 *        module): 2 g dh / t elements per layer for multi-head and grouped-query attention;
 *        with multi_latent_attention the normalised latent and the shared rotated RoPE key,
 *        kv_lora_rank + qk_pos_emb_head_dim elements per layer, whole on every tensor rank (what
 *        ptdp's engine caches; DeepSeek-V3: 576 per layer where its keys and values would be
 *        2 a (qk_head_dim + qk_pos_emb_head_dim) = 49152). Elements of the options' precision.
 * @param options The model and its precision (the other fields are not read); must not be NULL.
 * @param t Tensor-parallel size, > 0.
 * @param[out] bytes_per_token Receives the bytes; must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL argument or bad @p options, or a model that cannot be
 *         built with @p t (heads not divisible by t, ...).
 * @par Thread safety
 * Thread-safe.
 */
PTDP_API ptdp_status ptdp_plan_kv_cache_bytes(const ptdp_plan_options* options, int32_t t, double* bytes_per_token);

/** @} */

/* ---------------------------------------------------------------------------------------- */
/** @name Training plots
 *  Pictures of training runs: the JSON lines that `ptdp-train --log-json` writes, drawn as one
 *  standalone SVG that a browser shows. This is what `ptdp-plot` and `ptdp-train --plot-file`
 *  draw. No device and no communication are involved.
 *  @{ */

/**
 * @brief Draws one or more training logs, overlaid, as an SVG file.
 *
 * Each log is read as JSON lines: objects with "iteration" give the training curves
 * ("lm_loss", "learning_rate", "grad_norm", "loss_scale", "tokens_per_second"), objects with
 * "validation_iteration" the validation loss ("lm_loss"); other keys and objects are ignored,
 * so are blank lines. A value that is missing, null or not finite (including the bare `nan`
 * and `inf` that C's printf writes, and the -1 the loop writes for a grad norm that was not
 * finite) leaves a gap. Records that a resumed run repeats (an iteration not beyond the previous
 * one) replace those of the interrupted run from that iteration on; a last line without its
 * newline that is not JSON yet (the writer's line in progress) is left out.
 *
 * The picture has a legend naming each run in its own colour with its last losses, then panels
 * for the loss (training solid, validation dashed with markers), learning rate, grad norm, loss
 * scale and tokens per second, all against the iteration, with round ticks enclosing the data;
 * grad norm and loss scale use a logarithmic axis when their values span two decades or more.
 * The file is replaced atomically (written beside it under the name @p svg_path + ".tmp", then
 * renamed), so a viewer reloading it never reads half a picture.
 * @param jsonl_paths @p count paths of training logs; neither the array nor an entry may be
 *        NULL or empty. Only regular files are read: a directory or FIFO is refused.
 * @param labels NULL, or @p count names for the legend; a NULL entry names that run after its
 *        log's file name (the path as given where two logs have the same file name).
 * @param count Number of logs, >= 1.
 * @param title The picture's title; NULL or "" means "training".
 * @param svg_path The SVG file to write (replaced if present); must not be NULL, empty or one
 *        of the logs.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL @p jsonl_paths or @p svg_path, @p count < 1, a NULL or
 *         empty path (named by its index, as `jsonl_paths[1]`), an empty label (`labels[0]`),
 *         an empty @p svg_path, or @p svg_path naming one of the logs. Nothing is read or
 *         written.
 * @retval PTDP_ERR_IO a log is missing, unreadable or not a regular file, a line of it is not a
 *         JSON object or its iteration is not a non-negative integer (the message names the
 *         path and the line number), or the SVG cannot be written (named). The SVG file is then
 *         left as it was.
 * @par Thread safety
 * Thread-safe for distinct @p svg_path values; two calls writing the same path at once race on
 * its temporary file.
 */
PTDP_API ptdp_status ptdp_plot_training_logs(const char* const* jsonl_paths, const char* const* labels, int32_t count,
                                             const char* title, const char* svg_path);

/** @} */

/* ---------------------------------------------------------------------------------------- */
/** @name Preprocessing: JSON lines to indexed data sets
 *  Megatron-LM's `tools/preprocess_data.py` and `tools/merge_datasets.py` in the library: the
 *  `ptdp-preprocess-data` and `ptdp-merge-datasets` tools and every binding run the same code.
 *  Each line of the inputs (plain or gzip) is one JSON object and one document. For each key of
 *  json_keys its text (a string, or a list of strings: one sequence each, sentences without
 *  tokens dropped) is tokenized and written to OUTPUT_PREFIX_KEY_document.bin and .idx, the
 *  indexed data set Megatron reads (ptdp_dataset_open(), `ptdp-train --data-path`), as uint16
 *  when the tokenizer has fewer than 65,500 ids, else int32 (Megatron's DType.optimal_dtype).
 *  With append_eod a document with tokens ends with the tokenizer's end-of-document id (in its
 *  last sequence); a document without tokens has no sequences but is still a document. Worker
 *  threads tokenize while one writer keeps the input order; the index is spilled to temporary
 *  files, so memory stays bounded whatever the input size. Outputs are written under temporary
 *  names and renamed when complete: a failed run leaves no partial data set.
 *
 *  Blends of several data sets need no call of their own: ptdp_gpt_data_options' `path` takes
 *  Megatron's weighted list, and its train/valid/test data paths one list per split.
 *  @{ */

/** Options of ptdp_preprocess(): `ptdp-preprocess-data`'s flags. Initialise with
 *  ptdp_preprocess_options_init(). */
typedef struct ptdp_preprocess_options {
  size_t struct_size;             /**< Set by ptdp_preprocess_options_init(). */
  const char* const* inputs;      /**< `--input`: num_inputs JSON-lines files, plain or gzip, read in order. */
  int32_t num_inputs;             /**< Entries of inputs, >= 1. */
  int32_t num_json_keys;          /**< Entries of json_keys; 0: the one key "text" (default). */
  const char* const* json_keys;   /**< `--json-keys`; may be NULL when num_json_keys is 0. */
  const char* output_prefix;      /**< `--output-prefix`; its directory must exist. */
  const char* tokenizer_type;     /**< `--tokenizer-type`, Megatron's name: "ByteLevel" (default),
                                       "NullTokenizer", "GPT2BPETokenizer", "HuggingFaceTokenizer",
                                       "SentencePieceTokenizer". */
  const char* vocab_file;         /**< `--vocab-file` (GPT2BPETokenizer's vocab.json); NULL: unset. */
  const char* merge_file;         /**< `--merge-file` (GPT2BPETokenizer's merges.txt); NULL: unset. */
  const char* tokenizer_model;    /**< `--tokenizer-model` (tokenizer.json, tokenizer.model); NULL: unset. */
  int64_t vocab_size;             /**< `--vocab-size` (NullTokenizer: ids below it); 0: unset. */
  int32_t append_eod;             /**< `--append-eod`: 1 ends every document with tokens with the
                                       end-of-document id. Default 0. */
  int32_t workers;                /**< `--workers`: tokenizing threads, >= 1. Default 1. */
  int64_t log_interval;           /**< A progress line on stderr every N documents ("Processed N
                                       documents (D docs/s, M MB/s)."); 0: none (default). */
  int32_t skip_bad_lines;         /**< 1: drop a bad line and count it instead of failing. Default 0. */
} ptdp_preprocess_options;

/** What ptdp_preprocess() did. */
typedef struct ptdp_preprocess_result {
  size_t struct_size;   /**< Set by the caller to sizeof its struct; the library writes that many
                             bytes at most and sets it to what it wrote. */
  int64_t documents;    /**< Documents written (in each key's data set). */
  int64_t bad_lines;    /**< Lines dropped (skip_bad_lines). */
  int64_t bytes;        /**< Input bytes read, after gzip, newlines included. */
  int64_t tokens;       /**< Tokens written, over all keys. */
  double seconds;       /**< Wall time of reading, tokenizing and writing. */
  int32_t dtype_code;   /**< Megatron's dtype code of the tokens: 8 (uint16) or 4 (int32). */
} ptdp_preprocess_result;

/**
 * @brief Fills @p options with the defaults (ByteLevel, key "text", one worker, no progress
 *        lines) and sets its struct_size.
 * @param[out] options Must not be NULL.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT @p options is NULL.
 */
PTDP_API ptdp_status ptdp_preprocess_options_init(ptdp_preprocess_options* options);

/**
 * @brief Tokenizes JSON lines into one indexed data set per key (Megatron's
 *        preprocess_data.py).
 * @param options Must not be NULL; see ptdp_preprocess_options.
 * @param[in,out] result NULL, or receives what was done: its struct_size must be set by the
 *        caller (sizeof the caller's struct).
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT bad options (named: NULL or empty inputs, an unknown
 *         tokenizer type, duplicate keys, workers < 1, append_eod with a tokenizer without an
 *         end-of-document id), or a bad line without skip_bad_lines: not a JSON object, a
 *         missing key, a key holding something else than a string or a list of strings, or
 *         text the tokenizer refuses; the message names FILE:LINE. No output is left behind.
 * @retval PTDP_ERR_IO an input that cannot be read (a truncated gzip file included), a tokenizer
 *         file that cannot be read, or an output that cannot be written; the message names the
 *         file.
 * @par Thread safety
 * Thread-safe for distinct output prefixes; uses options->workers threads of its own.
 */
PTDP_API ptdp_status ptdp_preprocess(const ptdp_preprocess_options* options, ptdp_preprocess_result* result);

/**
 * @brief The whole of `ptdp-preprocess-data`: parses @p argv (Megatron's flags: `--input FILE
 *        [FILE ...]`, `--json-keys KEY [KEY ...]`, `--output-prefix`, `--tokenizer-type`
 *        (required, as in Megatron; ptdp_preprocess() defaults to ByteLevel), `--vocab-file`,
 *        `--merge-file`, `--tokenizer-model`, `--vocab-size`, `--append-eod`, `--workers`,
 *        `--log-interval`, and ptdp's `--skip-bad-lines`), prints `--help`,
 *        preprocesses with Megatron's progress line on stderr and a summary on stdout, and
 *        reports a failure on stderr as "PROGRAM: message".
 * @param argc Number of entries in @p argv, >= 1.
 * @param argv argv[0] is the program name, then the flags.
 * @param[out] exit_code Receives the exit status: 0 done, 1 failed, 2 bad flags; must not be NULL.
 * @retval PTDP_SUCCESS the run happened (even when it failed: see @p exit_code).
 * @retval PTDP_ERR_INVALID_ARGUMENT argc < 1, NULL argv, an entry or @p exit_code NULL.
 * @par Thread safety
 * As ptdp_preprocess().
 */
PTDP_API ptdp_status ptdp_preprocess_main(int32_t argc, const char* const* argv, int32_t* exit_code);

/**
 * @brief Concatenates indexed data sets into one (Megatron's merge_datasets.py): the
 *        documents and sequences of @p prefixes in order, their .bin bytes copied, written to
 *        OUTPUT_PREFIX.bin and .idx.
 * @param prefixes @p count data set prefixes; none NULL or empty.
 * @param count >= 1.
 * @param output_prefix Where to write; must not be NULL or empty.
 * @retval PTDP_SUCCESS
 * @retval PTDP_ERR_INVALID_ARGUMENT NULL or empty arguments (named), data sets of different
 *         dtypes (the message names the file and both dtypes).
 * @retval PTDP_ERR_IO a missing or malformed input, one whose sequences are not stored back to
 *         back, or an output that cannot be written; the message names the file. No output is
 *         left behind.
 * @par Thread safety
 * Thread-safe for distinct output prefixes.
 */
PTDP_API ptdp_status ptdp_merge_datasets(const char* const* prefixes, int32_t count, const char* output_prefix);

/**
 * @brief The whole of `ptdp-merge-datasets`: `--input DIR` (every PREFIX.bin/PREFIX.idx pair
 *        in DIR, sorted by name, as Megatron's script) or `--datasets PREFIX [PREFIX ...]`, and
 *        `--output-prefix`; a summary on stdout, a failure on stderr as "PROGRAM: message".
 * @param argc Number of entries in @p argv, >= 1.
 * @param argv argv[0] is the program name, then the flags.
 * @param[out] exit_code Receives the exit status: 0 done, 1 failed, 2 bad flags; must not be NULL.
 * @retval PTDP_SUCCESS the run happened (even when it failed: see @p exit_code).
 * @retval PTDP_ERR_INVALID_ARGUMENT argc < 1, NULL argv, an entry or @p exit_code NULL.
 */
PTDP_API ptdp_status ptdp_merge_datasets_main(int32_t argc, const char* const* argv, int32_t* exit_code);

/** @} */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PTDP_PTDP_H */
