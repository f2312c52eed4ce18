"""Running a pipeline schedule on a user's own model chunks, written in Python.

A stage object describes this rank's chunks (see :class:`Stage`); :func:`pipeline_run` hands it
to ``ptdp_pipeline_run``, whose callbacks reach it through C trampolines in the extension that
take the GIL. Activations and gradients arrive as numpy arrays and leave as numpy arrays (or
ptdp Tensors, which are handed over to the library without a copy). An exception raised by a
stage stops the run: the library returns a failure status, and :func:`pipeline_run` raises
:class:`ptdp.CallbackError` with the library's message, chained to the original exception.
"""

import numpy as np

from ._lib import _raw, make_struct
from .errors import CallbackError, Error, InternalError
from .tensor import DType, Tensor

_SUCCESS = 0


class Stage:
    """Base class (optional) of a user's pipeline chunks.

    ``activation_shape``: shape of the f32 activation passed between chunks (and its gradient).
    ``forward(chunk, microbatch, input)``: ``input`` is the previous chunk's output (numpy, None
    for chunk 0); return this chunk's output (None from the last chunk, which computes its loss).
    ``backward_input(chunk, microbatch, grad_output)``: ``grad_output`` is None for the last
    chunk; return the gradient of the chunk's input (None from chunk 0).
    ``backward_weight(chunk, microbatch)``: optional; define it to receive the weight-gradient
    part separately (needed by zero-bubble schedules), else compute it in backward_input.

    A one-chunk model, loss = a * sum(x), run on one pipeline rank:

    >>> import numpy as np, ptdp
    >>> class Scale(ptdp.Stage):
    ...     activation_shape = (3,)
    ...     def __init__(self):
    ...         self.a, self.grad_a, self.inputs = 2.0, 0.0, {}
    ...     def forward(self, chunk, microbatch, input):
    ...         self.inputs[microbatch] = np.full(3, microbatch + 1.0, dtype=np.float32)
    ...         return None                          # the last chunk: it computes its loss
    ...     def backward_input(self, chunk, microbatch, grad_output):
    ...         self.grad_a += float(self.inputs.pop(microbatch).sum())
    ...         return None                          # chunk 0 has no input to differentiate
    >>> stage = Scale()
    >>> with ptdp.Runtime() as rt, rt.groups() as groups, ptdp.Schedule("gpipe", 1, 2) as schedule:
    ...     ptdp.pipeline_run(groups, schedule, stage)
    >>> stage.grad_a                                 # 3 * 1 + 3 * 2
    9.0
    """

    activation_shape = ()

    def forward(self, chunk, microbatch, input):
        raise NotImplementedError

    def backward_input(self, chunk, microbatch, grad_output):
        raise NotImplementedError


class _Dispatcher:
    """What the extension's trampolines call (see ptdp.i): converts between handles and numpy
    arrays and keeps the first exception instead of letting it unwind through C."""

    def __init__(self, stage):
        self.stage = stage
        self.activation_shape = tuple(int(x) for x in stage.activation_shape)
        self.split_backward = callable(getattr(stage, "backward_weight", None))
        self.error = None

    def _read(self, handle):
        if handle is None:
            return None
        t = Tensor._wrap(handle, owned=False)  # borrowed for the call
        return t.numpy().reshape(self.activation_shape)

    def _give(self, value):
        """A handle the library takes over, or None."""
        if value is None:
            return None
        if isinstance(value, Tensor):
            return value._hand_over()  # the library destroys it
        a = np.ascontiguousarray(value, dtype=np.float32)
        options = make_struct("ptdp_tensor_options", dtype=DType.F32)
        return _raw.ptdp_tensor_create(options, a.shape, a)

    def _fail(self, exc):
        if self.error is None:
            self.error = exc
        return exc.status if isinstance(exc, Error) and exc.status else InternalError.status

    def _forward(self, chunk, microbatch, handle):
        try:
            return _SUCCESS, self._give(self.stage.forward(chunk, microbatch, self._read(handle)))
        except BaseException as exc:  # noqa: BLE001 - reported after the run
            return self._fail(exc), None

    def _backward_input(self, chunk, microbatch, handle):
        try:
            return _SUCCESS, self._give(self.stage.backward_input(chunk, microbatch, self._read(handle)))
        except BaseException as exc:  # noqa: BLE001
            return self._fail(exc), None

    def _backward_weight(self, chunk, microbatch):
        try:
            self.stage.backward_weight(chunk, microbatch)
            return _SUCCESS
        except BaseException as exc:  # noqa: BLE001
            return self._fail(exc)


def pipeline_run(groups, schedule, stage, trace_path=None, scatter_gather=None):
    """Runs this rank's actions of ``schedule`` on ``stage`` (collective over the pipeline group).

    Raises :class:`ptdp.CallbackError` (``__cause__`` = the stage's exception) when a stage
    method raised; KeyboardInterrupt and SystemExit are re-raised as they are.
    """
    dispatcher = _Dispatcher(stage)
    options = make_struct("ptdp_pipeline_options", trace_path=None if trace_path is None else str(trace_path),
                          scatter_gather=scatter_gather)
    try:
        _raw.ptdp_pipeline_run(groups.handle, schedule.handle, dispatcher, options)
    except Error as err:
        cause = dispatcher.error
        if cause is None:
            raise
        if not isinstance(cause, Exception):
            raise cause from None
        raise CallbackError(f"{err.message} ({type(cause).__name__}: {cause})", err.status) from cause
    if dispatcher.error is not None:  # a failure the library did not report (should not happen)
        raise CallbackError(str(dispatcher.error), InternalError.status) from dispatcher.error
