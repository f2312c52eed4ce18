"""Tensor-parallel layers on their own (``ptdp_layer``), for users who build their own models.
Inputs and outputs are :class:`ptdp.Tensor` objects (numpy arrays are accepted as inputs)."""

from ._lib import Handle, _raw
from .tensor import Tensor, as_tensor


class Layer(Handle):
    """A parallel layer; make one with the functions below."""

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
    return Layer(_raw.ptdp_column_parallel_linear_create(groups.handle, int(in_features), int(out_features),
                                                         int(bool(bias)), int(bool(gather_output)),
                                                         float(init_std), int(seed)), groups)


def row_parallel_linear(groups, in_features, out_features, bias=True, init_std=0.02, seed=1234):
    return Layer(_raw.ptdp_row_parallel_linear_create(groups.handle, int(in_features), int(out_features),
                                                      int(bool(bias)), float(init_std), int(seed)), groups)


def vocab_parallel_embedding(groups, vocab, hidden, init_std=0.02, seed=1234):
    return Layer(_raw.ptdp_vocab_parallel_embedding_create(groups.handle, int(vocab), int(hidden),
                                                           float(init_std), int(seed)), groups, has_input_grad=False)


def vocab_parallel_cross_entropy(groups, vocab, padded_vocab=None):
    return Layer(_raw.ptdp_vocab_parallel_cross_entropy_create(groups.handle, int(vocab),
                                                               int(padded_vocab or vocab)), groups)
