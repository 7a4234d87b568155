"""Looking inside MXNet's KVStore: who sums which key, what the engine ran, what crossed
the wire.

The chapter "Inside the KVStore" checks what MXNet 1.9.1's source says against what a
run does.

- :func:`device_owners`: the device on which a ``device`` KVStore sums each key, as
  ``CommDevice::InitMergeBuffer`` (``src/kvstore/comm.h``) assigns them.
- :func:`server_shares`: how many numbers of each key every server of a distributed
  KVStore holds, as ``KVStoreDist::EncodeDefaultKey`` (``src/kvstore/kvstore_dist.h``)
  cuts them.
- :func:`socket_bytes`: the bytes a process has sent and received over each of its TCP
  connections, read from ``ss`` (iproute2): ps-lite itself counts nothing.
- Programs that print one JSON line and run in a fresh process (MXNet's profiler works
  once per process) or on the workers of :func:`mgpu.cluster.local.run_local_cluster`:
  :func:`reduce_timeline`, :func:`step_timeline`, :func:`push_pull_traffic` and
  :func:`train_traffic`; also runnable as ``python -m mgpu kv_reduce_timeline`` and so
  on.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence

from mgpu.checks import positive_int

__all__ = ["device_owners", "push_pull_traffic", "reduce_timeline", "server_shares",
           "socket_bytes", "step_timeline", "train_traffic"]

#: ``MXNET_KVSTORE_BIGARRAY_BOUND``'s default: arrays with at least this many numbers
#: are cut into one piece per server (``src/kvstore/kvstore_dist.h``).
BIGARRAY_BOUND = 1_000_000


def _report(**fields) -> None:
    print(json.dumps(fields), flush=True)


def device_owners(sizes: Sequence[int], num_devices: int,
                  order: Sequence[int] | None = None) -> list[int]:
    """The device that sums each key in a ``device`` KVStore, in the order of ``sizes``.

    At the first push, ``CommDevice::InitMergeBuffer`` (``src/kvstore/comm.h``) places
    the merge buffer of every key initialised so far: largest key first, each on the
    device that holds the fewest numbers yet. A tie goes to the device that comes
    first in ``order``, the devices in the order of the first pushed key's arrays as
    the store receives them; default ``0, 1, ...``. That is the caller's order when
    one key is pushed at a time, as a Gluon ``Trainer`` does. Every push passes
    through ``GroupKVPairs`` (``src/kvstore/kvstore_local.h``), whose ``std::sort`` by
    key keeps the order of 16 or fewer pairs (libstdc++ only insertion-sorts so few),
    so a key pushed alone keeps the caller's order; a call with many keys may reorder
    a key's arrays: ResNet-18's 62 keys pushed from two devices at once behave as
    ``order=[1, 0]``. Any order gives the same loads, only on other devices; keys of
    equal size may trade owners.

    >>> device_owners([10, 1000, 10, 500, 490], 2)
    [1, 0, 0, 1, 1]
    >>> device_owners([10, 1000, 10, 500, 490], 2, order=[1, 0])
    [0, 1, 1, 0, 0]
    """
    num_devices = positive_int("num_devices", num_devices)
    for i, n in enumerate(sizes):
        positive_int(f"sizes[{i}]", n)
    rank = list(range(num_devices)) if order is None else list(order)
    if sorted(rank) != list(range(num_devices)):
        raise ValueError(f"order must list each of the devices 0 to {num_devices - 1} "
                         f"once, got {order}")
    load = [0] * num_devices
    owner = [0] * len(sizes)
    for key in sorted(range(len(sizes)), key=lambda k: -sizes[k]):
        least = min(load)
        owner[key] = next(d for d in rank if load[d] == least)
        load[owner[key]] += sizes[key]
    return owner


def server_shares(sizes: Sequence[int], num_servers: int,
                  bound: int = BIGARRAY_BOUND) -> list[list[int]]:
    """How many numbers of each key (``sizes[key]``) every server holds: one row per
    key.

    A key with fewer than ``bound`` numbers lives whole on server
    ``(key * 9973) % num_servers``; a bigger one is cut into ``num_servers`` nearly
    equal pieces (``EncodeDefaultKey``).

    >>> server_shares([10, 10, 3_000_000], 2)
    [[10, 0], [0, 10], [1500000, 1500000]]
    """
    num_servers = positive_int("num_servers", num_servers)
    rows = []
    for key, n in enumerate(sizes):
        positive_int(f"sizes[{key}]", n)
        row = [0] * num_servers
        if n < bound:
            row[(key * 9973) % num_servers] = n
        else:
            row = [_round(n / num_servers * (i + 1)) - _round(n / num_servers * i)
                   for i in range(num_servers)]
        rows.append(row)
    return rows


def _round(x: float) -> int:
    """C++'s ``round`` of a positive number: halves away from zero (Python's, to
    even)."""
    return math.floor(x + 0.5)


_SOCKET = re.compile(r"^\S+\s+\d+\s+\d+\s+(\S+)\s+(\S+)\s+users:\(.*pid=(\d+),")


def socket_bytes(pid: int | None = None) -> dict[str, list[int]]:
    """``{peer address: [bytes sent, bytes received]}`` over the TCP connections of
    ``pid``.

    Read from the kernel's TCP statistics with ``ss -tinp`` (iproute2); counts are
    cumulative since each connection opened, so take the difference of two calls. The
    default ``pid`` is this process.

    >>> isinstance(socket_bytes(), dict)
    True
    """
    pid = os.getpid() if pid is None else positive_int("pid", pid)
    ss = shutil.which("ss")
    if ss is None:
        raise RuntimeError("socket_bytes needs the 'ss' command of iproute2, which is "
                           "not installed: apt-get install iproute2")
    lines = subprocess.run([ss, "-tinpH"], capture_output=True, text=True, check=True,
                           timeout=30).stdout.splitlines()
    found: dict[str, list[int]] = {}
    # ss prints each socket's statistics on the next line.
    for i, line in enumerate(lines):
        info = lines[i + 1] if i + 1 < len(lines) else ""
        m = _SOCKET.match(line)
        if not m or int(m.group(3)) != pid:
            continue
        matches = (re.search(rf"\b{w}:(\d+)", info)
                   for w in ("bytes_sent", "bytes_received"))
        counts = [int(x.group(1)) if x else 0 for x in matches]
        total = found.setdefault(m.group(2), [0, 0])
        total[0] += counts[0]
        total[1] += counts[1]
    return found


def _difference(after: dict[str, list[int]],
                before: dict[str, list[int]]) -> dict[str, list]:
    return {peer: [a - b for a, b in zip(v, before.get(peer, [0, 0]), strict=True)]
            for peer, v in after.items()}


def reduce_timeline(kvstore: str = "device", width: int = 16, num_devices: int = 2,
                    one_key_at_a_time: bool = False) -> None:
    """Program: push and pull ResNet-18's gradients from ``num_devices`` CPU devices
    through a single-machine KVStore under MXNet's profiler; print which operations
    ran, where the profiler files them, and on which thread.

    All keys go in one ``push`` and one ``pull`` call, or with ``one_key_at_a_time``
    one key per call, as a Gluon ``Trainer`` does. Device ``i`` pushes ``i + 1``.
    Before the push, one ``dot`` on each device names its worker thread: the thread
    that ran it. Prints one JSON line: ``ops`` lists ``[name, device, worker, count]``,
    where ``device`` is the profiler's device index
    (:class:`mgpu.probes.timing.EngineEvent`) and ``worker`` is ``i`` for the worker
    thread of ``cpu(i)``, ``null`` for any other thread; ``threads`` maps each name to
    the number of threads that ran it; ``sizes`` lists the keys' sizes and ``pulled``
    the distinct values pulled.
    """
    from mgpu.backend import mx
    from mgpu.hardware import devices
    from mgpu.models import gradient_shapes, resnet18_28
    from mgpu.probes.timing import engine_timeline

    devs = devices(num_devices)
    shapes = gradient_shapes(resnet18_28(width=width))
    kv = mx.kv.create(kvstore)
    grads = [[mx.nd.ones(s, ctx=d) * (i + 1) for i, d in enumerate(devs)]
             for s in shapes]
    outs = [[mx.nd.zeros(s, ctx=d) for d in devs] for s in shapes]
    keys = list(range(len(shapes)))
    markers = [mx.nd.ones((4, 4), ctx=d) for d in devs]
    kv.init(keys, [g[0] for g in grads])

    def push_pull() -> None:
        if one_key_at_a_time:
            for k in keys:
                kv.push(k, grads[k])
                kv.pull(k, out=outs[k])
        else:
            kv.push(keys, grads)
            kv.pull(keys, out=outs)

    def work() -> None:
        for m in markers:
            mx.nd.dot(m, m)
        mx.nd.waitall()
        push_pull()

    push_pull()  # the first push allocates the merge buffers
    mx.nd.waitall()
    events = engine_timeline(work)
    worker = {e.thread: e.device for e in events if e.name == "dot"}
    rows: dict[tuple, int] = {}
    threads: dict[str, set[int]] = {}
    for e in events:
        if e.name in ("dot", "DeleteVariable"):
            continue
        key = (e.name, e.device, worker.get(e.thread))
        rows[key] = rows.get(key, 0) + 1
        threads.setdefault(e.name, set()).add(e.thread)
    pulled = sorted({float(x) for row in outs for o in row
                     for x in o.asnumpy().ravel()})
    _report(kvstore=kvstore, num_devices=num_devices,
            one_key_at_a_time=one_key_at_a_time,
            ops=[[*key, n] for key, n in sorted(rows.items(), key=str)],
            threads={name: len(t) for name, t in sorted(threads.items())},
            sizes=[int(mx.nd.zeros(s).size) for s in shapes], pulled=pulled)


def step_timeline(kvstore: str = "device", width: int = 8, batch_size: int = 32,
                  repeats: int = 7) -> None:
    """Program: training steps of ResNet-18 on two CPU devices with a Gluon ``Trainer``.

    Times ``repeats`` pairs of steps, one of each kind, which kind runs first
    alternating from pair to pair: as Gluon runs them (``trainer.step`` right after
    ``backward``, so the engine may reduce some gradients while others are still being
    computed) and with ``mx.nd.waitall()`` between ``backward`` and ``trainer.step``
    (no overlap). Then records one step under the
    profiler. Prints one JSON line with the milliseconds of every step of each kind
    (``overlap_ms``, ``waitall_ms``, in the order run) and the profiled operators as
    ``[name, device, thread, start, end]`` (:class:`mgpu.probes.timing.EngineEvent`).
    """
    from mxnet import autograd, gluon

    from mgpu.backend import mx
    from mgpu.hardware import devices
    from mgpu.models import resnet18_28
    from mgpu.probes.timing import engine_timeline

    repeats = positive_int("repeats", repeats)
    devs = devices(2)
    mx.random.seed(0)
    net = resnet18_28(width=width)
    net.initialize(mx.init.Xavier(), ctx=devs)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05},
                            kvstore=kvstore)
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    X = mx.nd.random.uniform(shape=(batch_size, 1, 28, 28))
    y = mx.nd.array([i % 10 for i in range(batch_size)])
    xs, ys = gluon.utils.split_and_load(X, devs), gluon.utils.split_and_load(y, devs)

    def step(wait: bool) -> None:
        with autograd.record():
            losses = [loss(net(a), b) for a, b in zip(xs, ys, strict=True)]
        for lo in losses:
            lo.backward()
        if wait:
            mx.nd.waitall()
        trainer.step(batch_size)

    for _ in range(2):
        step(False)
    times: dict[bool, list[float]] = {False: [], True: []}
    for pair in range(repeats):
        for wait in ((False, True), (True, False))[pair % 2]:
            mx.nd.waitall()
            start = time.perf_counter()
            step(wait)
            mx.nd.waitall()
            times[wait].append((time.perf_counter() - start) * 1e3)
    events = engine_timeline(lambda: step(False))
    _report(kvstore=kvstore, overlap_ms=times[False], waitall_ms=times[True],
            events=[[e.name, e.device, e.thread, round(e.start_ms, 3),
                     round(e.end_ms, 3)]
                    for e in events if e.name != "DeleteVariable"])


def push_pull_traffic(model: str = "LeNet", width: int = 64, rounds: int = 3,
                      threshold: float | None = None) -> None:
    """Worker program: push and pull a model's gradients through ``dist_sync``,
    ``rounds`` times, and count the bytes this worker's TCP connections carried per
    round.

    ``model`` is ``"LeNet"`` or ``"resnet18_28"`` (at ``width``); with ``threshold`` the
    store compresses pushes to 2 bits per number. The gradients are random normal
    numbers with standard deviation ``threshold`` (or 1), so that compression has
    something to send. Prints one JSON line with the milliseconds of each round and, per
    peer, the bytes sent and received in all rounds (after one warm-up round).
    """
    from mgpu.backend import mx
    from mgpu.models import LeNet, gradient_shapes, resnet18_28

    net = {"LeNet": LeNet, "resnet18_28": lambda: resnet18_28(width=width)}[model]()
    shapes = gradient_shapes(net)
    kv = mx.kv.create("dist_sync")
    if threshold is not None:
        kv.set_gradient_compression({"type": "2bit", "threshold": threshold})
    mx.random.seed(kv.rank)
    scale = threshold if threshold is not None else 1.0
    grads = [mx.nd.random.normal(0, scale, shape=s) for s in shapes]
    outs = [mx.nd.zeros(s) for s in shapes]
    keys = list(range(len(shapes)))
    kv.init(keys, outs)
    times = []
    for r in range(rounds + 1):  # the first round warms up
        mx.nd.waitall()
        if r == 1:
            before = socket_bytes()
        start = time.perf_counter()
        kv.push(keys, grads)
        kv.pull(keys, out=outs)
        mx.nd.waitall()
        times.append((time.perf_counter() - start) * 1e3)
    traffic = _difference(socket_bytes(), before)
    _report(rank=kv.rank, num_workers=kv.num_workers, model=model, threshold=threshold,
            sizes=[int(g.size) for g in grads], ms=times[1:], rounds=rounds,
            bytes=traffic)


def train_traffic(threshold: float | None = None, subset: int = 4096,
                  test_subset: int = 1000, num_epochs: int = 2, batch_size: int = 256,
                  lr: float = 0.2, seed: int = 0) -> None:
    """Worker program: train the Gluon LeNet over ``dist_sync`` with separate pushes and
    pulls, with 2-bit gradient compression if ``threshold`` is given; count the bytes on
    the wire.

    MXNet 1.9.1's ``Trainer`` sends dense gradients with ``pushpull``, which a
    distributed store refuses once compression is set ("Compression not supported with
    PushPull", ``KVStoreDist::PushPullImpl``). This loop therefore does what the
    ``Trainer`` does, with ``push`` and ``pull``: the servers run SGD, and each worker
    pushes the gradients of its shard (:func:`mgpu.loop.worker_shard`) and pulls the
    new weights, key ``i`` with priority ``-i``. Prints one JSON line with the test
    accuracy, loss and seconds of every epoch, and the bytes this worker sent and
    received over TCP during training (initialisation included).
    """
    from mxnet import autograd, gluon

    from mgpu.backend import mx
    from mgpu.data import iter_batches, load_fashion_mnist
    from mgpu.loop import evaluate_accuracy, worker_shard
    from mgpu.models import LeNet

    data = load_fashion_mnist(subset=subset, test_subset=test_subset, seed=seed)
    kv = mx.kv.create("dist_sync")
    if threshold is not None:
        kv.set_gradient_compression({"type": "2bit", "threshold": threshold})
    before = socket_bytes()
    start = time.perf_counter()
    mx.random.seed(seed)
    net = LeNet()
    net.initialize(mx.init.Xavier(), ctx=mx.cpu(0))
    net(mx.nd.zeros((1, 1, 28, 28)))
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]
    keys = list(range(len(params)))
    kv.set_optimizer(mx.optimizer.SGD(learning_rate=lr, rescale_grad=1.0 / batch_size))
    kv.init(keys, [p.data() for p in params])  # the servers keep rank 0's values
    kv.pull(keys, out=[p.data() for p in params])  # so every worker starts from them
    images, labels = worker_shard(data.train_images, data.train_labels, batch_size,
                                  kv.num_workers, kv.rank)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    report: dict[str, list] = {"test_acc": [], "loss": [], "epoch_time": []}
    for epoch in range(num_epochs):
        began, total = time.perf_counter(), 0.0
        for X, y in iter_batches(images, labels, batch_size // kv.num_workers,
                                 shuffle=True, seed=seed + epoch):
            X, y = mx.nd.array(X), mx.nd.array(y)
            with autograd.record():
                loss = loss_fn(net(X), y)
            loss.backward()
            for i, p in zip(keys, params, strict=True):
                kv.push(i, p.grad(), priority=-i)
                kv.pull(i, out=p.data(), priority=-i)
            total += float(loss.sum().asscalar())
        report["epoch_time"].append(time.perf_counter() - began)
        report["loss"].append(total / len(labels))
        report["test_acc"].append(evaluate_accuracy(net, data.test_images,
                                                    data.test_labels, [mx.cpu(0)]))
    seconds = time.perf_counter() - start
    traffic = _difference(socket_bytes(), before)
    _report(rank=kv.rank, num_workers=kv.num_workers, threshold=threshold,
            seconds=seconds, sent=sum(v[0] for v in traffic.values()),
            received=sum(v[1] for v in traffic.values()), **report)
