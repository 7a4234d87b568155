"""Checkpoints: exact resume, atomic writes, corrupt files, mismatches, failed runs."""

import os
import warnings

import numpy as np
import pytest

import mgpu

mx = mgpu.mx


@pytest.fixture(scope="module")
def toy():
    """A synthetic data set: 192 training and 64 test images, 10 classes."""
    rng = np.random.RandomState(0)
    return mgpu.Dataset("toy", None, rng.randint(0, 256, (192, 1, 28, 28)).astype(np.uint8),
                        rng.randint(0, 10, 192).astype(np.int32),
                        rng.randint(0, 256, (64, 1, 28, 28)).astype(np.uint8),
                        rng.randint(0, 10, 64).astype(np.int32))


def _run(net, data, devs, epochs, path=None, **kw):
    kw = {"batch_size": 64, "lr": 0.01, "optimizer": "adam", **kw}
    return mgpu.train(net, data, devs, num_epochs=epochs, checkpoint=path, verbose=False,
                      progress=False, **kw)


def _gluon_values(net, device):
    return [p.data(device).asnumpy() for p in net.collect_params().values()]


def test_gluon_resume_is_bit_for_bit_with_adam(cpus, toy, tmp_path):
    devs, path = cpus(2), tmp_path / "lenet.ckpt"
    whole = mgpu.LeNet()
    full = _run(whole, toy, devs, 3)
    first = _run(mgpu.LeNet(), toy, devs, 2, path)
    assert first.resumed == 0 and len(first.test_acc) == 2
    resumed = mgpu.LeNet()
    hist = _run(resumed, toy, devs, 3, path)
    assert hist.resumed == 2
    assert hist.test_acc == full.test_acc and hist.loss == full.loss
    for a, b in zip(_gluon_values(whole, devs[1]), _gluon_values(resumed, devs[1])):
        np.testing.assert_array_equal(a, b)
    assert mgpu.load_checkpoint(path).epoch == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lenet.ckpt", "lenet.ckpt.prev"]


def test_scratch_resume_is_bit_for_bit(cpus, toy, tmp_path):
    devs, path = cpus(2), tmp_path / "scratch.ckpt"
    params = mgpu.lenet_params(seed=0)
    full = _run(mgpu.lenet_forward, toy, devs, 2, params=params, lr=0.1)
    _run(mgpu.lenet_forward, toy, devs, 1, path, params=mgpu.lenet_params(seed=0), lr=0.1)
    hist = _run(mgpu.lenet_forward, toy, devs, 2, path, params=mgpu.lenet_params(seed=0),
                lr=0.1)
    assert hist.resumed == 1 and hist.test_acc == full.test_acc and hist.loss == full.loss
    saved = mgpu.load_checkpoint(path)
    assert saved.states == b"" and saved.meta["optimizer"] == "sgd"
    assert list(saved.params) == [f"param{i}" for i in range(8)]


def test_finished_run_runs_no_epoch(cpus, toy, tmp_path):
    path = tmp_path / "a.ckpt"
    _run(mgpu.LeNet(), toy, cpus(1), 2, path)
    before = path.read_bytes()
    hist = _run(mgpu.LeNet(), toy, cpus(1), 2, path)
    assert hist.resumed == 2 and len(hist.test_acc) == 2
    assert path.read_bytes() == before  # nothing ran, nothing was written


def test_resume_on_more_devices_keeps_copies_identical(cpus, toy, tmp_path):
    """2 -> 4 devices with Adam: the new devices get the update counts too."""
    path = tmp_path / "a.ckpt"
    _run(mgpu.LeNet(), toy, cpus(2), 1, path)
    net = mgpu.LeNet()
    hist = _run(net, toy, cpus(4), 2, path)
    assert hist.resumed == 1 and len(hist.devices) == 4
    for p in net.collect_params().values():
        first = p.data(mx.cpu(0)).asnumpy()
        for d in cpus(4)[1:]:
            np.testing.assert_array_equal(first, p.data(d).asnumpy())


