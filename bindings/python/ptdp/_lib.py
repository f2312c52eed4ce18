"""Shared machinery of the Pythonic layer: the raw module, enums and option structs built from
it (nothing the header declares is repeated here), handle ownership and array conversion."""

import enum
import operator
import warnings

import numpy as np

from . import _ptdp
from .errors import InvalidArgumentError, error_for

_raw = _ptdp

# ---------------------------------------------------------------------------------------------
# Enums. Every enum of the header is an IntEnum (IntFlag for the flag sets) made from the raw
# module's constants and registered under its C type name, so that one function, enum_member,
# turns any spelling a caller may use into a member: the member itself, its int, or its name as
# a string in any case, "-" and "_" alike ("1f1b", "ZB-H1", "bf16", "learned_absolute"), or one
# of the enum's aliases (ptdp-train's and Megatron's spellings where they differ, such as
# "GPT2BPETokenizer" or "fp16"). The extension's typemap for enum arguments and fields (ptdp.i)
# calls enum_value, so option structs and raw calls take the same names.

_ENUMS = {}    # C type name -> enum class
_NAMES = {}    # enum class -> {normalised spelling: member}
_SHOWN = {}    # enum class -> the spellings an error message lists


def _spelling(name):
    """The form names are compared in: lower case, without "-", "_" or spaces."""
    return "".join(c for c in name.lower() if c not in "-_ ")


def make_enum(name, c_type, prefix, doc, aliases=None, flags=False):
    """The IntEnum (IntFlag with ``flags``) ``name`` of the header's enum ``c_type``, with a
    member for every constant of the raw module that starts with ``prefix``. ``aliases`` maps
    further spellings (ptdp-train's and Megatron's) to member names."""
    constants = sorted((getattr(_raw, k), k) for k in dir(_raw)
                       if k.startswith(prefix) and isinstance(getattr(_raw, k), int))
    members = {k[len(prefix):]: v for v, k in constants}  # by value, as the header lists them
    cls = (enum.IntFlag if flags else enum.IntEnum)(name, members, module=__name__.rsplit(".", 1)[0])
    cls.__doc__ = doc
    names = {}
    shown = []
    for spelling, member_name in [(m, m) for m in members] + list((aliases or {}).items()):
        key = _spelling(spelling)
        if names.setdefault(key, cls[member_name]) is not cls[member_name]:
            raise AssertionError(f"{name}: the spelling {spelling!r} names two members")
        shown.append(spelling.lower() if spelling in members else spelling)
    _ENUMS[c_type] = cls
    _NAMES[cls] = names
    _SHOWN[cls] = shown
    return cls


def _refused(what, value, cls):
    return InvalidArgumentError(f"{what} = {value} is not a ptdp.{cls.__name__}; expected one of "
                                f"{', '.join(repr(s) for s in _SHOWN[cls])} (any case, '-' or '_' alike), a member "
                                f"or its int")


def enum_member(cls, value, what):
    """The member of enum ``cls`` that ``value`` names: a member, an int (or numpy integer), or a
    name as :func:`make_enum` describes; a flag set also takes names joined by "|"
    ("replicated|no_weight_decay"). Anything else raises :class:`ptdp.InvalidArgumentError`
    (unknown names and numbers, a member of another enum) naming ``what`` and listing the
    names, or TypeError (not a name or an integer)."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        if issubclass(cls, enum.IntFlag) and "|" in value:
            member = cls(0)
            for part in value.split("|"):
                member |= enum_member(cls, part.strip(), what)
            return member
        member = _NAMES[cls].get(_spelling(value))
        if member is None:
            raise _refused(what, repr(value), cls)
        return member
    if isinstance(value, enum.Enum):
        raise _refused(what, f"{type(value).__name__}.{value.name}", cls)
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be a name (str), a ptdp.{cls.__name__} or an int, not "
                        f"{type(value).__name__}") from None
    try:
        return cls(number)
    except ValueError:
        raise _refused(what, number, cls) from None


def enum_value(c_type, function, name, value):
    """The int the extension passes for ``value`` as an argument or field of the header's enum
    type ``c_type`` (ptdp.i calls this for whatever is not a plain int, which it passes on for
    the library to check). ``function`` and ``name`` are the wrapped C function and its
    parameter; a field's setter is named STRUCT_FIELD_set."""
    suffix = f"_{name}_set"
    what = f"{function[:-len(suffix)]}.{name}" if function.endswith(suffix) else f"{function}: {name}"
    cls = _ENUMS.get(c_type)
    if cls is None:  # ptdp_status: a result, never spelled by name
        return operator.index(value)
    return int(enum_member(cls, value, what))


# ---------------------------------------------------------------------------------------------
# Option structs.

def struct_fields(struct_name):
    """The settable fields of an options struct of the header, in declaration order."""
    cls = getattr(_raw, struct_name)
    return [k for k, v in vars(cls).items()
            if isinstance(v, property) and not k.startswith("_") and k not in ("this", "thisown", "struct_size")]


def make_struct(struct_name, values=None, **fields):
    """A header struct filled by its ``*_init`` function, then from ``values`` (a mapping, or a
    struct of the same type) and keyword fields (None leaves a field as it is). Unknown names
    raise TypeError. Enum fields take names ("adam", "bf16", "1f1b"), members and ints (see
    :func:`enum_member`)."""
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
        if value is not None:
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


