"""The sharded optimizer (ZeRO stage 1) against MXNet's own optimizers, and its counts."""

import numpy as np
import pytest

from mgpu.backend import mx
from mgpu.collectives import Traffic, all_gather, chunk_bounds, reduce_scatter
from mgpu.models import lenet_forward, lenet_params
from mgpu.parallel import get_params
from mgpu.sharded import ReplicatedOptimizer, ShardedAdam, ShardedSGD, optimizer_step

P = 129068  # LeNet's parameters


def _devices(k):
    return [mx.cpu(i) for i in range(k)]


def _train(k, make, steps=4, seed=0):
    devs = _devices(k)
    params = [get_params(lenet_params(seed=seed), d) for d in devs]
    opt = make(params)
    step = optimizer_step(lenet_forward, params, devs, opt)
    rng = np.random.default_rng(1)
    for _ in range(steps):
        X = rng.random((24, 1, 28, 28), dtype=np.float32)
        step(X, rng.integers(0, 10, 24))
    return params, opt


@pytest.mark.parametrize("k", [2, 3])
def test_sharded_sgd_equals_mxnet_sgd_with_momentum(k):
    sharded, _ = _train(k, lambda p: ShardedSGD(p, lr=0.1, momentum=0.9, wd=1e-3))
    plain, _ = _train(k, lambda p: ReplicatedOptimizer(
        p, "sgd", learning_rate=0.1, momentum=0.9, wd=1e-3))
    for a, b in zip(sharded[0], plain[0], strict=True):
        np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), rtol=1e-4, atol=1e-6)
    # every device holds the same parameters, exactly
    for i in range(1, k):
        for a, b in zip(sharded[0], sharded[i], strict=True):
            assert (a.asnumpy() == b.asnumpy()).all()


def test_sharded_adam_equals_mxnet_adam():
    # Gradients of size about 1 (not LeNet's, many of them almost zero): where a
    # gradient is almost zero Adam's mean / sqrt(var) is a ratio of two roundings, and
    # one rounding more or less moves a step by a sizeable part of lr.
    devs = _devices(2)
    runs = []
    for make in (lambda p: ShardedAdam(p, lr=0.01, wd=1e-3),
                 lambda p: ReplicatedOptimizer(p, "adam", learning_rate=0.01, wd=1e-3)):
        params = [get_params(lenet_params(), d) for d in devs]
        opt, rng = make(params), np.random.default_rng(2)
        for _ in range(4):
            for t in range(len(params[0])):
                g = rng.normal(size=params[0][t].shape)
                for i, W in enumerate(params):
                    W[t].grad[:] = g * (i + 1)
            opt.step(batch_size=8)
        runs.append(params)
    for a, b in zip(runs[0][1], runs[1][1], strict=True):
        np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), rtol=1e-5, atol=1e-6)


def test_sharded_training_changes_the_parameters():
    before = [p.asnumpy() for p in lenet_params(seed=0)]
    params, _ = _train(2, lambda p: ShardedSGD(p, lr=0.1))
    assert any(not np.allclose(b, p.asnumpy()) for b, p in zip(before, params[0]))


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_state_bytes_are_one_kth_of_the_unsharded(k):
    _, plain = _train(k, lambda p: ReplicatedOptimizer(
        p, "sgd", learning_rate=0.1, momentum=0.9), steps=1)
    _, sharded = _train(k, lambda p: ShardedSGD(p, lr=0.1, momentum=0.9), steps=1)
    assert plain.state_bytes() == [4 * P] * k
    b = chunk_bounds(P, k)
    assert sharded.state_bytes() == [4 * (b[i + 1] - b[i]) for i in range(k)]
    assert sum(sharded.state_bytes()) == plain.state_bytes()[0]
    # one flat working buffer of all P values per device, whatever k
    assert sharded.working_bytes() == [4 * P] * k
    adam = ShardedAdam([get_params(lenet_params(), d) for d in _devices(k)])
    assert adam.state_bytes() == [2 * s for s in sharded.state_bytes()]
    assert ShardedSGD([get_params(lenet_params(), d) for d in _devices(k)], lr=0.1,
                      momentum=0).state_bytes() == [0] * k


@pytest.mark.parametrize("k", [2, 3, 4])
def test_a_step_moves_the_bytes_of_one_allreduce(k):
    _, opt = _train(k, lambda p: ShardedSGD(p, lr=0.1), steps=2)
    assert sum(opt.traffic.sent) == sum(opt.traffic.received) == 2 * (k - 1) * P * 4
    assert sum(opt.traffic.sent) / k == pytest.approx(2 * (k - 1) / k * P * 4)
    assert opt.traffic.links == {(i, j) for i in range(k) for j in range(k) if i != j}
    assert opt.steps == 2


def test_reduce_scatter_then_all_gather_is_an_allreduce_with_counted_bytes():
    k, n = 3, 10
    arrays = [mx.nd.arange(n, ctx=mx.cpu(i)) * (i + 1) for i in range(k)]
    traffic = Traffic([0] * k, [0] * k)
    chunks = reduce_scatter(arrays, traffic)
    assert [c.size for c in chunks] == [4, 3, 3]
    assert [c.context for c in chunks] == _devices(k)
    assert arrays[0].asnumpy().tolist() == list(range(n))  # unchanged
    all_gather(chunks, arrays, traffic)
    for a in arrays:
        assert a.asnumpy().tolist() == [6.0 * x for x in range(n)]
    assert sum(traffic.sent) == 2 * (k - 1) * n * 4


def test_bad_input_is_named():
    devs = _devices(2)
    params = [get_params(lenet_params(), d) for d in devs]
    with pytest.raises(ValueError, match="momentum"):
        ShardedSGD(params, lr=0.1, momentum=1.5)
    with pytest.raises(ValueError, match="lr"):
        ShardedSGD(params, lr=-1)
    with pytest.raises(ValueError, match="beta2"):
        ShardedAdam(params, beta2=1.0)
    with pytest.raises(ValueError, match="no parameters"):
        ShardedSGD([], lr=0.1)
    with pytest.raises(ValueError, match="both"):
        ShardedSGD([params[0], params[0]], lr=0.1)
    with pytest.raises(ValueError, match="device 1 has 7 parameters"):
        ShardedSGD([params[0], params[1][:7]], lr=0.1)
    with pytest.raises(ValueError, match="batch_size"):
        ShardedSGD(params, lr=0.1).step(0)
    with pytest.raises(ValueError, match="cannot create optimizer"):
        ReplicatedOptimizer(params, "no-such-optimizer")
    with pytest.raises(ValueError, match="devices"):
        optimizer_step(lenet_forward, params, devs[::-1], ShardedSGD(params, lr=0.1))
    other = [get_params(lenet_params(), d) for d in devs]
    with pytest.raises(ValueError, match="other parameters"):
        optimizer_step(lenet_forward, params, devs, ShardedSGD(other, lr=0.1))
    with pytest.raises(ValueError, match="one chunk per device"):
        reduce_scatter([mx.nd.ones((1,), ctx=d) for d in devs])
    with pytest.raises(ValueError, match="chunk 1 has 2 elements"):
        all_gather([mx.nd.ones((2,), ctx=d) for d in devs],
                   [mx.nd.ones((3,), ctx=d) for d in devs])
    with pytest.raises(ValueError, match="k must be"):
        chunk_bounds(10, 0)
