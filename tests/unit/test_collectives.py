"""The faster allreduce algorithms: the same sums as NumPy, written in place, clear errors."""

import numpy as np
import pytest

import mgpu
from mgpu.collectives import (
    SMALL_TENSOR,
    FusedAllreduce,
    allreduce_many,
    allreduce_scatter_gather,
    ring_allreduce,
)

mx = mgpu.mx

# Odd sizes and shapes: fewer elements than devices, primes, and tensors on both sides of
# the size below which allreduce_many packs tensors into one buffer.
SHAPES = [(1,), (3,), (7, 5), (2, 3, 1, 5), (SMALL_TENSOR - 1,), (SMALL_TENSOR,),
          (SMALL_TENSOR + 3,), (257, 263)]


def _arrays(shape, devices, seed=0, dtype=np.float32):
    rng = np.random.RandomState(seed)
    values = [np.asarray(rng.randn(*shape), dtype=dtype) for _ in devices]
    return values, [mx.nd.array(v, ctx=d, dtype=dtype) for v, d in zip(values, devices)]


def _assert_summed(arrays, values, devices, rtol=1e-5):
    expected = np.sum(values, axis=0)
    for a, d in zip(arrays, devices):
        assert a.context == d and a.shape == expected.shape
        np.testing.assert_allclose(a.asnumpy(), expected, rtol=rtol, atol=1e-5)


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("shape", SHAPES)
def test_ring_equals_numpy_sum_in_place(cpus, k, shape):
    values, arrays = _arrays(shape, cpus(k), seed=k)
    keep = list(arrays)
    allreduce_scatter_gather(arrays)
    assert all(a is b for a, b in zip(arrays, keep))
    _assert_summed(keep, values, cpus(k))


@pytest.mark.parametrize("k", [2, 4])
def test_many_equals_numpy_sum_in_place(cpus, k):
    devs = cpus(k)
    values, tensors = [], []
    for t, shape in enumerate(SHAPES):
        v, a = _arrays(shape, devs, seed=10 * k + t)
        values.append(v)
        tensors.append(a)
    keep = [list(a) for a in tensors]
    allreduce_many(tensors)
    for v, a, ref in zip(values, tensors, keep):
        assert all(x is y for x, y in zip(a, ref))
        _assert_summed(ref, v, devs)


