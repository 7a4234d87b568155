"""Allreduce of the gradients that training really reduces: ResNet-18's 62 gradients.

``mgpu.resnet18_28()`` has 102 parameters, but 40 of them are BatchNorm's running statistics,
which have no gradient (``grad_req == 'null'``): training sums the other 62 (11,172,810 numbers).
Every algorithm sums those on 2 and 4 CPU devices, rounds interleaved; the results are checked
against NumPy once. Objects that a training run creates once (``FusedAllreduce``, the KVStores)
are created once here too, outside the timing, and called every round. Every round also measures
the per-operation overhead, :func:`mgpu.op_overhead` (the book's one definition: seconds per
operation of a stream of tiny copies, from Python's push to the engine's completion), so that the
algorithms' operation counts can be priced with a figure taken under the same load.
"""

from __future__ import annotations

import time

import numpy as np

import mgpu
from bench.common import cpus, figure, interleave, log, ratio
from mgpu import mx

nd = mx.nd

ALGORITHMS = {
    "seeds": "mgpu.allreduce per tensor: sum on the first device, copy the sum back (the "
             "seeds' reduce-then-broadcast)",
    "scatter_gather": "mgpu.allreduce_scatter_gather per tensor",
    "ring": "mgpu.ring_allreduce per tensor: k-1 neighbour steps of reduce-scatter, then k-1 of "
            "all-gather",
    "fused_small0": "mgpu.FusedAllreduce(grads, small=0): no tensor packed",
    "fused": "mgpu.FusedAllreduce(grads)",
    "kvstore_local": "mx.kv.create('local'): one pushpull of every key",
    "kvstore_device": "mx.kv.create('device'): one pushpull of every key",
    "numpy": "the memory-bandwidth reference: NumPy in one address space reads the k copies of "
             "every gradient, sums them and writes the sum into all k (no MXNet, no devices)",
}
#: The name under which every round also measures mgpu.op_overhead() (not an algorithm).
OP_OVERHEAD = "op_overhead"
OP_OVERHEAD_WHAT = (
    "mgpu.op_overhead() in microseconds, once per round after the algorithms: per operation "
    "of a stream of 500 copies of a 16-element array from cpu(0) to cpu(1), from Python's push "
    "to the engine's completion (waitall), the least of 3 such streams")
#: The book's own algorithms besides the seeds': the best of them is held to KVStore 'local'.
FROM_SCRATCH = ("scatter_gather", "ring", "fused_small0", "fused")


def gradient_shapes() -> tuple[list[tuple[int, ...]], int]:
    """The shapes of ResNet-18's parameters that have a gradient, and the count of all."""
    net = mgpu.resnet18_28()
    shapes = mgpu.gradient_shapes(net)
    return shapes, len(list(net.collect_params().values()))


def numpy_sum(copies: list[list[np.ndarray]]):
    """The same sum in one address space: ``copies[t][i]`` is tensor ``t``'s copy ``i``."""
    def run():
        for arrays in copies:
            total = np.add(arrays[0], arrays[1])
            for a in arrays[2:]:
                total += a
            for a in arrays:
                np.copyto(a, total)
    return run


def algorithms(grads, copies) -> dict:
    """One callable per algorithm, made once: each sums ``grads`` over the devices in place."""
    keys = list(range(len(grads)))
    kvstores = {}
    for name in ("local", "device"):
        kv = mx.kv.create(name)
        kv.init(keys, [g[0] for g in grads])
        kvstores[f"kvstore_{name}"] = lambda kv=kv: kv.pushpull(keys, grads, out=grads)
    return {
        "seeds": lambda: [mgpu.allreduce(g) for g in grads],
        "scatter_gather": lambda: [mgpu.allreduce_scatter_gather(g) for g in grads],
        "ring": lambda: [mgpu.ring_allreduce(g) for g in grads],
        "fused_small0": mgpu.FusedAllreduce(grads, small=0),
        "fused": mgpu.FusedAllreduce(grads),
        **kvstores,
        "numpy": numpy_sum(copies),
    }


