import numpy as np
import pytest

import mgpu

mx = mgpu.mx


def _same_on_all_devices(arrays_per_device):
    first = [a.asnumpy() for a in arrays_per_device[0]]
    for other in arrays_per_device[1:]:
        for a, b in zip(first, other):
            np.testing.assert_array_equal(a, b.asnumpy())


def test_scratch_step_keeps_devices_identical_and_changes_params(cpus):
    devs = cpus(4)
    init = mgpu.lenet_params(seed=0)
    params = [mgpu.get_params(init, d) for d in devs]
    rng = np.random.RandomState(0)
    X, y = rng.rand(64, 1, 28, 28).astype(np.float32), rng.randint(0, 10, 64)
    mgpu.scratch_step(mgpu.lenet_forward, params, devs, lr=0.1)(X, y)
    _same_on_all_devices(params)
    assert not np.allclose(params[0][0].asnumpy(), init[0].asnumpy())


def test_scratch_step_equals_single_device_step(cpus):
    """Data parallelism computes the same update as one device on the whole batch."""
    rng = np.random.RandomState(1)
    X, y = rng.rand(32, 1, 28, 28).astype(np.float32), rng.randint(0, 10, 32)
    one = [mgpu.get_params(mgpu.lenet_params(), mx.cpu(0))]
    mgpu.scratch_step(mgpu.lenet_forward, one, cpus(1), lr=0.1)(X, y)
    two = [mgpu.get_params(mgpu.lenet_params(), d) for d in cpus(2)]
    mgpu.scratch_step(mgpu.lenet_forward, two, cpus(2), lr=0.1)(X, y)
    for a, b in zip(one[0], two[1]):
        np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("reduction", [dict(allreduce=True),
                                       dict(allreduce=False, kvstore="device")])
def test_gluon_devices_stay_identical(cpus, small_data, reduction):
    net = mgpu.LeNet()
    mgpu.train(net, small_data, cpus(2), num_epochs=1, batch_size=512, lr=0.1,
               verbose=False, progress=False, **reduction)
    for p in net.collect_params().values():
        _same_on_all_devices([[d] for d in p.list_data()])


@pytest.mark.slow
def test_short_training_run_learns(cpus, small_data):
    hist = mgpu.train(mgpu.lenet_forward, small_data, cpus(2), num_epochs=3, batch_size=256, lr=0.1,
                      progress=False)
    assert len(hist.test_acc) == 3
    # chance is 0.10; 3 epochs on 3,072 images reach about 0.7
    assert hist.test_acc[-1] > 0.6, hist
    assert hist.loss[-1] < hist.loss[0]


def test_same_seed_same_accuracies(cpus, small_data):
    runs = [mgpu.train(mgpu.LeNet(), small_data, cpus(2), num_epochs=1, batch_size=256,
                       lr=0.1, seed=7, verbose=False, progress=False) for _ in range(2)]
    assert runs[0].test_acc == runs[1].test_acc
    assert runs[0].loss == pytest.approx(runs[1].loss, rel=1e-6)


def test_last_batch_smaller_than_device_count_is_dropped(cpus, idx_dir):
    ds = mgpu.load_fashion_mnist(data_dir=idx_dir)  # 40 training examples
    hist = mgpu.train(mgpu.lenet_forward, ds, cpus(3), num_epochs=1, batch_size=19, lr=0.1,
                      verbose=False, progress=False)
    assert hist.dropped_per_epoch == 2  # 40 = 2 x 19 + 2, and 2 < 3 devices


def test_train_rejects_batch_smaller_than_devices(cpus, idx_dir):
    ds = mgpu.load_fashion_mnist(data_dir=idx_dir)
    with pytest.raises(ValueError, match="smaller than the 4 devices"):
        mgpu.train(mgpu.lenet_forward, ds, cpus(4), batch_size=3)
    with pytest.raises(ValueError, match="pass params"):
        mgpu.train(lambda X, p: X, ds, cpus(1))


def test_evaluate_accuracy_is_data_parallel(cpus, small_data):
    net = mgpu.LeNet()
    net.initialize(ctx=cpus(3))
    acc3 = mgpu.evaluate_accuracy(net, small_data.test_images, small_data.test_labels, cpus(3))
    net.collect_params().reset_ctx(cpus(1))
    acc1 = mgpu.evaluate_accuracy(net, small_data.test_images, small_data.test_labels, cpus(1))
    assert acc1 == pytest.approx(acc3)


@pytest.mark.parametrize("reduction", [dict(allreduce=True),
                                       dict(allreduce=False, kvstore="device")])
