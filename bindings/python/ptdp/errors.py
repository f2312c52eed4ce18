"""Exceptions for the library's status codes.

Every failed C call raises the subclass of :class:`Error` matching its ``ptdp_status``; the
exception's message is the library's ``ptdp_last_error()``, which names the function and the
argument at fault. Each subclass also derives from the built-in exception a Python caller
would expect (an invalid argument is a ``ValueError``, an I/O failure an ``OSError``, ...).

>>> import ptdp
>>> try:
...     ptdp.Tensor.zeros((2, -3))
... except ValueError as e:
...     type(e).__name__, e.status, e.message
('InvalidArgumentError', 1, 'ptdp_tensor_create: shape[1] = -3 is negative')
"""

__all__ = [
    "Error", "InvalidArgumentError", "OutOfMemoryError", "UnsupportedError", "InternalError",
    "CommTimeoutError", "CommunicationError", "DeviceError", "FileError", "InvalidStateError",
    "CallbackError", "error_for",
]


class Error(Exception):
    """A ptdp call failed. ``status`` is the ``ptdp_status`` code, ``message`` the library's."""

    status = None

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status

    def __str__(self):
        return self.message


class InvalidArgumentError(Error, ValueError):
    """PTDP_ERR_INVALID_ARGUMENT: an argument was NULL, out of range or inconsistent."""
    status = 1


class OutOfMemoryError(Error, MemoryError):
    """PTDP_ERR_OUT_OF_MEMORY."""
    status = 2


class UnsupportedError(Error, NotImplementedError):
    """PTDP_ERR_UNSUPPORTED: valid, but not available in this build or on this device."""
    status = 3


class InternalError(Error, RuntimeError):
    """PTDP_ERR_INTERNAL: a bug in ptdp."""
    status = 4


class CommTimeoutError(Error, TimeoutError):
    """PTDP_ERR_TIMEOUT: a blocking operation did not complete in time."""
    status = 5


class CommunicationError(Error, RuntimeError):
    """PTDP_ERR_COMMUNICATION: MPI or NCCL reported an error."""
    status = 6


class DeviceError(Error, RuntimeError):
    """PTDP_ERR_DEVICE: the GPU runtime reported an error."""
    status = 7


class FileError(Error, OSError):
    """PTDP_ERR_IO: reading or writing a file failed."""
    status = 8

    def __init__(self, message, status=None):
        Error.__init__(self, message, status)


class InvalidStateError(Error, RuntimeError):
    """PTDP_ERR_INVALID_STATE: the call is not valid in the object's current state."""
    status = 9


class CallbackError(Error):
    """A Python pipeline callback raised; the original exception is ``__cause__``."""


_BY_STATUS = {cls.status: cls for cls in (
    InvalidArgumentError, OutOfMemoryError, UnsupportedError, InternalError, CommTimeoutError,
    CommunicationError, DeviceError, FileError, InvalidStateError)}


def error_for(status, message):
    """The exception for a failed call (used by the extension module)."""
    cls = _BY_STATUS.get(int(status), Error)
    return cls(message, int(status))