def on_devices(k: int, shapes, rounds: int) -> dict:
    """Time every algorithm on ``k`` CPU devices."""
    devices = cpus(k)
    rng = np.random.RandomState(k)
    values = [[rng.randn(*s).astype(np.float32) for _ in devices] for s in shapes]
    origin = [[nd.array(v, ctx=d) for v, d in zip(vs, devices)] for vs in values]
    grads = [[nd.zeros(s, ctx=d) for d in devices] for s in shapes]
    expected = [np.sum(vs, axis=0) for vs in values]

    def restore():
        for src, dst in zip(origin, grads):
            for a, b in zip(src, dst):
                a.copyto(b)
        nd.waitall()

    copies = [[v.copy() for v in vs] for vs in values]
    algos = algorithms(grads, copies)
    for name, reduce in algos.items():  # once, checked: a fast wrong answer is no answer
        restore()
        reduce()
        for g, e in zip(copies if name == "numpy" else grads, expected):
            for a in g:
                got = a if isinstance(a, np.ndarray) else a.asnumpy()
                np.testing.assert_allclose(got, e, rtol=1e-4, atol=1e-4,
                                           err_msg=f"{name} on {k} devices")

    def timed(reduce):
        def measure(_round):
            restore()
            start = time.perf_counter()
            reduce()
            pushed = time.perf_counter()
            nd.waitall()
            return (time.perf_counter() - start) * 1e3, (pushed - start) * 1e3
        return measure

    runs = {n: timed(r) for n, r in algos.items()}
    runs[OP_OVERHEAD] = lambda _round: mgpu.op_overhead() * 1e6
    samples = interleave(runs, rounds, f"allreduce {k} dev")
    op_us = samples.pop(OP_OVERHEAD)
    total = {n: [t for t, _ in s] for n, s in samples.items()}
    out = {n: {"ms": figure(total[n], "ms"),
               "python_push_ms": figure([p for _, p in s], "ms",
                                        what="time until the call returned (work queued)"),
               "ratio_to_local": ratio(total[n], total["kvstore_local"],
                                       "ratio (per round, to KVStore 'local' in the same round)"),
               "ratio_to_numpy": ratio(total[n], total["numpy"],
                                       "ratio (per round, to the NumPy sum in the same round)"),
               "ratio_to_device": ratio(total[n], total["kvstore_device"],
                                        "ratio (per round, to KVStore 'device' in the same round)")}
           for n, s in samples.items()}
    best = min(FROM_SCRATCH, key=lambda n: out[n]["ratio_to_local"]["median"])
    log(f"  allreduce on {k} devices: " + ", ".join(
        f"{n} {out[n]['ms']['median']:.1f} ms" for n in out))
    return {"algorithms": out, "best_from_scratch": {
        "algorithm": best, "ratio_to_local": out[best]["ratio_to_local"]["median"]},
        "op_overhead_us": figure(op_us, "microseconds per operation", what=OP_OVERHEAD_WHAT)}


def run(cfg: dict) -> dict:
    shapes, parameters = gradient_shapes()
    sizes = [int(np.prod(s)) for s in shapes]
    res = {"setup": {
        "model": "mgpu.resnet18_28() (width 64)", "parameters": parameters,
        "tensors": len(shapes), "elements": sum(sizes), "megabytes": sum(sizes) * 4 / 1e6,
        "tensors_below_small": sum(n < mgpu.SMALL_TENSOR for n in sizes),
        "small": mgpu.SMALL_TENSOR, "dtype": "float32", "rounds": cfg["allreduce_rounds"],
        "tensors_are": "the parameters with a gradient (grad_req != 'null')",
        "algorithms": ALGORITHMS, "from_scratch": list(FROM_SCRATCH),
        "method": "random gradients restored before every call (not timed); waitall, call, "
                  "waitall; algorithms interleaved round by round; every result checked against "
                  "the NumPy sum once; mgpu.op_overhead() once per round, after the "
                  "algorithms (op_overhead_us of each device count)",
    }}
    for k in (2, 4):
        res[f"{k}_devices"] = on_devices(k, shapes, cfg["allreduce_rounds"])
        nd.waitall()
    return res
