"""mgpu.largebatch: learning-rate rules, a training loop with a schedule, ghost-batch BatchNorm."""

import math

import numpy as np
import pytest

import mgpu

mx = mgpu.mx
nd = mx.nd
nn = mx.gluon.nn


def test_scaled_lr_rules():
    assert mgpu.scaled_lr("constant", 0.1, 8) == 0.1
    assert mgpu.scaled_lr("sqrt", 0.1, 9) == pytest.approx(0.3)
    assert mgpu.scaled_lr("linear", 0.1, 8) == pytest.approx(0.8)
    warm = [mgpu.scaled_lr("warmup", 0.1, 8, s, warmup_steps=7) for s in range(10)]
    assert warm[0] == pytest.approx(0.1) and warm[7:] == [pytest.approx(0.8)] * 3
    assert all(a < b for a, b in zip(warm[:7], warm[1:8]))
    assert mgpu.scaled_lr("warmup", 0.1, 8, 0, warmup_steps=0) == pytest.approx(0.8)


@pytest.mark.parametrize("args, error, words", [
    (("cosine", 0.1, 2), ValueError, "rule must be one of"),
    (("linear", -0.1, 2), ValueError, "base_lr"),
    (("linear", 0.1, 0), ValueError, "k must be at least 1"),
    (("linear", 0.1, 2.0), TypeError, "k must be a whole number"),
])
def test_scaled_lr_bad_input(args, error, words):
    with pytest.raises(error, match=words):
        mgpu.scaled_lr(*args)


def _toy(n=64, test=32, seed=0):
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 2, n).astype(np.int32)
    images = (rng.rand(n, 1, 28, 28) * 60 + labels[:, None, None, None] * 150).astype(np.uint8)
    test_labels = rng.randint(0, 2, test).astype(np.int32)
    test_images = (rng.rand(test, 1, 28, 28) * 60
                   + test_labels[:, None, None, None] * 150).astype(np.uint8)
    return mgpu.Dataset("toy", None, images, labels, test_images, test_labels)


def test_train_schedule_records_steps_and_epochs_and_learns():
    mx.random.seed(0)
    net = nn.Dense(10)
    net.initialize(mx.init.Xavier())
    rates = []
    curves = mgpu.train_schedule(net, _toy(), 16, lambda s: rates.append(s) or 0.1 - s / 1000,
                                 num_epochs=10)
    assert len(curves.step_loss) == 40 and len(curves.test_acc) == 10
    assert rates == [0] + list(range(40))  # lr(0) for the Trainer, then every step
    assert curves.step_lr == pytest.approx([0.1 - s / 1000 for s in range(40)])
    assert curves.test_acc[-1] > 0.9 and not curves.diverged
    assert curves.epoch_loss[-1] < curves.epoch_loss[0]


def test_train_schedule_stops_on_divergence():
    mx.random.seed(0)
    net = nn.Dense(10)
    net.initialize(mx.init.Xavier())
    curves = mgpu.train_schedule(net, _toy(), 16, lambda s: 3e38, num_epochs=3)
    assert curves.diverged and curves.test_acc[-1] == 0.0 and math.isnan(curves.epoch_loss[-1])


def test_train_schedule_stops_at_the_end_of_the_epoch_that_diverged():
    mx.random.seed(0)
    net = nn.Dense(10)
    net.initialize(mx.init.Xavier())
    # 64 examples in batches of 16: 4 steps per epoch; the rate explodes in epoch 2
    curves = mgpu.train_schedule(net, _toy(), 16, lambda s: 0.1 if s < 4 else 3e38,
                                 num_epochs=3)
    assert curves.diverged and len(curves.step_loss) == 8  # epoch 3 took no steps
    assert all(math.isfinite(v) for v in curves.step_loss[:4])
    assert curves.test_acc[0] > 0 and curves.test_acc[1:] == [0.0, 0.0]
    assert not math.isfinite(curves.epoch_loss[1]) and math.isnan(curves.epoch_loss[2])


