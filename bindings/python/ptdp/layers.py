"""Tensor-parallel layers on their own (``ptdp_layer``), for users who build their own models.
Inputs and outputs are :class:`ptdp.Tensor` objects (numpy arrays are accepted as inputs).

>>> import numpy as np, ptdp
>>> with ptdp.Runtime() as rt, rt.groups() as groups:
...     fc = ptdp.column_parallel_linear(groups, 4, 6)           # y = x W^T + b, W split by rows
...     x = np.ones((2, 4), dtype=np.float32)
...     y = fc.forward(0, x)                                     # microbatch 0, kept for its backward
...     dx = fc.backward(0, np.ones((2, 6), dtype=np.float32))
...     w, b = fc.param("weight").numpy(), fc.param("bias").numpy()
...     y, dx.shape, fc.grad("weight").shape, np.allclose(y.numpy(), x @ w.T + b)
(<ptdp.Tensor f32 [2, 6]>, (2, 4), (6, 4), True)
>>> fc.closed                                                    # closed with its groups
True
"""

from ._lib import Handle, _raw
from .tensor import Tensor, as_tensor


class Layer(Handle):
    """A parallel layer; make one with the functions below. It depends on its groups: closing them
    closes the layer (tensors viewing its parameters keep their values)."""

    _destroy = staticmethod(_raw.ptdp_layer_destroy)

    def __init__(self, ptr, groups, has_input_grad=True):
        super().__init__(ptr, parent=groups)
        self._has_input_grad = has_input_grad

    def forward(self, microbatch, input, labels=None):
        """Forward of one microbatch (kept until its backward); returns a new Tensor."""
        x = as_tensor(input)
        y = None if labels is None else as_tensor(labels)
        return Tensor._wrap(_raw.ptdp_layer_forward(self.handle, int(microbatch), x.handle,
                                                    None if y is None else y.handle))

    def backward(self, microbatch, grad_output):
        """Backward of one microbatch; returns the input gradient (None for the embedding)."""
        g = as_tensor(grad_output)
        out = _raw.ptdp_layer_backward(self.handle, int(microbatch), g.handle, self._has_input_grad)
        return None if out is None else Tensor._wrap(out)

    def param(self, which="weight"):
        """A Tensor viewing this rank's slice of "weight" or "bias" (writing it changes the layer)."""
        return Tensor._wrap(_raw.ptdp_layer_param(self.handle, which), self)

    def grad(self, which="weight"):
        """A Tensor viewing this rank's slice of a parameter's gradient."""
        return Tensor._wrap(_raw.ptdp_layer_grad(self.handle, which), self)

    def zero_grad(self):
        _raw.ptdp_layer_zero_grad(self.handle)


def column_parallel_linear(groups, in_features, out_features, bias=True, gather_output=True, init_std=0.02,
                           seed=1234):
    """Megatron's ColumnParallelLinear: the weight's rows split over the tensor group; the
    output gathered when ``gather_output``."""
    return Layer(_raw.ptdp_column_parallel_linear_create(groups.handle, int(in_features), int(out_features),
                                                         int(bool(bias)), int(bool(gather_output)),
                                                         float(init_std), int(seed)), groups)


def row_parallel_linear(groups, in_features, out_features, bias=True, init_std=0.02, seed=1234):
    """Megatron's RowParallelLinear: the weight's columns split over the tensor group, the
    partial outputs summed."""
    return Layer(_raw.ptdp_row_parallel_linear_create(groups.handle, int(in_features), int(out_features),
                                                      int(bool(bias)), float(init_std), int(seed)), groups)


def vocab_parallel_embedding(groups, vocab, hidden, init_std=0.02, seed=1234):
    """Megatron's VocabParallelEmbedding: the vocabulary split over the tensor group."""
    return Layer(_raw.ptdp_vocab_parallel_embedding_create(groups.handle, int(vocab), int(hidden),
                                                           float(init_std), int(seed)), groups, has_input_grad=False)


def vocab_parallel_cross_entropy(groups, vocab, padded_vocab=None):
    """Megatron's vocab-parallel cross entropy of logits split over the tensor group."""
    return Layer(_raw.ptdp_vocab_parallel_cross_entropy_create(groups.handle, int(vocab),
                                                               int(padded_vocab or vocab)), groups)
