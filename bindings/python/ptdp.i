/* SWIG interface of the Python module `ptdp._ptdp` (its C extension is `ptdp._ptdp_ext`).
 *
 * The public header is the only source: it is %included whole, and what this file adds are
 * typemaps (how C parameters travel to and from Python) and the trampolines that let Python
 * objects serve as ptdp_pipeline_run() callbacks. No C declaration is repeated here.
 *
 * The raw module stays close to C, with three conventions:
 * - a failing ptdp_status raises the exception ptdp.errors builds from the status and the
 *   thread's ptdp_last_error(), read right after the call; a successful call returns its outputs;
 * - output parameters (handles, scalars, names) become return values, in parameter order;
 * - buffers (host data, token ids, parameters, action lists) are taken from any object with
 *   the buffer protocol, C-contiguous, without copying; typed pointers check the item type.
 * Parameters that are arrays rather than single outputs are named below; a new array parameter
 * in the header needs its name added here (the default for `T*` is a single output).
 *
 * Regenerate the committed wrapper with bindings/python/regenerate.py after editing this file
 * or the header; ctest's python_generated_fresh fails while it is stale. */
%module(package="ptdp") _ptdp

%{
#define PY_SSIZE_T_CLEAN
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "ptdp/ptdp.h"
%}

%include <stdint.i>

/* ---------------------------------------------------------------------------------------- */
/* Errors: a failed call raises ptdp.errors.error_for(status, message). */

%{
static void ptdpy_raise(ptdp_status status) {
  const char* message = ptdp_last_error();
  PyObject* text = PyUnicode_DecodeUTF8(message, (Py_ssize_t)strlen(message), "replace");
  PyObject* errors = text ? PyImport_ImportModule("ptdp.errors") : NULL;
  PyObject* exc = errors ? PyObject_CallMethod(errors, "error_for", "iO", (int)status, text) : NULL;
  if (exc) PyErr_SetObject((PyObject*)Py_TYPE(exc), exc);
  Py_XDECREF(exc);
  Py_XDECREF(errors);
  Py_XDECREF(text);
}

/* Borrows a C-contiguous buffer; checks the item size (and kind, when `kinds` is not NULL:
 * struct-module format letters the item may have). None gives an empty view when allowed. */
static int ptdpy_get_buffer(PyObject* obj, Py_buffer* view, int writable, Py_ssize_t itemsize, const char* kinds,
                            int allow_none, const char* what) {
  if (obj == Py_None) {
    if (!allow_none) {
      PyErr_Format(PyExc_TypeError, "%s must not be None", what);
      return -1;
    }
    memset(view, 0, sizeof(*view));
    return 0;
  }
  int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj, view, flags) != 0) return -1;
  if (itemsize > 0) {
    const char* format = view->format ? view->format : "B";
    char kind = format[strlen(format) - 1];
    int kind_ok = kinds == NULL || strchr(kinds, kind) != NULL;
    if (view->itemsize != itemsize || !kind_ok || strlen(format) > 2) {
      PyErr_Format(PyExc_TypeError, "%s: expected items of %zd bytes (format '%s'), got format '%s'", what, itemsize,
                   kinds ? kinds : "any", format);
      PyBuffer_Release(view);
      return -1;
    }
  }
  return 1;
}

/* A sequence of Python ints as a C array of int64. */
static int ptdpy_int64_sequence(PyObject* obj, int64_t* out, Py_ssize_t capacity, Py_ssize_t* count,
                                const char* what) {
  PyObject* seq = PySequence_Fast(obj, "expected a sequence of integers");
  if (!seq) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n > capacity) {
    PyErr_Format(PyExc_ValueError, "%s: %zd entries, at most %zd", what, n, capacity);
    Py_DECREF(seq);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
    if (v == -1 && PyErr_Occurred()) {
      Py_DECREF(seq);
      return -1;
    }
    out[i] = (int64_t)v;
  }
  *count = n;
  Py_DECREF(seq);
  return 0;
}
%}

%typemap(out) ptdp_status {
  if ($1 != PTDP_SUCCESS) {
    ptdpy_raise($1);
    SWIG_fail;
  }
  $result = SWIG_Py_Void();
}

/* Calls that report a size in an output also on failure (a capacity too small) return
 * (status, message) and their outputs instead of raising, so the caller can size its buffer. */
%typemap(out) ptdp_status ptdp_dataset_document, ptdp_status ptdp_train_config_help,
              ptdp_status ptdp_train_config_to_json, ptdp_status ptdp_model_preset_name,
              ptdp_status ptdp_tokenizer_encode, ptdp_status ptdp_tokenizer_decode,
              ptdp_status ptdp_tokenizer_id_to_token, ptdp_status ptdp_flight_analyze {
  {
    const char* message = ptdp_last_error();
    $result = Py_BuildValue("(iN)", (int)$1, PyUnicode_DecodeUTF8(message, (Py_ssize_t)strlen(message), "replace"));
  }
}

