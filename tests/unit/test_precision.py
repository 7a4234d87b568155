"""Mixed precision: CPU flags, float16 casts, the dynamic loss scale, the float16
allreduce, and bfloat16 training in a fresh process."""

import math

import numpy as np
import pytest

from mgpu.backend import mx
from mgpu.models import lenet_forward, lenet_params
from mgpu.parallel import get_params
from mgpu.precision import (
    BF16_FLAGS,
    DynamicLossScale,
    Float16Allreduce,
    cast_fractions,
    cpu_bf16_flags,
)
from mgpu.programs.run import run_program
from mgpu.sharded import ReplicatedOptimizer, optimizer_step


def test_cpu_flags_are_read_from_the_flags_line():
    text = "processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_bf16\nbugs\t: avx512_bf16\n"
    assert cpu_bf16_flags(text) == {"avx512f": True, "avx512bw": False, "avx512vl": False,
                                    "avx512dq": False, "avx512_bf16": False,
                                    "amx_bf16": True}
    assert set(cpu_bf16_flags()) == set(BF16_FLAGS)  # this machine's /proc/cpuinfo
    with pytest.raises(ValueError, match="no 'flags' line"):
        cpu_bf16_flags("processor: 0\n")


def test_float16_flushes_small_gradients_and_a_loss_scale_saves_them():
    g = np.array([2e-8, 1e-7, 1e-5, 1e-2, 2.0], np.float32)
    assert cast_fractions(g).flushed == pytest.approx(1 / 5)  # below 2**-25 rounds to 0
    scaled = cast_fractions(g, scale=1024.0)
    assert scaled.flushed == 0 and scaled.overflowed == 0 and scaled.kept == 1
    assert cast_fractions(g, scale=2.0**16).overflowed == pytest.approx(1 / 5)
    assert cast_fractions(g, dtype="float32").flushed == 0
    with pytest.raises(ValueError, match="no finite non-zero"):
        cast_fractions(np.zeros(3))
    with pytest.raises(ValueError, match="dtype="):
        cast_fractions(g, dtype="no-such-type")
    with pytest.raises(ValueError, match="scale"):
        cast_fractions(g, scale=-1.0)


def test_dynamic_loss_scale_halves_on_overflow_and_grows_after_good_steps():
    ls = DynamicLossScale(scale=2.0**10, growth_interval=3)
    applied = [ls.update(f) for f in [True, True, True, True, False, False, True]]
    assert applied == [True, True, True, True, False, False, True]
    assert ls.history == [2.0**10] * 3 + [2.0**11] * 2 + [2.0**10, 2.0**9]
    assert ls.scale == 2.0**9 and ls.good_steps == 1
    capped = DynamicLossScale(scale=2.0**24, growth_interval=1)
    capped.update(True)
    assert capped.scale == 2.0**24
    with pytest.raises(ValueError, match="growth_interval"):
        DynamicLossScale(growth_interval=0)
    with pytest.raises(ValueError, match="factor"):
        DynamicLossScale(factor=1.0)


def test_float16_allreduce_sums_in_half_the_bytes():
    rng = np.random.default_rng(0)
    values = [rng.normal(size=(50, 40)).astype(np.float32) for _ in range(2)]
    grads = [[mx.nd.array(v, ctx=mx.cpu(i)) for i, v in enumerate(values)],
             [mx.nd.ones((7,), ctx=mx.cpu(i)) for i in range(2)]]
    reduce = Float16Allreduce(grads)
    reduce()
    exact = values[0] + values[1]
    for i in range(2):
        assert grads[0][i].dtype == np.float32
        np.testing.assert_allclose(grads[0][i].asnumpy(), exact, rtol=2e-3, atol=2e-3)
        assert grads[1][i].asnumpy().tolist() == [2.0] * 7
    assert reduce.nbytes == (50 * 40 + 7) * 2
    with pytest.raises(ValueError, match="float32"):
        Float16Allreduce([[mx.nd.ones((3,), dtype="float16")]])


def test_training_through_the_float16_allreduce_stays_close_to_float32():
    devs = [mx.cpu(0), mx.cpu(1)]
    rng = np.random.default_rng(3)
    batches = [(rng.random((32, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, 32))
               for _ in range(3)]
    runs = []
    for compression in (None, "fp16"):
        params = [get_params(lenet_params(), d) for d in devs]
        opt = ReplicatedOptimizer(params, "sgd", compression=compression,
                                  learning_rate=0.1, momentum=0.9)
        step = optimizer_step(lenet_forward, params, devs, opt)
        for X, y in batches:
            step(X, y)
        runs.append((params, opt.allreduce_bytes))
    (p32, b32), (p16, b16) = runs
    assert b16 * 2 == b32
    for a, b in zip(p32[0], p16[0], strict=True):
        np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), rtol=1e-2, atol=1e-3)
    assert any((a.asnumpy() != b.asnumpy()).any() for a, b in zip(p32[0], p16[0]))
    with pytest.raises(ValueError, match="compression"):
        ReplicatedOptimizer(p32, "sgd", compression="int8")


def test_bfloat16_training_in_a_fresh_process():
    # AMP keeps float32 master weights and computes the convolution in bfloat16; the
    # oneDNN of MXNet 1.9.1 runs bfloat16 kernels only with avx512_core (AVX-512 F, BW,
    # VL and DQ).
    (found,) = run_program("amp_train", dtype="bfloat16", subset=512, test_subset=256)
    assert (found["weights"], found["activations"]) == ("float32", "bfloat16")
    flags = cpu_bf16_flags()
    if all(flags[f] for f in ("avx512f", "avx512bw", "avx512vl", "avx512dq")):
        assert found["ran"] and found["test_acc"] > 0.1, found
    else:
        assert not found["ran"] and "primitive descriptor" in found["error"], found
        assert math.isnan(found["images_per_sec"])
    with pytest.raises(RuntimeError, match="dtype='float64' is not one of"):
        run_program("amp_train", dtype="float64")
