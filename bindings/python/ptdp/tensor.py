"""Tensors: dense row-major arrays owned by the library, filled from and read into numpy arrays
through the buffer protocol (one copy, straight between the numpy buffer and the tensor)."""

import numpy as np

from ._lib import Handle, _raw, enum_member, make_enum, make_struct, out_array

DType = make_enum("DType", "ptdp_dtype", "PTDP_DTYPE_",
                  "Element type (ptdp_dtype): F32, BF16, F16, I32, I64; also named as numpy and ptdp-train name "
                  "them (\"float32\", \"fp16\", \"bfloat16\", \"int64\", ...).",
                  aliases={"fp32": "F32", "float32": "F32", "fp16": "F16", "float16": "F16", "bfloat16": "BF16",
                           "int32": "I32", "int64": "I64"})
Device = make_enum("Device", "ptdp_device", "PTDP_DEVICE_", "Kind of device a tensor lives on (ptdp_device): CPU or "
                   "CUDA.")

# bfloat16 has no numpy type: its elements travel as uint16 bit patterns.
_TO_NUMPY = {DType.F32: np.float32, DType.BF16: np.uint16, DType.F16: np.float16,
             DType.I32: np.int32, DType.I64: np.int64}
_FROM_NUMPY = {np.dtype(np.float32): DType.F32, np.dtype(np.float16): DType.F16,
               np.dtype(np.int32): DType.I32, np.dtype(np.int64): DType.I64}


def numpy_dtype(dtype):
    """The numpy dtype that holds a ptdp dtype's elements (uint16 for bf16)."""
    return np.dtype(_TO_NUMPY[enum_member(DType, dtype, "dtype")])


class Tensor(Handle):
    """A library tensor (``ptdp_tensor``).

    ``Tensor(array)`` copies a numpy array (float32, float16, int32 or int64; pass
    ``dtype=DType.BF16`` with uint16 bit patterns); ``Tensor.zeros(shape, dtype)`` makes a zeroed
    one. ``numpy()`` copies the elements out, into ``out`` when given. A dtype is a
    :class:`DType` or its name ("f32", "bf16", "fp16", "float16", "int64", ...).

    >>> import numpy as np, ptdp
    >>> t = ptdp.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    >>> t, t.shape, t.numel
    (<ptdp.Tensor f32 [2, 3]>, (2, 3), 6)
    >>> half = t.cast("bf16")
    >>> half.dtype, half.cast("f32").numpy()
    (<DType.BF16: 1>, array([[0., 1., 2.],
           [3., 4., 5.]], dtype=float32))
    >>> ptdp.Tensor.zeros((2, 2), dtype="int64").fill(7).numpy()
    array([[7, 7],
           [7, 7]])
    """

    _destroy = staticmethod(_raw.ptdp_tensor_destroy)

    def __init__(self, array, dtype=None, device=Device.CPU, device_index=0):
        a = np.ascontiguousarray(array)
        if dtype is None:
            if a.dtype not in _FROM_NUMPY:
                a = a.astype(np.float32)
            dtype = _FROM_NUMPY[a.dtype]
        dtype = enum_member(DType, dtype, "dtype")
        a = np.ascontiguousarray(a, dtype=_TO_NUMPY[dtype])
        options = make_struct("ptdp_tensor_options", dtype=dtype, device=device, device_index=device_index)
        super().__init__(_raw.ptdp_tensor_create(options, a.shape, a if a.size else None))

    @classmethod
    def zeros(cls, shape, dtype=DType.F32, device=Device.CPU, device_index=0):
        """A zero-filled tensor."""
        options = make_struct("ptdp_tensor_options", dtype=enum_member(DType, dtype, "dtype"), device=device,
                              device_index=device_index)
        return cls._wrap(_raw.ptdp_tensor_create(options, tuple(shape), None))

    @classmethod
    def _wrap(cls, ptr, *keep, owned=True):
        t = cls.__new__(cls)
        Handle.__init__(t, ptr, *keep, owned=owned)
        return t

    @property
    def ndim(self):
        return _raw.ptdp_tensor_ndim(self.handle)

    @property
    def shape(self):
        ndim = self.ndim
        shape = np.zeros(max(ndim, 1), dtype=np.int64)
        _raw.ptdp_tensor_shape(self.handle, shape)
        return tuple(int(x) for x in shape[:ndim])

    @property
    def dtype(self):
        return DType(_raw.ptdp_tensor_dtype(self.handle))

    @property
    def device(self):
        kind, index = _raw.ptdp_tensor_device(self.handle)
        return Device(kind), index

    @property
    def numel(self):
        return _raw.ptdp_tensor_numel(self.handle)

    @property
    def nbytes(self):
        return _raw.ptdp_tensor_nbytes(self.handle)

    def numpy(self, out=None):
        """The elements as a numpy array of the tensor's shape, copied into ``out`` when given."""
        a = out_array(out, self.shape, numpy_dtype(self.dtype), "Tensor.numpy")
        _raw.ptdp_tensor_copy_to_host(self.handle, a if a.size else None)
        return a.reshape(self.shape) if out is None else a

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def copy_from(self, array):
        """Overwrites the elements from a numpy array of the same size and element type."""
        a = np.ascontiguousarray(array, dtype=numpy_dtype(self.dtype))
        _raw.ptdp_tensor_copy_from_host(self.handle, a if a.size else None)
        return self

    def fill(self, value):
        """Sets every element to ``value``."""
        _raw.ptdp_tensor_fill(self.handle, float(value))
        return self

    def cast(self, dtype):
        """A new tensor of another floating dtype (round to nearest even)."""
        return Tensor._wrap(_raw.ptdp_tensor_cast(self.handle, dtype))

    def __repr__(self):
        if self.closed:
            return "<ptdp.Tensor (closed)>"
        return f"<ptdp.Tensor {self.dtype.name.lower()} {list(self.shape)}>"


def as_tensor(value):
    """``value`` when it is a Tensor, else a new Tensor copied from it."""
    return value if isinstance(value, Tensor) else Tensor(value)
