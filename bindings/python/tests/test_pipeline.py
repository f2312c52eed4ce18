"""The pipeline scheduler driving a model written in Python through callbacks.

As in tests/pipeline/test_pipeline_callbacks.cpp: chunk c scales its input by a_c, chunk 0's
input for microbatch mb is (mb + 1) * [1, 2, 3, 4], the loss is the sum of the last output, so
dL/da_c = sum_mb P / a_c * 10 * (mb + 1) with P the product of every a_c.
"""
import numpy as np
import pytest

import ptdp


class Scale(ptdp.Stage):
    activation_shape = (4,)

    def __init__(self, chunks, fail_at=None):
        self.chunks, self.fail_at = chunks, fail_at
        self.a = {c: 1.0 + 0.25 * c for c in range(chunks)}
        self.grad = {c: 0.0 for c in range(chunks)}
        self.saved = {}

    def forward(self, chunk, mb, x):
        if (chunk, mb) == self.fail_at:
            raise RuntimeError("model blew up")
        if chunk == 0:
            assert x is None
            x = (mb + 1) * np.arange(1, 5, dtype=np.float32)
        self.saved[chunk, mb] = x
        y = self.a[chunk] * x
        return None if chunk == self.chunks - 1 else y

    def backward_input(self, chunk, mb, dy):
        if chunk == self.chunks - 1:
            assert dy is None
            dy = np.ones(4, dtype=np.float32)
        self.grad[chunk] += float(self.saved.pop((chunk, mb)) @ dy)
        return None if chunk == 0 else ptdp.Tensor(self.a[chunk] * dy)  # a Tensor is handed over


class SplitScale(Scale):
    """The same with the weight gradient in its own call (zero-bubble schedules need it)."""

    def backward_input(self, chunk, mb, dy):
        if chunk == self.chunks - 1:
            dy = np.ones(4, dtype=np.float32)
        self.saved[chunk, mb, "dy"] = dy
        return None if chunk == 0 else self.a[chunk] * dy

    def backward_weight(self, chunk, mb):
        self.grad[chunk] += float(self.saved.pop((chunk, mb)) @ self.saved.pop((chunk, mb, "dy")))


def expected_grad(chunks, c, m):
    product = np.prod([1.0 + 0.25 * k for k in range(chunks)])
    return product / (1.0 + 0.25 * c) * sum(10.0 * (mb + 1) for mb in range(m))


@pytest.mark.parametrize("kind,stage", [("gpipe", Scale), ("1f1b", Scale), ("zb_h1", SplitScale)])
def test_python_stage_gets_the_closed_form_gradient(groups, kind, stage):
    model = stage(1)
    with ptdp.Schedule(kind, 1, 3) as s:
        ptdp.pipeline_run(groups, s, model)
    assert model.grad[0] == pytest.approx(expected_grad(1, 0, 3))
    assert not model.saved


def test_exception_in_a_callback_becomes_a_callback_error(groups):
    model = Scale(1, fail_at=(0, 1))
    with ptdp.Schedule("1f1b", 1, 2) as s:
        with pytest.raises(ptdp.CallbackError, match="forward callback of chunk 0, microbatch 1") as e:
            ptdp.pipeline_run(groups, s, model)
    assert isinstance(e.value.__cause__, RuntimeError) and "model blew up" in str(e.value)
    # The groups are still usable.
    model = Scale(1)
    with ptdp.Schedule("1f1b", 1, 2) as s:
        ptdp.pipeline_run(groups, s, model)


def test_wrong_output_shape_is_refused(groups):
    class Wrong(Scale):
        def forward(self, chunk, mb, x):
            return np.zeros(3, dtype=np.float32)

    with ptdp.Schedule("1f1b", 1, 1) as s:
        with pytest.raises(ptdp.InvalidArgumentError, match="want f32"):
            ptdp.pipeline_run(groups, s, Wrong(2))


def test_split_schedule_without_weight_callback_is_refused(groups):
    with ptdp.Schedule("zb_h1", 1, 2) as s:
        with pytest.raises(ptdp.InvalidArgumentError, match="backward_weight"):
            ptdp.pipeline_run(groups, s, Scale(1))


def test_v_shaped_and_interleaved_zero_bubble_schedules():
    with ptdp.Schedule("zb_v", 4, 16, 2) as s:
        makespan, bubble, peak = s.simulate()
        assert bubble == pytest.approx(0.03125)
        assert max(peak) <= 8  # 2p half-stage slots: 1F1B's p microbatches
        # V placement: rank 0 runs chunks 0 and 7.
        assert {int(a["chunk"]) for a in s.actions(0)} == {0, 7}
    with ptdp.Schedule("interleaved_zb", 4, 8, 2) as s:
        assert s.simulate()[1] < 0.1875  # interleaved 1F1B's bubble at p = 4, m = 8
    with pytest.raises(ptdp.InvalidArgumentError, match="DualPipeV needs at least 2p microbatches"):
        ptdp.Schedule("dualpipe_v", 4, 6, 2)
