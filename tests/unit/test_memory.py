"""mgpu.memory: bytes per device counted from the arrays; the peak measured in a fresh process."""

import numpy as np
import pytest

import mgpu
from mgpu.programs.memory import process_memory

mx = mgpu.mx
nd = mx.nd
gluon = mx.gluon

LENET_PARAMS = 129_068  # 20*1*3*3+20 + 50*20*5*5+50 + 128*800+128 + 10*128+10
# Outputs per example: conv 20x26x26, relu, pool 20x13x13, conv 50x9x9, relu, pool 50x4x4,
# dense 128, relu, dense 10.
LENET_ACTIVATIONS = 2 * 13520 + 3380 + 2 * 4050 + 800 + 2 * 128 + 10


def _lenet(devices):
    net = mgpu.LeNet()
    mgpu.initialise(net, devices, seed=0)
    with pytest.raises(ValueError, match="deferred initialisation"):
        mgpu.parameter_bytes(net, devices[0])
    net(nd.zeros((1, 1, 28, 28), ctx=devices[0]))  # the shapes are known from here on
    return net


def test_parameters_and_gradients_are_a_full_copy_on_every_device(cpus):
    devs = cpus(2)
    net = _lenet(devs)
    for d in devs:
        assert mgpu.parameter_bytes(net, d) == 4 * LENET_PARAMS
        assert mgpu.gradient_bytes(net, d) == 4 * LENET_PARAMS
    assert mgpu.parameter_bytes(net, mx.cpu(2)) == 0
    scratch = mgpu.get_params(mgpu.lenet_params(), devs[1])
    assert mgpu.parameter_bytes(scratch, devs[1]) == 4 * LENET_PARAMS
    assert mgpu.gradient_bytes(scratch, devs[1]) == 4 * LENET_PARAMS


def test_batchnorm_running_statistics_are_parameters_without_gradients():
    bn = gluon.nn.BatchNorm(in_channels=16)
    bn.initialize()
    assert mgpu.parameter_bytes(bn, mx.cpu(0)) == 4 * 16 * 4  # gamma, beta, mean, var
    assert mgpu.gradient_bytes(bn, mx.cpu(0)) == 4 * 16 * 2


@pytest.mark.parametrize("optimizer, params, copies", [
    ("sgd", {}, 0), ("sgd", {"momentum": 0.9}, 1), ("adam", {}, 2)])
def test_optimizer_state_is_counted_from_the_trainer(cpus, optimizer, params, copies):
    devs = cpus(2)
    net = _lenet(devs)
    trainer = gluon.Trainer(net.collect_params(), optimizer,
                            {"learning_rate": 0.01, **params}, kvstore=None)
    assert mgpu.optimizer_state_bytes(trainer, devs[0]) == 0  # made by the first update
    step = mgpu.gluon_step(net, trainer, devs)
    step(np.zeros((4, 1, 28, 28), "float32"), np.arange(4))
    for d in devs:
        assert mgpu.optimizer_state_bytes(trainer, d) == copies * 4 * LENET_PARAMS
    use = mgpu.memory_use(net, trainer, devs[1], (8, 1, 28, 28))
    assert use.optimizer_state == copies * 4 * LENET_PARAMS
    assert use.total == (2 + copies) * 4 * LENET_PARAMS + 8 * 4 * LENET_ACTIVATIONS


def test_optimizer_state_from_given_arrays(cpus):
    a, b = cpus(2)
    state = {0: nd.zeros(10, ctx=a), 1: (nd.zeros(5, ctx=a), nd.zeros(7, ctx=b)), 2: None}
    assert mgpu.optimizer_state_bytes(state, a) == 60
    assert mgpu.optimizer_state_bytes(state, b) == 28
    with pytest.raises(TypeError, match="optimizer state must be a Trainer or NDArrays"):
        mgpu.optimizer_state_bytes([1.5], a)


def test_activations_are_counted_per_example_and_halve_in_bfloat16():
    net = mgpu.LeNet()
    assert mgpu.activation_bytes(net, (1, 1, 28, 28)) == 4 * LENET_ACTIVATIONS
    assert mgpu.activation_bytes(net, (64, 1, 28, 28)) == 64 * 4 * LENET_ACTIVATIONS
    # AMP: every output in bfloat16, plus the logits cast back to float32 and the input's cast
    bf16 = 2 * LENET_ACTIVATIONS + 4 * 10 + 2 * 784
    assert mgpu.activation_bytes(net, (3, 1, 28, 28), "bfloat16") == 3 * bf16


@pytest.mark.parametrize("call, error, words", [
    (lambda: mgpu.activation_bytes(gluon.nn.Block(), (1, 2)), TypeError, "hybridizable"),
    (lambda: mgpu.activation_bytes(mgpu.LeNet(), (0, 1, 28, 28)), ValueError,
     r"input_shape=\(0, 1, 28, 28\) must be the micro-batch's shape"),
    (lambda: mgpu.activation_bytes(mgpu.LeNet(), (1, 1, 28, 28), "float16"), ValueError,
     "dtype='float16'"),
    (lambda: mgpu.MemoryUse(1, 2, -3, 4), ValueError, "optimizer_state=-3 must be a whole"),
    (lambda: mgpu.array_bytes(3), TypeError, "array_bytes counts NDArrays"),
    (lambda: mgpu.parameter_bytes([np.zeros(3)], mx.cpu(0)), TypeError,
     "model: item 0 is a ndarray"),
    (lambda: mgpu.measure_peak_memory(temp_copies=0), ValueError, "temp_copies=0"),
    (lambda: process_memory("Name: x\n"), RuntimeError, "no VmRSS and VmHWM"),
])
def test_bad_input(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_memory_use_reads_in_megabytes():
    use = mgpu.MemoryUse(2_000_000, 2_000_000, 0, 6_000_000)
    assert use.total == 10_000_000
    assert use.megabytes() == [2.0, 2.0, 0.0, 6.0, 10.0]
    assert "activations 6.00 MB; total 10.00 MB" in repr(use)


def test_accumulation_lowers_the_measured_peak():
    """Fresh processes: a quarter of the micro-batch needs clearly less memory (the activations
    of LeNet at 1,024 examples are 162 MB, measured growth ~270 MB; at 256: ~100 MB)."""
    plain = mgpu.measure_peak_memory(batch_size=1024, accumulate=1, steps=1)
    accumulated = mgpu.measure_peak_memory(batch_size=1024, accumulate=4, steps=1)
    assert accumulated["allreduces"] == plain["allreduces"] == 1
    assert accumulated["growth"] < 0.75 * plain["growth"]
    assert plain["growth"] > mgpu.activation_bytes(mgpu.LeNet(), (1024, 1, 28, 28)) / 2