def test_many_other_dtypes_and_repeated_calls(cpus):
    """float64 and float16 tensors are not packed but still summed; the buffers are reused."""
    devs = cpus(2)
    for step in range(3):  # the second and third calls reuse the first call's plan
        v64, a64 = _arrays((5, 3), devs, seed=step, dtype=np.float64)
        v16, a16 = _arrays((9,), devs, seed=step + 7, dtype=np.float16)
        v32, a32 = _arrays((4, 4), devs, seed=step + 11)
        allreduce_many([a64, a16, a32])
        _assert_summed(a64, v64, devs)
        _assert_summed(a32, v32, devs)
        expected16 = np.sum(np.array(v16, dtype=np.float32), axis=0)
        for a in a16:
            assert a.dtype == np.float16
            np.testing.assert_allclose(a.asnumpy(), expected16, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("small", [0, 1 << 30])
def test_many_with_nothing_or_everything_packed(cpus, small):
    devs = cpus(3)
    shapes = [(4, 3), (11,), (2, 2, 2)]
    data = [_arrays(s, devs, seed=i) for i, s in enumerate(shapes)]
    allreduce_many([a for _, a in data], small=small)
    for v, a in data:
        _assert_summed(a, v, devs)


def test_many_reaches_every_devices_gradients(cpus):
    """The in-place pitfall: the sums must be visible through each parameter's .grad."""
    devs = cpus(3)
    params = [[mx.nd.ones(shape, ctx=d) for d in devs] for shape in [(4,), (2, 3), (70_000,)]]
    for tensor in params:
        for i, p in enumerate(tensor):
            p.attach_grad()
            p.grad[:] = i + 1
    for _ in range(2):  # .grad returns new NDArray objects on every access
        allreduce_many([[p.grad for p in tensor] for tensor in params])
        for tensor in params:
            for p in tensor:
                np.testing.assert_array_equal(p.grad.asnumpy(), np.full(p.shape, 6.0))
            for i, p in enumerate(tensor):
                p.grad[:] = i + 1


def test_fused_allreduce_is_made_once_and_called_every_step(cpus):
    """One FusedAllreduce, called on new values every step, sums each step's values."""
    devs = cpus(3)
    shapes = [(4, 3), (11,), (70_000,)]
    tensors = [[mx.nd.zeros(s, ctx=d) for d in devs] for s in shapes]
    reduce = FusedAllreduce(tensors)
    for step in range(3):
        values = []
        for t, shape in enumerate(shapes):
            v, fresh = _arrays(shape, devs, seed=10 * step + t)
            values.append(v)
            for src, dst in zip(fresh, tensors[t]):
                src.copyto(dst)  # new gradients in the same buffers, as after a backward pass
        reduce()
        for v, a in zip(values, tensors):
            _assert_summed(a, v, devs)


def test_fused_allreduce_checks_once_when_created(cpus):
    a = [mx.nd.ones((2, 2), ctx=d) for d in cpus(2)]
    with pytest.raises(ValueError, match=r"FusedAllreduce: tensor 1: array 1 has shape"):
        FusedAllreduce([a, [mx.nd.ones((3,)), a[1]]])


def test_one_device_is_a_no_op(cpus):
    a = mx.nd.arange(3)
    allreduce_scatter_gather([a])
    allreduce_many([[a]])
    assert a.asnumpy().tolist() == [0.0, 1.0, 2.0]


def test_ring_errors_name_the_function(cpus):
    a = mx.nd.ones((2, 2), ctx=mx.cpu(0))
    with pytest.raises(ValueError, match=r"allreduce_scatter_gather: array 1 has shape \(3,\)"):
        allreduce_scatter_gather([a, mx.nd.ones((3,), ctx=mx.cpu(1))])
    with pytest.raises(ValueError, match=r"both live on cpu\(0\)"):
        allreduce_scatter_gather([a, mx.nd.ones((2, 2), ctx=mx.cpu(0))])
    with pytest.raises(ValueError, match="allreduce_scatter_gather got no arrays"):
        allreduce_scatter_gather([])
    with pytest.raises(TypeError, match="not an mx.nd.NDArray"):
        allreduce_scatter_gather([a, np.ones((2, 2))])
    np.testing.assert_array_equal(a.asnumpy(), np.ones((2, 2)))


def test_many_errors_are_clear_and_write_nothing(cpus):
    a = [mx.nd.ones((2, 2), ctx=d) for d in cpus(2)]
    b = [mx.nd.ones((3,), ctx=d) for d in cpus(2)]
    with pytest.raises(ValueError, match="got no tensors"):
        allreduce_many([])
    with pytest.raises(ValueError, match="tensor 0 has no arrays"):
        allreduce_many([[]])
    with pytest.raises(ValueError, match="tensor 1 has 1 arrays but tensor 0 has 2"):
        allreduce_many([a, b[:1]])
    with pytest.raises(TypeError, match="tensor 1, item 0 is a ndarray"):
        allreduce_many([a, [np.ones(3), b[1]]])
    with pytest.raises(ValueError, match=r"tensor 1: array 1 has shape \(2, 2\)"):
        allreduce_many([a, [b[0], a[1]]])
    with pytest.raises(ValueError, match="dtype float64"):
        allreduce_many([a, [b[0], mx.nd.ones((3,), ctx=mx.cpu(1), dtype="float64")]])
    with pytest.raises(ValueError, match="two arrays on one device"):
        allreduce_many([[a[0], mx.nd.ones((2, 2), ctx=mx.cpu(0))]])
    with pytest.raises(ValueError, match="same device order"):
        allreduce_many([a, b[::-1]])
    for x in a + b:
        np.testing.assert_array_equal(x.asnumpy(), np.ones(x.shape))


def test_scratch_training_step_uses_the_fused_allreduce(cpus):
    """scratch_step keeps every device's copy identical (the sum reached every device)."""
    devs = cpus(4)
    params = [mgpu.get_params(mgpu.lenet_params(seed=3), d) for d in devs]
    rng = np.random.RandomState(0)
    X, y = rng.rand(40, 1, 28, 28).astype(np.float32), rng.randint(0, 10, 40)
    step = mgpu.scratch_step(mgpu.lenet_forward, params, devs, lr=0.1)
    for _ in range(2):
        step(X, y)
    for i in range(len(params[0])):
        for other in params[1:]:
            np.testing.assert_array_equal(params[0][i].asnumpy(), other[i].asnumpy())


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("shape", [s for s in SHAPES if int(np.prod(s)) >= 4])
def test_ring_allreduce_equals_numpy_sum_and_talks_to_neighbours_only(cpus, k, shape):
    values, arrays = _arrays(shape, cpus(k), seed=k)
    keep = list(arrays)
    traffic = ring_allreduce(arrays)
    _assert_summed(keep, values, cpus(k))
    assert traffic.links == {(i, (i + 1) % k) for i in range(k)}
    nbytes = int(np.prod(shape)) * 4
    # every device sends 2(k-1) chunks of about n/k elements: 2(k-1)/k of the tensor
    for sent in traffic.sent:
        assert abs(sent - 2 * (k - 1) / k * nbytes) <= 2 * (k - 1) * 4
    assert sum(traffic.sent) == sum(traffic.received)


def test_ring_allreduce_bytes_are_exact_when_chunks_are_equal(cpus):
    arrays = [mx.nd.ones((4, 300), ctx=d) for d in cpus(4)]
    traffic = ring_allreduce(arrays)
    assert traffic.per_device(1200 * 4) == [1.5] * 4  # 2 (k-1) / k with k = 4


def test_ring_allreduce_refuses_tensors_smaller_than_the_ring(cpus):
    with pytest.raises(ValueError, match=r"ring_allreduce: a tensor of 2 elements cannot be cut"):
        ring_allreduce([mx.nd.ones((2,), ctx=d) for d in cpus(3)])
