"""The catalogue of bad input: every case ends in a clear error that names the argument.

Each case asserts the error type and the key words of its message; none may end in a bare
MXNet traceback (``MXNetError``), a hang or a silent NaN.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import mgpu

mx = mgpu.mx
TWO = [mx.cpu(0), mx.cpu(1)]
QUIET = dict(num_epochs=1, verbose=False, progress=False)


@pytest.fixture(scope="module")
def data(real_data_dir):
    return mgpu.load_fashion_mnist(subset=512, test_subset=128, data_dir=real_data_dir)


def changed(data, **fields):
    return dataclasses.replace(data, **fields)


def images_3x32(data, test=False):
    size = len(data.test_labels) if test else 0
    return changed(data, train_images=np.zeros((512, 3, 32, 32), np.uint8),
                   **({"test_images": np.zeros((size, 3, 32, 32), np.uint8)} if test else {}))


def nan_images(data):
    images = data.train_images.astype(np.float32)
    images[3, 0, 5, 5] = np.nan
    return changed(data, train_images=images)


# (id, call(data), error type, regex of the key words)
TRAIN_CASES = [
    ("labels above the classes", lambda d: mgpu.train(
        mgpu.LeNet(), changed(d, train_labels=d.train_labels + 5), TWO, **QUIET),
     ValueError, r"data\.train_labels must lie in 0\.\.9 .*values \[10, 11"),
    ("negative labels", lambda d: mgpu.train(
        mgpu.lenet_forward, changed(d, train_labels=d.train_labels - 1), TWO, **QUIET),
     ValueError, r"data\.train_labels must lie in 0\.\.9 .*values \[-1\]"),
    ("test labels above the classes", lambda d: mgpu.train(
        mgpu.LeNet(), changed(d, test_labels=d.test_labels + 10), TWO, **QUIET),
     ValueError, r"data\.test_labels must lie in 0\.\.9"),
    ("3x32x32 images into the from-scratch LeNet", lambda d: mgpu.train(
        mgpu.lenet_forward, images_3x32(d, test=True), TWO, **QUIET),
     ValueError, r"cannot take data\.train_images of shape \(3, 32, 32\).*Shape inconsistent"),
    ("train and test images of different shapes", lambda d: mgpu.train(
        mgpu.LeNet(), images_3x32(d), TWO, **QUIET),
     ValueError, r"data\.test_images have shape \(1, 28, 28\) per example but data\.train_images "
                 r"\(3, 32, 32\)"),
    ("parameters that do not fit the model", lambda d: mgpu.train(
        mgpu.lenet_forward, d, TWO, params=mgpu.lenet_params()[:6], **QUIET),
     ValueError, r"cannot take data\.train_images .*parameters it expects"),
    ("NaN learning rate", lambda d: mgpu.train(mgpu.LeNet(), d, TWO, lr=float("nan"), **QUIET),
     ValueError, r"lr must be a positive finite number, got nan"),
    ("negative learning rate", lambda d: mgpu.train(mgpu.LeNet(), d, TWO, lr=-0.1, **QUIET),
     ValueError, r"lr must be a positive finite number, got -0\.1.*climbs the loss"),
    ("learning rate as a string", lambda d: mgpu.train(mgpu.LeNet(), d, TWO, lr="0.1", **QUIET),
     TypeError, r"lr must be a number, got '0\.1'"),
    ("empty training set", lambda d: mgpu.train(mgpu.LeNet(), changed(
        d, train_images=d.train_images[:0], train_labels=d.train_labels[:0]), TWO, **QUIET),
     ValueError, r"data has no training examples"),
    ("fewer examples than devices", lambda d: mgpu.train(mgpu.LeNet(), changed(
        d, train_images=d.train_images[:1], train_labels=d.train_labels[:1]), TWO, **QUIET),
     ValueError, r"1 training examples cannot fill one batch on 2 devices"),
    ("images and labels of different lengths", lambda d: mgpu.train(
        mgpu.LeNet(), changed(d, train_labels=d.train_labels[:-1]), TWO, **QUIET),
     ValueError, r"data\.train_images has 512 examples but data\.train_labels has 511"),
    ("NaN in the images", lambda d: mgpu.train(mgpu.LeNet(), nan_images(d), TWO, **QUIET),
     ValueError, r"data\.train_images contains NaN"),
    ("a learning rate that makes the loss NaN", lambda d: mgpu.train(
        mgpu.LeNet(), d, TWO, lr=1e12, batch_size=64, **QUIET),
     mgpu.NonFiniteLossError, r"loss became nan in epoch 1, batch \d+ .*lr=1e\+12"),
    ("a KVStore name MXNet does not know", lambda d: mgpu.train(
        mgpu.LeNet(), d, TWO, allreduce=False, kvstore="devcie", **QUIET),
     ValueError, r"kvstore='devcie' is not a KVStore type .*quietly create a 'local'"),
    ("a distributed KVStore outside a cluster", lambda d: mgpu.train(
        mgpu.LeNet(), d, TWO, allreduce=False, kvstore="dist_sync", **QUIET),
     ValueError, r"kvstore='dist_sync' needs a parameter-server cluster.*run_local_cluster"),
    ("the NCCL KVStore on a build without NCCL", lambda d: mgpu.train(
        mgpu.LeNet(), d, TWO, allreduce=False, kvstore="nccl", **QUIET),
     ValueError, r"kvstore='nccl' cannot be created with this MXNet build.*USE_NCCL"),
    ("both allreduce and a KVStore", lambda d: mgpu.train(
        mgpu.LeNet(), d, TWO, kvstore="device", **QUIET),
     ValueError, r"would both sum the gradients: pass allreduce=False"),
    ("a KVStore for a from-scratch model", lambda d: mgpu.train(
        mgpu.lenet_forward, d, TWO, allreduce=False, kvstore="device", **QUIET),
     ValueError, r"from-scratch model has no Trainer"),
    ("an unknown optimizer", lambda d: mgpu.train(mgpu.LeNet(), d, TWO, optimizer="sgdd",
                                                  **QUIET),
     ValueError, r"optimizer='sgdd' is not an MXNet optimizer"),
    ("devices given as strings", lambda d: mgpu.train(mgpu.LeNet(), d, ["cpu(0)"], **QUIET),
     TypeError, r"devices\[0\] is the str 'cpu\(0\)', not an MXNet device"),
    ("one device listed twice", lambda d: mgpu.train(mgpu.LeNet(), d, [mx.cpu(0)] * 2, **QUIET),
     ValueError, r"devices lists cpu\(0\) twice"),
    ("a single device instead of a list", lambda d: mgpu.train(mgpu.LeNet(), d, mx.cpu(0),
                                                               **QUIET),
     TypeError, r"got the single device cpu\(0\); use \[cpu\(0\)\]"),
    ("no devices", lambda d: mgpu.train(mgpu.LeNet(), d, [], **QUIET),
     ValueError, r"devices is empty"),
    ("zero epochs", lambda d: mgpu.train(mgpu.LeNet(), d, TWO, num_epochs=0, verbose=False),
     ValueError, r"num_epochs must be at least 1, got 0"),
    ("a fractional batch size", lambda d: mgpu.train(mgpu.LeNet(), d, TWO, batch_size=2.5,
                                                     **QUIET),
     TypeError, r"batch_size must be a whole number, got 2\.5"),
    ("a zero evaluation batch", lambda d: mgpu.train(mgpu.LeNet(), d, TWO, eval_batch_size=0,
                                                     **QUIET),
     ValueError, r"eval_batch_size must be at least 1"),
    ("arrays instead of a Dataset", lambda d: mgpu.train(
        mgpu.LeNet(), (d.train_images, d.train_labels), TWO, **QUIET),
     TypeError, r"data must be an mgpu\.Dataset"),
    ("negative split weights", lambda d: mgpu.train(mgpu.LeNet(), d, TWO, weights=[1, -1],
                                                    **QUIET),
     mgpu.SplitError, r"weights must be positive finite numbers"),
    ("a model that is neither a block nor a function", lambda d: mgpu.train(3, d, TWO, **QUIET),
     TypeError, r"net must be a Gluon block or a function net\(X, params\)"),
    ("evaluation on an empty test set", lambda d: mgpu.evaluate_accuracy(
        mgpu.LeNet(), d.test_images[:0], d.test_labels[:0], TWO),
     ValueError, r"evaluate_accuracy got no examples"),
    ("evaluation on images the model was not built for", lambda d: mgpu.evaluate_accuracy(
        _initialised_lenet(), np.zeros((8, 3, 32, 32), np.uint8), np.zeros(8), TWO),
     ValueError, r"cannot take images of shape \(3, 32, 32\) per example"),
]


def _initialised_lenet():
    net = mgpu.LeNet()
    net.initialize(ctx=TWO)
    net(mx.nd.zeros((1, 1, 28, 28), ctx=TWO[0]))
    return net


@pytest.mark.parametrize("call, error, words", [c[1:] for c in TRAIN_CASES],
                         ids=[c[0] for c in TRAIN_CASES])
def test_bad_training_input(data, call, error, words):
    with pytest.raises(error, match=words) as info:
        call(data)
    assert not isinstance(info.value, mx.base.MXNetError)


def test_non_finite_loss_names_the_epoch_and_batch(data):
    """A model whose output turns NaN at its 8th call: batch 4 (after the probe and 3 x 2)."""
    calls = []

    def exploding(X, params):
        calls.append(1)
        out = mgpu.lenet_forward(X, params)
        return out * float("nan") if len(calls) > 7 else out

    with pytest.raises(mgpu.NonFiniteLossError, match=r"nan in epoch 1, batch 4 \(on cpu\(0\)\)"):
        mgpu.train(exploding, data, TWO, params=mgpu.lenet_params(), batch_size=64, **QUIET)
    assert len(calls) < 8 + 3 * 2  # stopped within three batches of the first NaN


OTHER_CASES = [
    ("split over devices given as strings",
     lambda: mgpu.split_and_load(np.zeros((4, 2)), ["cpu(0)", "cpu(1)"]),
     TypeError, r"devices\[0\] is the str 'cpu\(0\)'"),
    ("split a Python list", lambda: mgpu.split_and_load([[1, 2], [3, 4]], TWO),
     mgpu.SplitError, r"needs a NumPy array or an NDArray, got list"),
    ("a fractional number of devices", lambda: mgpu.devices(2.5),
     mgpu.DeviceError, r"devices\(2\.5\): the number of devices must be a whole number"),
    ("the number of devices as a string", lambda: mgpu.devices("2"),
     mgpu.DeviceError, r"devices\('2'\): the number of devices must be a whole number"),
    ("a fractional subset", lambda: mgpu.load_fashion_mnist(subset=2.5),
     mgpu.DataError, r"subset=2\.5 must be a whole number of examples"),
    ("a zero test subset", lambda: mgpu.load_fashion_mnist(test_subset=0),
     mgpu.DataError, r"test_subset=0 is out of range"),
    ("an unknown model for a fresh process", lambda: mgpu.train_fresh("vgg", 1, {}),
     ValueError, r"model='vgg' is not one of lenet_forward, LeNet, resnet18_28"),
    ("a number in a fresh process's environment",
     lambda: mgpu.train_fresh("LeNet", 1, {"MXNET_OMP_MAX_THREADS": 2}),
     TypeError, r"env values must be str"),
    ("training that fails in the fresh process",
     lambda: mgpu.train_fresh("LeNet", 1, {}, subset=64, test_subset=16, lr=-1.0),
     RuntimeError, r"failed \(exit code 1\): ValueError: lr must be a positive finite number"),
    ("op_overhead between three devices", lambda: mgpu.op_overhead([mx.cpu(0)] * 3),
     ValueError, r"op_overhead: devices must be two devices \(from, to\), got 3"),
    ("op_overhead of no copies", lambda: mgpu.op_overhead(n=0),
     ValueError, r"n and repeats must be at least 1, got n=0"),
]


@pytest.mark.parametrize("call, error, words", [c[1:] for c in OTHER_CASES],
                         ids=[c[0] for c in OTHER_CASES])
def test_bad_input_elsewhere(real_data_dir, call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_mgpu_data_dir_that_does_not_exist_is_an_error_not_a_fallback(monkeypatch, tmp_path):
    monkeypatch.setenv("MGPU_DATA_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(mgpu.DataError, match=r"MGPU_DATA_DIR='.*nowhere' does not exist"):
        mgpu.load_fashion_mnist()


def test_mgpu_data_dir_that_is_a_file_is_an_error(monkeypatch, tmp_path):
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("MGPU_DATA_DIR", str(tmp_path / "file"))
    with pytest.raises(mgpu.DataError, match=r"is a file, not a directory"):
        mgpu.load_fashion_mnist()


def test_mgpu_data_dir_without_the_files_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("MGPU_DATA_DIR", str(tmp_path))
    with pytest.raises(mgpu.DataError, match=r"not found in .* \(MGPU_DATA_DIR=.*\): missing"):
        mgpu.load_fashion_mnist()


def test_a_second_engine_timeline_in_one_process_is_a_clear_error():
    """MXNet's profiler can be configured once per process (run in a child: pytest's own process
    may already have used it in a doctest)."""
    import subprocess
    import sys

    code = ("import mgpu\nmx = mgpu.mx\na = mx.nd.ones((8, 8))\n"
            "assert mgpu.engine_timeline(lambda: mx.nd.dot(a, a))\n"
            "mgpu.engine_timeline(lambda: mx.nd.dot(a, a))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1
    assert "RuntimeError: engine_timeline runs once per process" in done.stderr
