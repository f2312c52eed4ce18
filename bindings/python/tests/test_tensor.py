"""Tensors from and to numpy, and errors that carry the library's message."""
import numpy as np
import pytest

import ptdp


def test_round_trip_keeps_shape_dtype_and_values():
    for dtype in (np.float32, np.float16, np.int32, np.int64):
        a = (np.arange(24).reshape(2, 3, 4) - 5).astype(dtype)
        with ptdp.Tensor(a) as t:
            assert t.shape == (2, 3, 4) and t.ndim == 3 and t.numel == 24 and t.nbytes == a.nbytes
            assert np.array_equal(t.numpy(), a)
            assert np.array_equal(np.asarray(t), a)


def test_numpy_writes_into_a_given_array():
    t = ptdp.Tensor(np.ones((4, 5), dtype=np.float32))
    out = np.zeros((4, 5), dtype=np.float32)
    assert t.numpy(out=out) is out and out.sum() == 20
    with pytest.raises(ValueError, match="out must be"):
        t.numpy(out=np.zeros(3, dtype=np.float32))


def test_fill_copy_from_and_cast():
    t = ptdp.Tensor.zeros((3,), ptdp.DType.F32).fill(1.5)
    assert np.array_equal(t.numpy(), [1.5, 1.5, 1.5])
    t.copy_from(np.array([1, 2, 3], dtype=np.float32))
    h = t.cast(ptdp.DType.F16)
    assert h.dtype == ptdp.DType.F16 and np.array_equal(h.numpy(), np.array([1, 2, 3], np.float16))


def test_bad_shape_raises_invalid_argument_with_the_library_message():
    with pytest.raises(ptdp.InvalidArgumentError, match=r"ptdp_tensor_create: shape\[1\] = -3 is negative") as e:
        ptdp.Tensor.zeros((2, -3))
    assert isinstance(e.value, ValueError) and e.value.status == ptdp.raw.PTDP_ERR_INVALID_ARGUMENT


def test_wrong_size_copy_is_refused_and_the_tensor_stays_usable():
    t = ptdp.Tensor(np.zeros(4, dtype=np.float32))
    with pytest.raises(ptdp.InvalidArgumentError, match="ptdp_tensor_copy_from_host"):
        ptdp.raw.ptdp_tensor_copy_from_host(t.handle, np.zeros(3, dtype=np.float32))
    t.fill(2)
    assert t.numpy().sum() == 8


def test_typed_buffers_check_the_element_type():
    with pytest.raises(TypeError, match="expected items of 4 bytes"):
        ptdp.raw.ptdp_dataset_document(None, 0, np.zeros(4, dtype=np.float64))


def test_closed_handles_and_context_managers():
    with ptdp.Tensor(np.zeros(2, dtype=np.float32)) as t:
        assert not t.closed
    assert t.closed
    t.close()
    with pytest.raises(ValueError, match="closed"):
        t.numpy()


def test_version_and_status_strings():
    assert ptdp.version() == tuple(int(x) for x in ptdp.__version__.split("."))
    assert ptdp.status_string(1) == "invalid argument"
