"""Gradient accumulation: accumulate=m equals accumulate=1, with one allreduce per m micro-batches.

Tolerance: summing m micro-batches' gradients instead of computing a shard's gradient at once
changes only the order of float32 additions. Measured on LeNet, 2 devices, batch 256, lr 0.2: the
parameters differ by 5e-8 after one step and 2e-6 after four (rounding, ~1e-6 of their scale); over
12 steps training amplifies it to 4e-4. The step tests run 4 steps and allow 1e-4 absolute (1e-3
relative), 50 times the rounding and far below what one changed update moves (gradients
zeroed between micro-batches move them by more than 1e-2, checked below); the epoch test
compares the epoch's mean loss (2.6e-6 apart measured) with the same bounds.
"""

import importlib

import numpy as np
import pytest

import mgpu

mx = mgpu.mx
nd = mx.nd

ATOL, RTOL = 1e-4, 1e-3


def _scratch_run(data, devices, accumulate, steps=4, batch=256):
    params = [mgpu.get_params(mgpu.lenet_params(0), d) for d in devices]
    step = mgpu.scratch_step(mgpu.lenet_forward, params, devices, lr=0.2,
                             accumulate=accumulate)
    losses = []
    for s in range(steps):
        X = data.train_images[s * batch:(s + 1) * batch].astype("float32") / 255
        y = data.train_labels[s * batch:(s + 1) * batch]
        lo, _, labels = step(X, y)
        losses.append(np.concatenate([a.asnumpy() for a in lo]))
        assert [len(a) for a in labels] == [batch // len(devices)] * len(devices)
    return [p.asnumpy() for p in params[0]], np.concatenate(losses), step


def test_scratch_step_accumulate_equals_one_batch(small_data, cpus):
    devs = cpus(2)
    p1, l1, s1 = _scratch_run(small_data, devs, 1)
    p4, l4, s4 = _scratch_run(small_data, devs, 4)
    for a, b in zip(p1, p4):
        np.testing.assert_allclose(a, b, atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(l1, l4, atol=ATOL, rtol=RTOL)
    # one allreduce per batch of 4 micro-batches, not one per micro-batch
    assert s1.reducer.calls == 4 and s4.reducer.calls == 4


def test_the_equality_check_catches_zeroing_between_micro_batches(small_data, cpus,
                                                                  monkeypatch):
    """The check above can fail: the same accumulation code with a bug injected (the
    gradients zeroed before every micro-batch, so only the last one counts) moves the
    parameters far beyond the tolerance."""
    devs = cpus(2)
    p1, _, _ = _scratch_run(small_data, devs, 1)
    step_module = importlib.import_module("mgpu.step")
    record = step_module._record
    zeroed = []

    def record_after_zeroing(net, X_shards, y_shards, loss, device_params):
        for W in device_params:
            for p in W:
                p.grad[:] = 0
        zeroed.append(len(y_shards[0]))
        return record(net, X_shards, y_shards, loss, device_params)

    monkeypatch.setattr(step_module, "_record", record_after_zeroing)
    p4, _, _ = _scratch_run(small_data, devs, 4)
    assert zeroed == [32] * 16  # the accumulation code ran: 4 steps x 4 micro-batches
    diff = max(np.abs(a - b).max() for a, b in zip(p1, p4, strict=True))
    assert diff > 100 * ATOL


@pytest.mark.parametrize("net", ["lenet_forward", "LeNet"])
def test_train_accumulate_equals_accumulate_1(small_data, cpus, net):
    def run(m):
        model = mgpu.lenet_forward if net == "lenet_forward" else mgpu.LeNet()
        return mgpu.train(model, small_data, cpus(2), num_epochs=1, batch_size=256, lr=0.2,
                          accumulate=m, verbose=False, progress=False)

    h1, h4 = run(1), run(4)
    assert h4.accumulate == 4 and h4.loss[0] == pytest.approx(h1.loss[0], abs=ATOL, rel=RTOL)
    # rounding moves the parameters by ~4e-4 over the epoch: a few of the 1,000 test images
    # near a decision boundary may flip (2 did, measured)
    assert abs(h4.test_acc[0] - h1.test_acc[0]) <= 5 / 1000


def test_gluon_step_accumulate_counts_one_allreduce_per_batch(small_data, cpus):
    devs = cpus(2)

    def run(m):
        net = mgpu.LeNet()
        mgpu.initialise(net, devs, seed=0)
        net.hybridize()
        trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.2},
                                   kvstore=None)
        step = mgpu.gluon_step(net, trainer, devs, accumulate=m)
        for s in range(3):
            X = small_data.train_images[s * 256:(s + 1) * 256].astype("float32") / 255
            step(X, small_data.train_labels[s * 256:(s + 1) * 256])
        return [p.data(devs[1]).asnumpy() for p in net.collect_params().values()], step

    p1, s1 = run(1)
    p4, s4 = run(4)
    for a, b in zip(p1, p4):
        np.testing.assert_allclose(a, b, atol=ATOL, rtol=RTOL)
    assert s1.reducer.calls == s4.reducer.calls == 3


@pytest.mark.parametrize("m, error, words", [
    (0, ValueError, "accumulate=0: the number of micro-batches per batch must be at least 1"),
    (2.0, TypeError, "accumulate must be a whole number"),
    (True, TypeError, "accumulate must be a whole number"),
])
def test_bad_accumulate_values(cpus, m, error, words):
    params = [mgpu.get_params(mgpu.lenet_params(0), d) for d in cpus(2)]
    with pytest.raises(error, match=words):
        mgpu.scratch_step(mgpu.lenet_forward, params, cpus(2), lr=0.1, accumulate=m)


def test_accumulate_larger_than_a_device_share_names_it(cpus):
    devs = cpus(2)
    params = [mgpu.get_params(mgpu.lenet_params(0), d) for d in devs]
    step = mgpu.scratch_step(mgpu.lenet_forward, params, devs, lr=0.1, accumulate=4)
    X, y = np.zeros((6, 1, 28, 28), "float32"), np.zeros(6, "int32")
    with pytest.raises(ValueError, match=r"accumulate=4: device 0's share of a batch of 6 "
                       r"has 3 examples, too few for 4 micro-batches; use accumulate <= 3"):
        step(X, y)