def test_train_schedule_bad_input():
    net = nn.Dense(10)
    net.initialize()
    with pytest.raises(TypeError, match="lr must be a function"):
        mgpu.train_schedule(net, _toy(), 16, 0.1, 1)
    with pytest.raises(ValueError, match="exceeds the 64 training examples"):
        mgpu.train_schedule(net, _toy(), 128, lambda s: 0.1, 1)
    with pytest.raises(ValueError, match="lr must return a positive rate"):
        mgpu.train_schedule(net, _toy(), 16, lambda s: 0.0, 1)


def _resnet(devices, width=4):
    mx.random.seed(0)
    net = mgpu.resnet18_28(width=width)
    net.initialize(mx.init.Xavier(), ctx=devices)
    net(nd.zeros((2, 1, 28, 28), ctx=devices[0]))
    return net


def test_ghost_batch_norm_equals_batch_norm_on_k_devices(cpus):
    k, b = 4, 4
    X = np.random.RandomState(0).rand(k * b, 1, 28, 28).astype(np.float32)
    plain = _resnet(cpus(k))
    ghost = _resnet(cpus(1))
    assert mgpu.with_ghost_batch_norm(ghost, groups=k) == 20
    ghost.hybridize()
    with mx.autograd.record():
        outs = [plain(x) for x in mx.gluon.utils.split_and_load(X, cpus(k))]
        out = ghost(nd.array(X))
    np.testing.assert_allclose(out.asnumpy(), np.concatenate([o.asnumpy() for o in outs]),
                               atol=1e-4)
    means = [(n, p) for n, p in plain.collect_params().items() if n.endswith("running_mean")]
    ghosts = [p for n, p in ghost.collect_params().items() if n.endswith("running_mean")]
    assert len(means) == len(ghosts) == 20
    for (_, p), g in zip(means, ghosts):
        per_device = np.concatenate([p.data(d).asnumpy() for d in cpus(k)])
        np.testing.assert_allclose(g.data().asnumpy(), per_device, atol=1e-5)
    # Averaging the groups matches averaging the devices.
    assert mgpu.average_ghost_statistics(ghost) == 20
    mgpu.average_running_statistics(plain)
    for (_, p), g in zip(means, ghosts):
        np.testing.assert_allclose(g.data().asnumpy(), np.tile(p.data(cpus(1)[0]).asnumpy(), k),
                                   atol=1e-5)


def test_ghost_batch_norm_with_one_group_normalises_the_whole_batch():
    bn = mgpu.GhostBatchNorm(channels=2, groups=1)
    bn.initialize()
    x = nd.array(np.random.RandomState(0).rand(6, 2, 3, 3) * 5 + 3)
    with mx.autograd.record():
        y = bn(x)
    assert np.abs(y.asnumpy().mean(axis=(0, 2, 3))).max() < 1e-5
    assert np.abs(y.asnumpy().std(axis=(0, 2, 3)) - 1).max() < 1e-3


def test_ghost_batch_norm_bad_input():
    with pytest.raises(ValueError, match="groups must be at least 1"):
        mgpu.GhostBatchNorm(4, 0)
    net = nn.HybridSequential()
    net.add(nn.Conv2D(2, 3), nn.BatchNorm())
    with pytest.raises(ValueError, match="needs an initialised net"):
        mgpu.with_ghost_batch_norm(net, 2)


def test_with_ghost_batch_norm_refuses_layers_outside_sequentials():
    class Wrapped(nn.HybridBlock):
        def __init__(self):
            super().__init__()
            with self.name_scope():
                self.bn = nn.BatchNorm(in_channels=2)

        def hybrid_forward(self, F, x):
            return self.bn(x)

    net = Wrapped()
    net.initialize()
    with pytest.raises(ValueError, match="not in a HybridSequential"):
        mgpu.with_ghost_batch_norm(net, 2)