def test_corrupt_checkpoint_falls_back_to_previous_with_warning(cpus, toy, tmp_path):
    path = tmp_path / "a.ckpt"
    _run(mgpu.LeNet(), toy, cpus(1), 2, path, optimizer="sgd")
    content = bytearray(path.read_bytes())
    content[len(content) // 2] ^= 0xFF  # one flipped byte
    path.write_bytes(bytes(content))
    with pytest.warns(UserWarning, match="a.ckpt is not usable.*checksum") as caught:
        saved = mgpu.load_checkpoint(path)
    assert saved.epoch == 1
    assert str(path) in str(caught[0].message)
    assert str(mgpu.previous_path(path)) in str(caught[0].message)


def test_torn_tmp_is_ignored_and_truncated_file_detected(tmp_path):
    path = tmp_path / "a.ckpt"
    ckpt = mgpu.Checkpoint(1, {"w": np.arange(3.0)}, b"states", {"seed": 0}, {"loss": [1.0]})
    mgpu.save_checkpoint(path, ckpt)
    (tmp_path / "a.ckpt.tmp").write_bytes(b"mgpu-checkpoint 1 sha256=00\n{")  # a torn write
    got = mgpu.load_checkpoint(path)
    assert got.epoch == 1 and got.states == b"states" and got.history == {"loss": [1.0]}
    np.testing.assert_array_equal(got.params["w"], np.arange(3.0))
    mgpu.save_checkpoint(path, mgpu.Checkpoint(2, ckpt.params, b"", {}))
    path.write_bytes(path.read_bytes()[:40])  # truncated
    with pytest.warns(UserWarning, match="a.ckpt"):
        assert mgpu.load_checkpoint(path).epoch == 1


def test_no_good_checkpoint_is_a_clear_error(tmp_path):
    path = tmp_path / "a.ckpt"
    path.write_bytes(b"garbage")
    mgpu.previous_path(path).write_bytes(b"")
    with pytest.raises(mgpu.CheckpointError, match="a.ckpt: it does not start.*a.ckpt.prev"):
        mgpu.load_checkpoint(path)


def test_saving_over_a_corrupt_file_keeps_the_good_previous(tmp_path):
    path, prev = tmp_path / "a.ckpt", tmp_path / "a.ckpt.prev"
    mgpu.save_checkpoint(path, mgpu.Checkpoint(1, {"w": np.ones(1)}, b"", {}))
    mgpu.save_checkpoint(path, mgpu.Checkpoint(2, {"w": np.ones(1)}, b"", {}))
    path.write_bytes(b"junk")
    mgpu.save_checkpoint(path, mgpu.Checkpoint(3, {"w": np.ones(1)}, b"", {}))
    assert mgpu.load_checkpoint(path).epoch == 3
    assert mgpu.load_checkpoint(prev).epoch == 1  # the junk did not replace it


@pytest.mark.parametrize("change, match", [
    (dict(net="dense"), "holds another model: parameter '0.weight' in the checkpoint where "
                        "the model has '1.weight'"),
    (dict(optimizer="sgd"), "optimizer='adam', but this run has optimizer='sgd'"),
    (dict(classes=5), "classes=10, but this run has classes=5"),
    (dict(seed=1), "seed=0, but this run has seed=1"),
])
def test_mismatch_is_refused_and_nothing_is_overwritten(cpus, toy, tmp_path, change, match):
    path = tmp_path / "a.ckpt"
    _run(mgpu.LeNet(), toy, cpus(1), 1, path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    kw = {k: v for k, v in change.items() if k in ("optimizer", "seed")}
    net = mgpu.LeNet()
    data = toy
    if "net" in change:
        net = mx.gluon.nn.HybridSequential()
        net.add(mx.gluon.nn.Flatten(), mx.gluon.nn.Dense(10))
    if "classes" in change:
        net = mx.gluon.nn.HybridSequential()
        lenet = mgpu.LeNet()
        for block in list(lenet._children.values())[:-1]:
            net.add(block)
        net.add(mx.gluon.nn.Dense(5))
        data = mgpu.Dataset("toy5", None, toy.train_images, toy.train_labels % 5,
                            toy.test_images, toy.test_labels % 5)
    with pytest.raises(mgpu.CheckpointMismatchError, match=match) as err:
        _run(net, data, cpus(1), 2, path, **kw)
    assert "another checkpoint path" in str(err.value)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_failed_run_keeps_the_good_checkpoint(cpus, toy, tmp_path, monkeypatch):
    path = tmp_path / "a.ckpt"
    _run(mgpu.LeNet(), toy, cpus(1), 1, path, optimizer="sgd")
    with pytest.raises(ValueError, match="accumulate"):  # bad input: nothing written
        _run(mgpu.LeNet(), toy, cpus(1), 3, path, optimizer="sgd", accumulate=0)
    assert not mgpu.previous_path(path).exists()
    run_epoch = mgpu.loop.run_epoch

    def killed_in_epoch_3(step, batches, devices, *, epoch, **kw):
        if epoch == 3:
            next(iter(batches))
            raise RuntimeError("killed mid-epoch")
        return run_epoch(step, batches, devices, epoch=epoch, **kw)

    monkeypatch.setattr(mgpu.loop, "run_epoch", killed_in_epoch_3)
    with pytest.raises(RuntimeError, match="killed"):
        _run(mgpu.LeNet(), toy, cpus(1), 4, path, optimizer="sgd")
    assert mgpu.load_checkpoint(path).epoch == 2  # epoch 2 was saved, 3 never finished
    assert mgpu.load_checkpoint(mgpu.previous_path(path)).epoch == 1
    assert not (tmp_path / "a.ckpt.tmp").exists()
    monkeypatch.undo()
    assert _run(mgpu.LeNet(), toy, cpus(1), 4, path, optimizer="sgd").resumed == 2


def test_bad_checkpoint_argument(cpus, toy, tmp_path):
    with pytest.raises(ValueError, match="is a directory"):
        _run(mgpu.LeNet(), toy, cpus(1), 1, tmp_path)
    with pytest.raises(TypeError, match="file path"):
        _run(mgpu.LeNet(), toy, cpus(1), 1, 3)
    assert os.listdir(tmp_path) == []


def test_history_records_accumulate_and_a_fresh_run(cpus, toy, tmp_path):
    hist = _run(mgpu.LeNet(), toy, cpus(1), 1, tmp_path / "a.ckpt")
    assert hist.accumulate == 1 and hist.resumed == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a first run warns about nothing
        assert mgpu.load_checkpoint(tmp_path / "a.ckpt").history["accumulate"] == 1


def test_resume_does_not_depend_on_how_many_blocks_the_process_made(cpus, toy, tmp_path):
    """Gluon names parameters with process-wide counters ('conv9_weight', 'conv10_weight'),
    and a Trainer given a ParameterDict sorts the names: a network whose counters cross a
    power of ten is sorted in another order, and the optimizer state saved by one process must
    still reach the right parameters in another."""
    devs, path = cpus(2), tmp_path / "lenet.ckpt"
    for _ in range(10):  # a LeNet whose two convolutions are numbered ...9 and ...10
        straddling = mgpu.LeNet()
        convs = [n.split("_")[0] for n in straddling.collect_params() if n.startswith("conv")]
        if convs[0].endswith("9"):
            break
        mx.gluon.nn.Conv2D(1, 3)  # one more block: the next LeNet's numbers move by 3
    assert convs[0].endswith("9"), convs
    _run(straddling, toy, devs, 1, path)
    resumed = _run(mgpu.LeNet(), toy, devs, 2, path)
    assert resumed.resumed == 1 and len(resumed.test_acc) == 2