/* ---------------------------------------------------------------------------------------- */
/* Handles: `H* out` is an output; `ptdp_work* work` is an output only when asked for. */

%define PTDPY_HANDLE(H)
%typemap(in, numinputs=0) H* (H temp = NULL) { $1 = &temp; }
%typemap(argout) H* { $result = SWIG_Python_AppendOutput($result, SWIG_NewPointerObj(*$1, $descriptor(H), 0)); }
%typemap(argout) const H* ""
%enddef
PTDPY_HANDLE(ptdp_tensor)
PTDPY_HANDLE(ptdp_runtime)
PTDPY_HANDLE(ptdp_groups)
PTDPY_HANDLE(ptdp_model)
PTDPY_HANDLE(ptdp_schedule)
PTDPY_HANDLE(ptdp_layer)
PTDPY_HANDLE(ptdp_dataset)
PTDPY_HANDLE(ptdp_optimizer)
PTDPY_HANDLE(ptdp_train_config)
PTDPY_HANDLE(ptdp_gpt_data)
PTDPY_HANDLE(ptdp_trainer)
PTDPY_HANDLE(ptdp_tokenizer)

/* True: non-blocking, returns a ptdp_work handle; false or None: blocks, returns None. */
%typemap(in) ptdp_work* work (ptdp_work temp = NULL) {
  int wanted = PyObject_IsTrue($input);
  if (wanted < 0) SWIG_fail;
  $1 = wanted ? &temp : NULL;
}
%typemap(argout) ptdp_work* work {
  $result = SWIG_Python_AppendOutput($result, $1 ? SWIG_NewPointerObj(*$1, $descriptor(ptdp_work), 0) : SWIG_Py_Void());
}

/* ptdp_layer_backward's input gradient: an output when asked for (the embedding has none). */
%typemap(in) ptdp_tensor* grad_input (ptdp_tensor temp = NULL) {
  int wanted = PyObject_IsTrue($input);
  if (wanted < 0) SWIG_fail;
  $1 = wanted ? &temp : NULL;
}
%typemap(argout) ptdp_tensor* grad_input {
  $result = SWIG_Python_AppendOutput($result, $1 ? SWIG_NewPointerObj(*$1, $descriptor(ptdp_tensor), 0) : SWIG_Py_Void());
}

/* Arrays of tensor handles (ptdp_optimizer_create_for_tensors): a sequence of handles. */
%typemap(in) const ptdp_tensor* (ptdp_tensor* array = NULL) {
  PyObject* seq = PySequence_Fast($input, "expected a sequence of tensor handles");
  if (!seq) SWIG_fail;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  array = (ptdp_tensor*)calloc(n > 0 ? (size_t)n : 1, sizeof(ptdp_tensor));
  for (Py_ssize_t i = 0; array && i < n; ++i) {
    void* p = NULL;
    if (!SWIG_IsOK(SWIG_ConvertPtr(PySequence_Fast_GET_ITEM(seq, i), &p, $descriptor(ptdp_tensor), 0))) {
      Py_DECREF(seq);
      SWIG_exception_fail(SWIG_TypeError, "expected a sequence of tensor handles");
    }
    array[i] = (ptdp_tensor)p;
  }
  Py_DECREF(seq);
  $1 = array;
}
%typemap(freearg) const ptdp_tensor* { free(array$argnum); }

/* ---------------------------------------------------------------------------------------- */
/* Enums, as arguments and as fields of option structs: a plain int is passed on as it is (the
 * library range-checks it and names the argument); anything else (a name such as "adam", "bf16"
 * or "1f1b", a member of the package's IntEnums, a numpy integer) goes to ptdp._lib.enum_value,
 * which knows every enum's names and raises InvalidArgumentError listing them. The integer
 * fields that hold an enum's values are named here with their enum. */

