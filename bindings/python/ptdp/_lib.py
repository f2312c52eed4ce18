"""Shared machinery of the Pythonic layer: the raw module, enums and option structs built from
it (nothing the header declares is repeated here), handle ownership and array conversion."""

import enum
import warnings

import numpy as np

from . import _ptdp
from .errors import error_for

_raw = _ptdp


def make_enum(name, prefix, doc=None):
    """An IntEnum of every constant of the raw module that starts with ``prefix``."""
    members = {k[len(prefix):]: getattr(_raw, k) for k in dir(_raw)
               if k.startswith(prefix) and isinstance(getattr(_raw, k), int)}
    cls = enum.IntEnum(name, members, module=__name__.rsplit(".", 1)[0])
    if doc:
        cls.__doc__ = doc
    return cls


def struct_fields(struct_name):
    """The settable fields of an options struct of the header, in declaration order."""
    cls = getattr(_raw, struct_name)
    return [k for k, v in vars(cls).items()
            if isinstance(v, property) and not k.startswith("_") and k not in ("this", "thisown", "struct_size")]


def make_struct(struct_name, values=None, **fields):
    """A header struct filled by its ``*_init`` function, then from ``values`` (a mapping, or a
    struct of the same type) and keyword fields (None leaves a field as it is). Unknown names
    raise TypeError."""
    cls = getattr(_raw, struct_name)
    if isinstance(values, cls) and not fields:
        return values
    struct = cls()
    init = getattr(_raw, struct_name + "_init", None)
    if init is not None:
        init(struct)
    if isinstance(values, cls):
        values = struct_to_dict(values)
    merged = dict(values or {})
    merged.update({k: v for k, v in fields.items() if v is not None})  # None: keep the default
    known = struct_fields(struct_name)
    for key, value in merged.items():
        if key not in known:
            raise TypeError(f"{struct_name} has no field '{key}'; fields: {', '.join(known)}")
        if value is None:
            continue
        if isinstance(value, enum.IntEnum):
            value = int(value)
        setattr(struct, key, value)
    return struct


def struct_to_dict(struct):
    """The fields of a header struct as a dict (struct_size left out)."""
    return {k: getattr(struct, k) for k in struct_fields(type(struct).__name__)}


def as_int32(array, name, count=None):
    """A C-contiguous int32 array of ``array``; no copy when it already is one."""
    a = np.ascontiguousarray(array, dtype=np.int32)
    if count is not None and a.size != count:
        raise ValueError(f"{name} has {a.size} elements; expected {count}")
    return a


def as_float32(array, name, count=None):
    """A C-contiguous float32 array of ``array``; no copy when it already is one."""
    a = np.ascontiguousarray(array, dtype=np.float32)
    if count is not None and a.size != count:
        raise ValueError(f"{name} has {a.size} elements; expected {count}")
    return a


def out_array(out, shape, dtype, name):
    """``out`` checked to be a writable C-contiguous array of ``shape`` and ``dtype``, or a new one."""
    if out is None:
        return np.empty(shape, dtype=dtype)
    if not isinstance(out, np.ndarray) or out.dtype != dtype or out.size != int(np.prod(shape)) \
            or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"{name}: out must be a writable C-contiguous {np.dtype(dtype).name} array of "
                         f"{int(np.prod(shape))} elements")
    return out


def filled(call, size=1 << 16):
    """The bytes a call writes into a char buffer under the count/capacity protocol, the buffer
    grown until they fit: ``call(buffer)`` returns ``((status, message), length)``, the length
    being reported also when the buffer is too small. A failure that is not about room raises."""
    size = max(int(size), 1)
    while True:
        buffer = bytearray(size)
        (status, message), length = call(buffer)
        if status == 0:
            return bytes(buffer[:length])
        if length + 1 <= size:
            raise error_for(status, message)
        size = length + 1


class Handle:
    """An owned library handle: ``close()`` releases it (idempotent), ``with`` closes it on exit.

    Objects keep the objects they depend on alive (a model its groups, groups their runtime), so
    garbage collection never destroys a parent before its children. Handles whose destruction is
    collective over ranks (runtimes, groups) are not released by the garbage collector, which
    runs at different times on different ranks; close them, or use ``with``.
    """

    _destroy = None        # the raw *_destroy function
    _collective = False    # destruction is collective: never from __del__

    def __init__(self, ptr, *keep, owned=True):
        self._ptr = ptr
        self._owned = owned
        self._keep = keep

    @property
    def closed(self):
        return self._ptr is None

    @property
    def handle(self):
        """The raw SWIG handle (for the functions of ``ptdp.raw``)."""
        if self._ptr is None:
            raise ValueError(f"{type(self).__name__} is closed")
        return self._ptr

    def close(self):
        """Releases the handle; later calls do nothing."""
        if self._ptr is not None:
            ptr = self._ptr
            if self._owned:
                type(self)._destroy(ptr)
            self._ptr = None
            self._keep = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        if getattr(self, "_ptr", None) is None or not self._owned:
            return
        if self._collective:
            warnings.warn(f"unclosed {type(self).__name__}: close it (collectively) or use 'with'",
                          ResourceWarning, stacklevel=2)
            return
        try:
            self.close()
        except Exception:  # noqa: BLE001 - nothing may escape a finaliser
            pass

    def __repr__(self):
        return f"<ptdp.{type(self).__name__}{' (closed)' if self.closed else ''}>"


def handle_of(obj):
    """The raw handle of a wrapper object, or the object itself when it is already raw (or None)."""
    return obj.handle if isinstance(obj, Handle) else obj