def test_batchnorm_statistics_identical_on_all_devices_after_train(cpus, small_data, reduction):
    """Running means and variances have no gradient: train averages them across devices."""
    net = mgpu.resnet18_28(width=4)
    mgpu.train(net, small_data, cpus(2), num_epochs=1, batch_size=128, lr=0.05,
               verbose=False, progress=False, **reduction)
    stats = [p for name, p in net.collect_params().items() if name.endswith(("mean", "var"))]
    assert len(stats) == 40  # 20 BatchNorm layers
    for p in net.collect_params().values():  # every parameter, statistics included
        _same_on_all_devices([[d] for d in p.list_data()])


def test_without_averaging_the_statistics_differ(cpus, small_data):
    """The check above can fail: two steps on different shards leave different statistics."""
    net = mgpu.resnet18_28(width=4)
    net.initialize(mx.init.Xavier(), ctx=cpus(2))
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05},
                               kvstore="device")
    step = mgpu.gluon_step(net, trainer, cpus(2), allreduce=False)
    X = small_data.train_images[:64].astype(np.float32) / 255
    for _ in range(2):
        step(X, small_data.train_labels[:64])
    mean = net[1].running_mean
    assert not np.array_equal(mean.data(mx.cpu(0)).asnumpy(), mean.data(mx.cpu(1)).asnumpy())
    assert mgpu.average_running_statistics(net) == 40
    np.testing.assert_array_equal(mean.data(mx.cpu(0)).asnumpy(), mean.data(mx.cpu(1)).asnumpy())


def test_train_is_train_epochs_of_its_public_pieces(cpus, small_data):
    """The one loop: a step, epoch_batches and train_epochs, composed by hand as Horovod's ranks
    and the KVStore probes compose them, give train's figures exactly."""
    devs = cpus(2)
    hist = mgpu.train(mgpu.LeNet(), small_data, devs, num_epochs=2, batch_size=256, lr=0.1,
                      verbose=False, progress=False)
    net = mgpu.LeNet()
    mgpu.check_data(small_data)
    mgpu.initialise(net, devs, seed=0)
    net.hybridize()
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                               kvstore=None)
    mine = mgpu.History([str(d) for d in devs], batch_size=256, lr=0.1, model="LeNet")
    batches = mgpu.epoch_batches(small_data.train_images, small_data.train_labels, 256, seed=0,
                                 min_last=len(devs))
    mgpu.train_epochs(mgpu.gluon_step(net, trainer, devs), batches, devs, mine, 2,
                      lambda: mgpu.evaluate_accuracy(net, small_data.test_images,
                                                     small_data.test_labels, devs))
    assert (mine.loss, mine.train_acc, mine.test_acc) == (hist.loss, hist.train_acc,
                                                           hist.test_acc)


def _nan_after(n):
    """A from-scratch LeNet whose output turns NaN from its (n + 1)-th call on."""
    calls = []

    def net(X, params):
        calls.append(1)
        out = mgpu.lenet_forward(X, params)
        return out * float("nan") if len(calls) > n else out

    return net


def test_run_epoch_can_run_past_a_non_finite_loss(cpus):
    devs = cpus(2)
    X, y = np.zeros((48, 1, 28, 28), np.uint8), np.zeros(48, np.int32)

    def step():  # two calls per batch: from batch 2 on, NaN
        params = [mgpu.get_params(mgpu.lenet_params(), d) for d in devs]
        return mgpu.scratch_step(_nan_after(2), params, devs, lr=0.1)

    sums = mgpu.run_epoch(step(), mgpu.iter_batches(X, y, 8), devs, stop_on_non_finite=False)
    assert sums.seen == 48 and np.isnan(sums.loss)
    with pytest.raises(mgpu.NonFiniteLossError, match=r"epoch 3, batch 2 .*\(try one ten"):
        mgpu.run_epoch(step(), mgpu.iter_batches(X, y, 8), devs, epoch=3)


def test_train_epochs_records_and_prints_every_epoch(cpus, capsys):
    devs = cpus(1)
    X, y = np.zeros((8, 1, 28, 28), np.uint8), np.zeros(8, np.int32)
    params = [mgpu.get_params(mgpu.lenet_params(), devs[0])]
    step = mgpu.scratch_step(mgpu.lenet_forward, params, devs, lr=0.1)
    hist = mgpu.History(["cpu(0)"], batch_size=4, lr=0.1, model="LeNet")
    scores = iter([0.25, 0.5, 0.75])
    mgpu.train_epochs(step, mgpu.epoch_batches(X, y, 4, seed=0), devs, hist, 3,
                      lambda: next(scores), verbose=True, prefix="rank 0 of 1: ")
    lines = capsys.readouterr().out.splitlines()
    assert hist.test_acc == [0.25, 0.5, 0.75] and len(hist.epoch_time) == 3
    assert [ln.split(":")[0] for ln in lines] == ["rank 0 of 1"] * 3
    assert lines[2].startswith("rank 0 of 1: epoch 3/3: loss ")