%{
static int ptdpy_enum(PyObject* obj, const char* type, const char* function, const char* name, long long* out) {
  PyObject* value = NULL;
  if (PyLong_CheckExact(obj)) {
    Py_INCREF(obj);
    value = obj;
  } else {
    PyObject* lib = PyImport_ImportModule("ptdp._lib");
    value = lib ? PyObject_CallMethod(lib, "enum_value", "sssO", type, function, name, obj) : NULL;
    Py_XDECREF(lib);
    if (!value) return -1;
  }
  *out = PyLong_AsLongLong(value);
  Py_DECREF(value);
  return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* ptdpy_enum into a C integer type of the range [low, high]. */
static int ptdpy_enum_in_range(PyObject* obj, const char* type, const char* function, const char* name,
                               long long low, long long high, long long* out) {
  if (ptdpy_enum(obj, type, function, name, out) != 0) return -1;
  if (*out < low || *out > high) {
    PyErr_Format(PyExc_OverflowError, "%s: %s = %lld is out of range", function, name, *out);
    return -1;
  }
  return 0;
}
%}

%typemap(in) enum SWIGTYPE (long long value = 0) {
  if (ptdpy_enum_in_range($input, "$1_type", "$symname", "$1_name", INT_MIN, INT_MAX, &value) != 0) SWIG_fail;
  $1 = ($1_ltype)value;
}

%define PTDPY_ENUM_FIELD(T, LOW, HIGH, NAME, ENUM)
%typemap(in) T NAME (long long value = 0) {
  if (ptdpy_enum_in_range($input, #ENUM, "$symname", "$1_name", LOW, HIGH, &value) != 0) SWIG_fail;
  $1 = (T)value;
}
%enddef
PTDPY_ENUM_FIELD(int64_t, INT64_MIN, INT64_MAX, pipeline_chunk_placement, ptdp_chunk_placement)
PTDPY_ENUM_FIELD(int32_t, INT32_MIN, INT32_MAX, recompute_granularity, ptdp_recompute)
PTDPY_ENUM_FIELD(int32_t, INT32_MIN, INT32_MAX, pipeline_schedule, ptdp_schedule_kind)

/* ---------------------------------------------------------------------------------------- */
/* Single outputs: every other non-const pointer to a scalar or an enum (SWIG would also match
 * the const pointers, which are inputs: their argout is empty). */

%define PTDPY_OUTPUT(T, TO_PY)
%typemap(in, numinputs=0) T* (T temp = 0) { $1 = &temp; }
%typemap(argout) T* { $result = SWIG_Python_AppendOutput($result, TO_PY); }
%typemap(argout) const T* ""
%enddef
PTDPY_OUTPUT(int32_t, PyLong_FromLong((long)*$1))
PTDPY_OUTPUT(int64_t, PyLong_FromLongLong((long long)*$1))
PTDPY_OUTPUT(size_t, PyLong_FromSize_t(*$1))
PTDPY_OUTPUT(float, PyFloat_FromDouble((double)*$1))
PTDPY_OUTPUT(double, PyFloat_FromDouble(*$1))
PTDPY_OUTPUT(ptdp_dtype, PyLong_FromLong((long)*$1))
PTDPY_OUTPUT(ptdp_device, PyLong_FromLong((long)*$1))
PTDPY_OUTPUT(ptdp_schedule_kind, PyLong_FromLong((long)*$1))
PTDPY_OUTPUT(ptdp_tokenizer_type, PyLong_FromLong((long)*$1))
PTDPY_OUTPUT(ptdp_hf_architecture, PyLong_FromLong((long)*$1))

/* ptdp_model_param_info's global shape: room for two extents, returned as a pair. */
%typemap(in, numinputs=0) int64_t* global_shape (int64_t temp[2] = {0, 0}) { $1 = temp; }
%typemap(argout) int64_t* global_shape {
  $result = SWIG_Python_AppendOutput($result, Py_BuildValue("(LL)", (long long)$1[0], (long long)$1[1]));
}

/* Fixed-size array fields of option structs (ptdp_gpt_data_options::num_samples, ...): tuples. */
%typemap(in) int64_t [ANY] (int64_t temp[$1_dim0]) {
  Py_ssize_t n = 0;
  memset(temp, 0, sizeof(temp));
  if (ptdpy_int64_sequence($input, temp, $1_dim0, &n, "$1_name") != 0) SWIG_fail;
  $1 = temp;
}
%typemap(memberin) int64_t [ANY] { memcpy($1, $input, sizeof(int64_t) * $1_dim0); }
%typemap(out) int64_t [ANY] {
  $result = PyTuple_New($1_dim0);
  for (Py_ssize_t i = 0; i < $1_dim0; ++i) PyTuple_SET_ITEM($result, i, PyLong_FromLongLong((long long)$1[i]));
}

/* Names and check messages: returned as str. */
%typemap(in, numinputs=0) (char* name, size_t name_capacity) (char temp[4096]) {
  temp[0] = 0;
  $1 = temp;
  $2 = sizeof(temp);
}
%typemap(argout) (char* name, size_t name_capacity) {
  $result = SWIG_Python_AppendOutput($result, PyUnicode_DecodeUTF8($1, (Py_ssize_t)strlen($1), "replace"));
}
%apply (char* name, size_t name_capacity) { (char* message, size_t capacity) };

/* ---------------------------------------------------------------------------------------- */
/* Buffers, borrowed through the buffer protocol (numpy arrays, bytes, bytearray, memoryview). */

/* PTDPY_BUFFER2((PTR, LEN), WRITABLE, ITEMSIZE, KINDS, ALLOW_NONE, BYTES): LEN receives the
 * size in bytes when BYTES is 1, else in items. PTDPY_BUFFER1(PTR, ...) has no length. */
%define PTDPY_BUFFER2(ARGS, WRITABLE, ITEMSIZE, KINDS, ALLOW_NONE, BYTES)
%typemap(in) ARGS (Py_buffer view, int have_view = 0) {
  have_view = ptdpy_get_buffer($input, &view, WRITABLE, ITEMSIZE, KINDS, ALLOW_NONE, "$symname: $1_name");
  if (have_view < 0) {
    have_view = 0;
    SWIG_fail;
  }
  $1 = ($1_ltype)(have_view ? view.buf : NULL);
  $2 = ($2_ltype)(have_view ? (BYTES ? view.len : view.len / ITEMSIZE) : 0);
}
%typemap(freearg) ARGS { if (have_view$argnum) PyBuffer_Release(&view$argnum); }
%typemap(argout) ARGS ""
%enddef

%define PTDPY_BUFFER1(ARG, WRITABLE, ITEMSIZE, KINDS, ALLOW_NONE)
%typemap(in) ARG (Py_buffer view, int have_view = 0) {
  have_view = ptdpy_get_buffer($input, &view, WRITABLE, ITEMSIZE, KINDS, ALLOW_NONE, "$symname: $1_name");
  if (have_view < 0) {
    have_view = 0;
    SWIG_fail;
  }
  $1 = ($1_ltype)(have_view ? view.buf : NULL);
}
%typemap(freearg) ARG { if (have_view$argnum) PyBuffer_Release(&view$argnum); }
%typemap(argout) ARG ""
%enddef

/* Host data of tensors: any bytes, sizes checked by the library. */
PTDPY_BUFFER2(%arg((const void* host_data, size_t host_bytes)), 0, 0, NULL, 1, 1)
PTDPY_BUFFER2(%arg((const void* src, size_t src_bytes)), 0, 0, NULL, 1, 1)
PTDPY_BUFFER2(%arg((void* dst, size_t dst_bytes)), 1, 0, NULL, 1, 1)
/* float32 parameters, gradients and logits; byte sizes. */
PTDPY_BUFFER2(%arg((const float* host, size_t bytes)), 0, 4, "f", 0, 1)
PTDPY_BUFFER2(%arg((float* host, size_t bytes)), 1, 4, "f", 0, 1)
PTDPY_BUFFER2(%arg((float* logits, size_t bytes)), 1, 4, "f", 0, 1)
/* int32 and int64 arrays with element capacities. */
PTDPY_BUFFER2(%arg((int32_t* world_ranks, int32_t capacity)), 1, 4, "iIl", 1, 0)
PTDPY_BUFFER2(%arg((int32_t* out, int32_t capacity)), 1, 4, "iIl", 0, 0)
PTDPY_BUFFER2(%arg((int32_t* peak_slots, int32_t capacity)), 1, 4, "iIl", 1, 0)
PTDPY_BUFFER2(%arg((int32_t* tokens, int64_t capacity)), 1, 4, "iIl", 1, 0)
PTDPY_BUFFER2(%arg((int64_t* shape, int32_t capacity)), 1, 8, "qQlL", 1, 0)
PTDPY_BUFFER2(%arg((float* losses, int32_t capacity)), 1, 4, "f", 1, 0)
PTDPY_BUFFER2(%arg((char* buffer, size_t capacity)), 1, 1, NULL, 1, 1)
/* Text and vocabulary entries given to a tokenizer: bytes of any value (NUL included). */
PTDPY_BUFFER2(%arg((const char* text, size_t length)), 0, 1, NULL, 1, 1)
PTDPY_BUFFER2(%arg((const char* token, size_t length)), 0, 1, NULL, 1, 1)
/* Token ids a tokenizer writes (None: only the count is asked for) and reads. */
PTDPY_BUFFER2(%arg((int32_t* ids, size_t capacity)), 1, 4, "iIl", 1, 0)
PTDPY_BUFFER2(%arg((const int32_t* ids, size_t count)), 0, 4, "iIl", 1, 0)
/* Schedules' action lists: rows of four int32 (kind, microbatch, chunk, peer). */
PTDPY_BUFFER2(%arg((ptdp_action* out, int32_t capacity)), 1, 4, "iIl", 1, 0)
%typemap(check) (ptdp_action* out, int32_t capacity) { $2 = (int32_t)($2 / 4); }
PTDPY_BUFFER1(const ptdp_action* actions, 0, 4, "iIl", 1)
/* Token ids, labels, prompts, flags and counts given to the library: int32. */
PTDPY_BUFFER1(const int32_t*, 0, 4, "iIl", 1)
/* Token ids and labels the library writes (ptdp_gpt_data_batch). */
PTDPY_BUFFER1(int32_t* tokens, 1, 4, "iIl", 0)
PTDPY_BUFFER1(int32_t* labels, 1, 4, "iIl", 0)
/* Position ids and document starts ptdp_eod_masks writes (None: not asked for). */
PTDPY_BUFFER1(int32_t* position_ids, 1, 4, "iIl", 1)
PTDPY_BUFFER1(int32_t* document_starts, 1, 4, "iIl", 1)

%{
/* ptdp_action is four 32-bit fields; the typemaps above hand out its rows as int32. */
typedef char ptdpy_action_is_four_int32[sizeof(ptdp_action) == 16 && sizeof(ptdp_action_kind) == 4 ? 1 : -1];
%}

/* Shapes: a sequence of extents. */
%typemap(in) (int32_t ndim, const int64_t* shape) (int64_t temp[PTDP_MAX_DIMS + 1]) {
  Py_ssize_t n = 0;
  if (ptdpy_int64_sequence($input, temp, PTDP_MAX_DIMS + 1, &n, "shape") != 0) SWIG_fail;
  $1 = (int32_t)n;
  $2 = ($2_ltype)temp;
}

/* Command lines: a sequence of str, argv[0] included. */
%typemap(in) (int32_t argc, const char* const* argv) (PyObject* seq = NULL, const char** array = NULL) {
  seq = PySequence_Fast($input, "expected a sequence of str");
  if (!seq) SWIG_fail;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  array = (const char**)calloc((size_t)n + 1, sizeof(char*));
  for (Py_ssize_t i = 0; array && i < n; ++i) {
    array[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
    if (!array[i]) SWIG_fail;
  }
  $1 = (int32_t)n;
  $2 = ($2_ltype)array;
}
%typemap(freearg) (int32_t argc, const char* const* argv) {
  free((void*)array$argnum);
  Py_XDECREF(seq$argnum);
}

/* Data set prefixes (ptdp_merge_datasets): a sequence of str. */
%{
/* A sequence of str as a NULL-terminated array of UTF-8 pointers into its items; `*seq` holds
 * them. Returns the count, or -1 with a Python error naming `what`. */
static Py_ssize_t ptdpy_string_array(PyObject* obj, const char* what, PyObject** seq, const char*** array) {
  *seq = PySequence_Fast(obj, "expected a sequence of str");
  if (!*seq) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(*seq);
  *array = (const char**)calloc((size_t)n + 1, sizeof(char*));
  if (!*array) {
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(*seq, i);
    if (!PyUnicode_Check(item)) {
      PyErr_Format(PyExc_TypeError, "%s: item %zd is %s, not str", what, i, Py_TYPE(item)->tp_name);
      return -1;
    }
    (*array)[i] = PyUnicode_AsUTF8(item);
    if (!(*array)[i]) return -1;
  }
  return n;
}
%}

%typemap(in) (const char* const* prefixes, int32_t count) (PyObject* seq = NULL, const char** array = NULL) {
  Py_ssize_t n = ptdpy_string_array($input, "prefixes", &seq, &array);
  if (n < 0) SWIG_fail;
  $1 = ($1_ltype)array;
  $2 = (int32_t)n;
}
%typemap(freearg) (const char* const* prefixes, int32_t count) {
  free((void*)array$argnum);
  Py_XDECREF(seq$argnum);
}

/* Batched transfers: a sequence of ptdp_p2p_op structs. */
%typemap(in) (const ptdp_p2p_op* ops, int32_t count) (ptdp_p2p_op* array = NULL) {
  PyObject* seq = PySequence_Fast($input, "expected a sequence of ptdp_p2p_op");
  if (!seq) SWIG_fail;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  array = (ptdp_p2p_op*)calloc(n > 0 ? (size_t)n : 1, sizeof(ptdp_p2p_op));
  for (Py_ssize_t i = 0; array && i < n; ++i) {
    void* p = NULL;
    if (!SWIG_IsOK(SWIG_ConvertPtr(PySequence_Fast_GET_ITEM(seq, i), &p, $descriptor(ptdp_p2p_op*), 0)) || !p) {
      Py_DECREF(seq);
      SWIG_exception_fail(SWIG_TypeError, "expected a sequence of ptdp_p2p_op");
    }
    array[i] = *(ptdp_p2p_op*)p;
  }
  Py_DECREF(seq);
  $1 = array;
  $2 = (int32_t)n;
}
%typemap(freearg) (const ptdp_p2p_op* ops, int32_t count) { free(array$argnum); }

/* ---------------------------------------------------------------------------------------- */
/* Pipeline callbacks: a Python stage object stands for ptdp_stage_callbacks. It has
 * activation_shape (a sequence of extents), split_backward (true: a separate weight-gradient
 * call) and the methods
 *   _forward(chunk, microbatch, input)          -> (status, output handle or None)
 *   _backward_input(chunk, microbatch, grad)    -> (status, grad_input handle or None)
 *   _backward_weight(chunk, microbatch)         -> status
 * where input and grad are borrowed tensor handles or None. The trampolines below take the GIL
 * (the wrapper releases it around ptdp_pipeline_run), and any Python exception that escapes a
 * method is stored as the stage's `error` attribute and reported to the library as
 * PTDP_ERR_INTERNAL, so nothing unwinds through C. */

%{
static ptdp_status ptdpy_stage_failed(PyObject* stage) {
  PyObject *type = NULL, *value = NULL, *traceback = NULL;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (value && traceback) PyException_SetTraceback(value, traceback);
  if (value && PyObject_SetAttrString(stage, "error", value) != 0) PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  return PTDP_ERR_INTERNAL;
}

static ptdp_status ptdpy_stage_call(void* user_data, const char* method, int32_t chunk, int32_t microbatch,
                                    ptdp_tensor tensor, ptdp_tensor* out) {
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* stage = (PyObject*)user_data;
  ptdp_status status = PTDP_ERR_INTERNAL;
  PyObject* result = NULL;
  if (out) {
    PyObject* handle = tensor ? SWIG_NewPointerObj(tensor, SWIGTYPE_p_ptdp_tensor_impl, 0) : SWIG_Py_Void();
    result = PyObject_CallMethod(stage, method, "iiN", (int)chunk, (int)microbatch, handle);
  } else {
    result = PyObject_CallMethod(stage, method, "ii", (int)chunk, (int)microbatch);
  }
  if (result) {
    long code = -1;
    PyObject* handle = Py_None;
    if (out && PyTuple_Check(result) && PyTuple_GET_SIZE(result) == 2) {
      code = PyLong_AsLong(PyTuple_GET_ITEM(result, 0));
      handle = PyTuple_GET_ITEM(result, 1);
    } else if (!out) {
      code = PyLong_AsLong(result);
    } else {
      PyErr_SetString(PyExc_TypeError, "a stage method must return (status, handle)");
    }
    if (!PyErr_Occurred()) {
      void* p = NULL;
      if (out && handle != Py_None && !SWIG_IsOK(SWIG_ConvertPtr(handle, &p, SWIGTYPE_p_ptdp_tensor_impl, 0))) {
        PyErr_SetString(PyExc_TypeError, "a stage method must return a tensor handle or None");
      } else {
        if (out) *out = (ptdp_tensor)p;
        status = (ptdp_status)code;
      }
    }
    Py_DECREF(result);
  }
  if (PyErr_Occurred()) status = ptdpy_stage_failed(stage);
  PyGILState_Release(gil);
  return status;
}

static ptdp_status ptdpy_forward(void* user_data, int32_t chunk, int32_t microbatch, ptdp_tensor input,
                                 ptdp_tensor* output) {
  return ptdpy_stage_call(user_data, "_forward", chunk, microbatch, input, output);
}

static ptdp_status ptdpy_backward_input(void* user_data, int32_t chunk, int32_t microbatch, ptdp_tensor grad_output,
                                        ptdp_tensor* grad_input) {
  return ptdpy_stage_call(user_data, "_backward_input", chunk, microbatch, grad_output, grad_input);
}

static ptdp_status ptdpy_backward_weight(void* user_data, int32_t chunk, int32_t microbatch) {
  return ptdpy_stage_call(user_data, "_backward_weight", chunk, microbatch, NULL, NULL);
}
%}

%typemap(in) const ptdp_stage_callbacks* callbacks (ptdp_stage_callbacks cb) {
  ptdp_stage_callbacks_init(&cb);
  $1 = NULL;
  if ($input != Py_None) {
    PyObject* shape = PyObject_GetAttrString($input, "activation_shape");
    PyObject* split = shape ? PyObject_GetAttrString($input, "split_backward") : NULL;
    int split_backward = split ? PyObject_IsTrue(split) : -1;
    Py_ssize_t n = 0;
    int shape_ok = shape && ptdpy_int64_sequence(shape, cb.activation_shape, PTDP_MAX_DIMS, &n,
                                                 "activation_shape") == 0;
    Py_XDECREF(shape);
    Py_XDECREF(split);
    if (!shape_ok || split_backward < 0) SWIG_fail;
    cb.activation_ndim = (int32_t)n;
    cb.forward = ptdpy_forward;
    cb.backward_input = ptdpy_backward_input;
    cb.backward_weight = split_backward ? ptdpy_backward_weight : NULL;
    cb.user_data = $input;
    $1 = &cb;
  }
}

/* ---------------------------------------------------------------------------------------- */
/* Trainer options: a Python object stands for ptdp_trainer_options. It has `runtime` (a runtime
 * handle or None), `print_log` (bool) and `has_callback` (bool: its method
 * _on_iteration(report) is called after every iteration with a ptdp_iteration_report it may
 * keep, and returns true to stop the run). An exception escaping _on_iteration is stored as the
 * object's `error` attribute and stops the run, so nothing unwinds through C. */

%{
static int32_t ptdpy_on_iteration(const ptdp_iteration_report* report, void* user_data) {
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* owner = (PyObject*)user_data;
  int32_t stop = 1;
  ptdp_iteration_report* copy = (ptdp_iteration_report*)malloc(sizeof(ptdp_iteration_report));
  if (copy) {
    memcpy(copy, report, sizeof(ptdp_iteration_report));
    PyObject* arg = SWIG_NewPointerObj(copy, SWIGTYPE_p_ptdp_iteration_report, SWIG_POINTER_OWN);
    PyObject* result = PyObject_CallMethod(owner, "_on_iteration", "N", arg);
    if (result) {
      int truth = PyObject_IsTrue(result);
      if (truth >= 0) stop = truth ? 1 : 0;
      Py_DECREF(result);
    }
  } else {
    PyErr_NoMemory();
  }
  if (PyErr_Occurred()) (void)ptdpy_stage_failed(owner);
  PyGILState_Release(gil);
  return stop;
}
%}

%typemap(in) const ptdp_trainer_options* options (ptdp_trainer_options o) {
  ptdp_trainer_options_init(&o);
  $1 = NULL;
  if ($input != Py_None) {
    PyObject* runtime = PyObject_GetAttrString($input, "runtime");
    PyObject* print_log = runtime ? PyObject_GetAttrString($input, "print_log") : NULL;
    PyObject* callback = print_log ? PyObject_GetAttrString($input, "has_callback") : NULL;
    int print_flag = print_log ? PyObject_IsTrue(print_log) : -1;
    int call_flag = callback ? PyObject_IsTrue(callback) : -1;
    void* rt = NULL;
    int rt_ok = runtime && (runtime == Py_None ||
                            SWIG_IsOK(SWIG_ConvertPtr(runtime, &rt, SWIGTYPE_p_ptdp_runtime_impl, 0)));
    Py_XDECREF(runtime);
    Py_XDECREF(print_log);
    Py_XDECREF(callback);
    if (!rt_ok && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "runtime must be a runtime handle or None");
    if (!rt_ok || print_flag < 0 || call_flag < 0) SWIG_fail;
    o.runtime = (ptdp_runtime)rt;
    o.print_log = print_flag;
    if (call_flag) {
      o.on_iteration = ptdpy_on_iteration;
      o.user_data = $input;
    }
    $1 = &o;
  }
}

/* ptdp_trainer_last_report: the report is an output, returned as a new struct. */
%typemap(in, numinputs=0) ptdp_iteration_report* report (ptdp_iteration_report temp) {
  memset(&temp, 0, sizeof temp);
  temp.struct_size = sizeof temp;
  $1 = &temp;
}
%typemap(argout) ptdp_iteration_report* report {
  ptdp_iteration_report* copy = (ptdp_iteration_report*)malloc(sizeof(ptdp_iteration_report));
  if (!copy) SWIG_fail;
  memcpy(copy, $1, sizeof(ptdp_iteration_report));
  $result = SWIG_Python_AppendOutput($result, SWIG_NewPointerObj(copy, SWIGTYPE_p_ptdp_iteration_report, SWIG_POINTER_OWN));
}

/* ptdp_model_moe_metrics, ptdp_trainer_moe_metrics: the figures are an output, returned as a new
 * struct; the loads go into a writable int64 buffer of rows of three (layer, min, max), or None
 * for none (capacity is in rows). */
%typemap(in, numinputs=0) ptdp_moe_metrics* metrics (ptdp_moe_metrics temp) {
  memset(&temp, 0, sizeof temp);
  temp.struct_size = sizeof temp;
  $1 = &temp;
}
%typemap(argout) ptdp_moe_metrics* metrics {
  ptdp_moe_metrics* copy = (ptdp_moe_metrics*)malloc(sizeof(ptdp_moe_metrics));
  if (!copy) SWIG_fail;
  memcpy(copy, $1, sizeof(ptdp_moe_metrics));
  $result = SWIG_Python_AppendOutput($result, SWIG_NewPointerObj(copy, $descriptor(ptdp_moe_metrics*), SWIG_POINTER_OWN));
}
PTDPY_BUFFER2(%arg((ptdp_moe_layer_load* loads, int64_t capacity)), 1, 8, "qQlL", 1, 0)
%typemap(check) (ptdp_moe_layer_load* loads, int64_t capacity) { $2 = (int64_t)($2 / 3); }

/* ---------------------------------------------------------------------------------------- */
/* Preprocessing options: a Python object stands for ptdp_preprocess_options. Its `options`
 * attribute is the struct with every field but the two lists set, and `inputs` and `json_keys`
 * are sequences of str (the struct's own inputs and json_keys are not read): the arrays of C
 * strings point into those str objects, held for the call. ptdp_preprocess's result is an
 * output, returned as a new struct. */

%typemap(in) const ptdp_preprocess_options* options (ptdp_preprocess_options o, PyObject* input_seq = NULL,
                                                      PyObject* key_seq = NULL, const char** input_array = NULL,
                                                      const char** key_array = NULL) {
  PyObject* struct_obj = PyObject_GetAttrString($input, "options");
  PyObject* input_obj = struct_obj ? PyObject_GetAttrString($input, "inputs") : NULL;
  PyObject* key_obj = input_obj ? PyObject_GetAttrString($input, "json_keys") : NULL;
  void* p = NULL;
  int ok = key_obj && SWIG_IsOK(SWIG_ConvertPtr(struct_obj, &p, $descriptor(ptdp_preprocess_options*), 0)) && p;
  if (key_obj && !ok && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "options must be a ptdp_preprocess_options");
  Py_ssize_t num_inputs = ok ? ptdpy_string_array(input_obj, "inputs", &input_seq, &input_array) : -1;
  Py_ssize_t num_keys = num_inputs >= 0 ? ptdpy_string_array(key_obj, "json_keys", &key_seq, &key_array) : -1;
  Py_XDECREF(struct_obj);
  Py_XDECREF(input_obj);
  Py_XDECREF(key_obj);
  if (num_keys < 0) SWIG_fail;
  memcpy(&o, p, sizeof o);
  o.inputs = input_array;
  o.num_inputs = (int32_t)num_inputs;
  o.json_keys = num_keys > 0 ? key_array : NULL;
  o.num_json_keys = (int32_t)num_keys;
  $1 = &o;
}
%typemap(freearg) const ptdp_preprocess_options* options {
  free((void*)input_array$argnum);
  free((void*)key_array$argnum);
  Py_XDECREF(input_seq$argnum);
  Py_XDECREF(key_seq$argnum);
}

%typemap(in, numinputs=0) ptdp_preprocess_result* result (ptdp_preprocess_result temp) {
  memset(&temp, 0, sizeof temp);
  temp.struct_size = sizeof temp;
  $1 = &temp;
}
%typemap(argout) ptdp_preprocess_result* result {
  ptdp_preprocess_result* copy = (ptdp_preprocess_result*)malloc(sizeof(ptdp_preprocess_result));
  if (!copy) SWIG_fail;
  memcpy(copy, $1, sizeof(ptdp_preprocess_result));
  $result = SWIG_Python_AppendOutput($result, SWIG_NewPointerObj(copy, $descriptor(ptdp_preprocess_result*), SWIG_POINTER_OWN));
}

/* ---------------------------------------------------------------------------------------- */
/* The header itself. SWIG does not need the export attribute. */

#define __attribute__(x)
/* The deprecated 0.1 name of ptdp_model_pipeline_forward_backward stays out of Python
 * (ptdp.Model.train_step is its alias there), and so do the `_masked` forms deprecated in 0.4
 * (the masks are ptdp_pipeline_options' now). */
%ignore ptdp_model_train_step;
%ignore ptdp_model_forward_backward_masked;
%ignore ptdp_model_forward_masked;
%ignore ptdp_model_pipeline_forward_backward_masked;
%ignore ptdp_train_iteration_masked;
%ignore ptdp_model_evaluate_masked;
/* Strings set in option structs are copied and never freed (a few bytes per assignment). */
#pragma SWIG nowarn=451
%include "ptdp/ptdp.h"
