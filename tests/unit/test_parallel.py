import numpy as np
import pytest

import mgpu
from mgpu.parallel import SplitError

mx = mgpu.mx


@pytest.mark.parametrize(
    "n,k,even,expected",
    [(256, 2, True, [128, 128]), (96, 4, True, [24] * 4), (38, 8, False, [5] * 6 + [4] * 2),
     (7, 7, True, [1] * 7), (10, 3, False, [4, 3, 3])],
)
def test_split_sizes(n, k, even, expected):
    assert mgpu.split_sizes(n, k, even) == expected
    assert sum(expected) == n


def test_weighted_split_is_proportional_and_complete():
    assert mgpu.split_sizes(256, 2, weights=[1, 1]) == [128, 128]
    assert mgpu.split_sizes(256, 2, weights=[3, 1]) == [192, 64]
    sizes = mgpu.split_sizes(101, 3, weights=[0.5, 0.3, 0.2])
    assert sum(sizes) == 101 and sizes[0] > sizes[1] > sizes[2]
    # a very slow device still gets one example
    assert mgpu.split_sizes(10, 2, weights=[1000, 1]) == [9, 1]


def test_split_errors_are_clear():
    with pytest.raises(SplitError, match=r"10 examples does not split evenly over 3 devices"):
        mgpu.split_sizes(10, 3)
    with pytest.raises(SplitError, match=r"3 examples cannot be split over 4 devices"):
        mgpu.split_sizes(3, 4, even_split=False)
    with pytest.raises(SplitError, match="one weight per device"):
        mgpu.split_sizes(10, 2, weights=[1, 2, 3])
    with pytest.raises(SplitError, match="positive"):
        mgpu.split_sizes(10, 2, weights=[1, 0])
    with pytest.raises(SplitError, match="no devices"):
        mgpu.split_sizes(10, 0)


def test_split_and_load_places_slices(cpus):
    X = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)
    parts = mgpu.split_and_load(X, cpus(4))
    assert [p.context for p in parts] == cpus(4)
    assert [p.shape for p in parts] == [(2, 3)] * 4
    np.testing.assert_array_equal(np.concatenate([p.asnumpy() for p in parts]), X)
    # NDArray input works the same
    nd_parts = mgpu.split_and_load(mx.nd.array(X), cpus(2))
    assert [p.context for p in nd_parts] == cpus(2)
    np.testing.assert_array_equal(nd_parts[1].asnumpy(), X[4:])


def test_split_and_load_uneven_and_weighted(cpus):
    X = np.arange(10)
    assert [p.shape[0] for p in mgpu.split_and_load(X, cpus(3), even_split=False)] == [4, 3, 3]
    parts = mgpu.split_and_load(X, cpus(2), weights=[4, 1])
    assert [p.asnumpy().tolist() for p in parts] == [list(range(8)), [8, 9]]
    with pytest.raises(SplitError, match="does not split evenly"):
        mgpu.split_and_load(X, cpus(3))


def test_split_and_load_several_inputs(cpus):
    X, y = np.zeros((6, 2)), np.arange(6)
    xs, ys = mgpu.split_and_load((X, y), cpus(2))
    assert [a.shape[0] for a in xs] == [a.shape[0] for a in ys] == [3, 3]
    with pytest.raises(SplitError, match=r"different numbers of examples \[6, 5\]"):
        mgpu.split_and_load((X, y[:5]), cpus(2))


def test_split_and_load_rejects_fewer_examples_than_devices(cpus):
    with pytest.raises(SplitError, match="every device needs at least one example"):
        mgpu.split_and_load(np.zeros((3, 2)), cpus(4), even_split=False)
    with pytest.raises(SplitError, match="0-d"):
        mgpu.split_and_load(np.float32(1.0), cpus(2))
    with pytest.raises(SplitError, match="NumPy array or an NDArray"):
        mgpu.split_and_load([[1, 2], [3, 4]][0][0], cpus(2))


@pytest.mark.parametrize("k", [2, 4])
def test_allreduce_equals_numpy_sum_in_place(cpus, k):
    rng = np.random.RandomState(k)
    values = [rng.randn(3, 5).astype(np.float32) for _ in range(k)]
    arrays = [mx.nd.array(v, ctx=d) for v, d in zip(values, cpus(k))]
    keep = list(arrays)  # references held elsewhere, like each device's gradient buffers
    mgpu.allreduce(arrays)
    expected = np.sum(values, axis=0)
    for a, ref, d in zip(arrays, keep, cpus(k)):
        assert a is ref and a.context == d
        np.testing.assert_allclose(a.asnumpy(), expected, rtol=1e-5, atol=1e-6)


def test_allreduce_of_gradients_reaches_every_device(cpus):
    """The in-place pitfall: summed gradients must be visible through each array's .grad."""
    params = [mx.nd.ones((4,), ctx=d) for d in cpus(3)]
    for i, p in enumerate(params):
        p.attach_grad()
        p.grad[:] = i + 1
    mgpu.allreduce([p.grad for p in params])
    assert [p.grad.asnumpy().tolist() for p in params] == [[6.0] * 4] * 3


def test_allreduce_errors(cpus):
    a = mx.nd.ones((2, 2), ctx=mx.cpu(0))
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        mgpu.allreduce([a, mx.nd.ones((3,), ctx=mx.cpu(1))])
    with pytest.raises(ValueError, match="dtype float64"):
        mgpu.allreduce([a, mx.nd.ones((2, 2), ctx=mx.cpu(1), dtype="float64")])
    with pytest.raises(ValueError, match=r"both live on cpu\(0\)"):
        mgpu.allreduce([a, mx.nd.ones((2, 2), ctx=mx.cpu(0))])
    with pytest.raises(ValueError, match="no arrays"):
        mgpu.allreduce([])
    with pytest.raises(TypeError, match="not an mx.nd.NDArray"):
        mgpu.allreduce([a, np.ones((2, 2))])
    np.testing.assert_array_equal(a.asnumpy(), np.ones((2, 2)))  # nothing was written


def test_get_params_copies_and_attaches_grads(cpus):
    params = mgpu.lenet_params()
    copies = mgpu.get_params(params, mx.cpu(1))
    assert all(c.context == mx.cpu(1) and c.grad is not None for c in copies)
    for p, c in zip(params, copies):
        np.testing.assert_array_equal(p.asnumpy(), c.asnumpy())
    copies[0][:] = 0  # a copy, not a view
    assert abs(params[0]).sum().asscalar() > 0