class _Resource:
    """One library handle as the library sees it: the raw pointer, its destroy function, the
    handle it was created on (``parent``) and the open handles created on it (``children``, in
    creation order).

    It is kept apart from the wrapper objects users hold, and a parent holds its children's
    records strongly: a parent must be able to close a child whose wrapper the garbage
    collector finalises in the same cycle, and the collector clears weak references before it
    runs finalisers, in no set order. A child's record leaves its parent's once released."""

    __slots__ = ("ptr", "destroy", "kind", "parent", "children", "closed_with", "always_released")

    def __init__(self, ptr, destroy, kind, parent, always_released):
        self.ptr = ptr
        self.destroy = destroy                  # None: borrowed, or handed over to the library
        self.kind = kind                        # the wrapper's class name, for messages
        self.parent = parent
        self.children = {}                      # an ordered set: _Resource -> None
        self.closed_with = None                 # the kind of the parent whose close() closed it
        self.always_released = always_released  # destroy releases the handle even when it fails
        if parent is not None:
            parent.children[self] = None

    def close(self, closed_with=None):
        """Closes the children, newest first, then this handle. A child's failure is raised
        after the others are closed; a child left open (refused by the library) leaves this
        handle open too, as the library would refuse to destroy it."""
        if self.ptr is None:
            return
        errors = []
        for child in reversed(list(self.children)):
            try:
                child.close(self.kind)
            except Exception as exc:  # noqa: BLE001 - raised below, after the siblings
                errors.append(exc)
        if not self.children:
            try:
                if self.destroy is not None:
                    self.destroy(self.ptr)
                released = True
            except Exception as exc:  # noqa: BLE001 - raised below
                errors.append(exc)
                released = self.always_released
            if released:
                self.forget(closed_with)
        if errors:
            raise errors[0]

    def forget(self, closed_with=None):
        """Marks the handle closed without destroying it (done, or handed over to the library)."""
        self.ptr = None
        self.closed_with = closed_with
        if self.parent is not None:
            self.parent.children.pop(self, None)
            self.parent = None


class Handle:
    """An owned library handle: ``close()`` releases it (idempotent), ``with`` closes it on exit.

    Lifetimes follow the library's dependencies (a model on its groups, an optimizer on its
    model, groups on their runtime):

    - a child keeps its parent object alive, so the garbage collector never destroys a parent
      under a living child;
    - a parent's ``close()`` (and so leaving its ``with`` block) first closes the children still
      open, newest first, then itself: a closed child raises ValueError when used.

    Handles whose destruction is collective over ranks (runtimes, groups, trainers) are never
    released by the garbage collector, which runs at different times on different ranks: close
    them, or their parent, at the same point on every rank (a ``with`` block does). Children are
    closed in reverse creation order, which is the same on every rank, since creating a
    collective handle is itself collective.
    """

    _destroy = None                    # the raw *_destroy function
    _collective = False                # destruction is collective: never from __del__
    _destroy_always_releases = False   # the destroy function releases the handle even when it fails

    def __init__(self, ptr, *keep, parent=None, owned=True):
        """``ptr``: the raw handle; ``keep``: objects to keep alive with it; ``parent``: the
        wrapper of the handle it was created on (kept alive, and closing it closes this);
        ``owned=False``: borrowed, never destroyed here."""
        self._resource = _Resource(ptr, type(self)._destroy if owned else None, type(self).__name__,
                                   None if parent is None else parent._resource, self._destroy_always_releases)
        self._keep = keep if parent is None else (parent,) + keep

    @property
    def closed(self):
        resource = getattr(self, "_resource", None)  # None: __init__ failed before the handle existed
        return resource is None or resource.ptr is None

    @property
    def handle(self):
        """The raw SWIG handle (for the functions of ``ptdp.raw``)."""
        resource = self._resource
        if resource.ptr is None:
            why = f" (closed with its {resource.closed_with})" if resource.closed_with else ""
            raise ValueError(f"{resource.kind} is closed{why}")
        return resource.ptr

    def close(self):
        """Closes the handles created on this one that are still open, newest first, then
        releases this one; later calls do nothing."""
        self._resource.close()
        self._keep = ()

    def _hand_over(self):
        """The raw handle, now the library's to destroy: this object is closed without
        destroying it."""
        ptr = self.handle
        self._resource.forget()
        self._keep = ()
        return ptr

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        resource = getattr(self, "_resource", None)
        if resource is None or resource.ptr is None or resource.destroy is None:
            return
        if self._collective:
            later = f"closing its {resource.parent.kind} releases it" if resource.parent else "it stays allocated"
            warnings.warn(f"unclosed {resource.kind}: {later}; close it at the same point on every rank, or use "
                          f"'with'", ResourceWarning, stacklevel=2)
            return
        try:
            resource.close()
        except Exception:  # noqa: BLE001 - nothing may escape a finaliser
            pass

    def __repr__(self):
        return f"<ptdp.{type(self).__name__}{' (closed)' if self.closed else ''}>"


def handle_of(obj):
    """The raw handle of a wrapper object, or the object itself when it is already raw (or None)."""
    return obj.handle if isinstance(obj, Handle) else obj
