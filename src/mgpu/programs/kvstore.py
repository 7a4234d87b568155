"""The KVStore chapter's programs: each runs in a process of its own and reports one
result with :func:`mgpu.programs.report.report`.

:func:`reduce_timeline` and :func:`step_timeline` run MXNet's profiler, which works once
per process: run them in a fresh process with :func:`mgpu.programs.run.run_program`
(``kv_reduce_timeline``, ``kv_step_timeline``). :func:`push_pull_traffic` and
:func:`train_traffic` are worker programs of a ``dist_sync`` store: run them on the
workers of :func:`mgpu.cluster.local.run_local_cluster`. All four are also
``python -m mgpu kv_reduce_timeline`` and so on (:mod:`mgpu.programs.registry`).
"""

from __future__ import annotations

import time

from mgpu.checks import positive_int
from mgpu.probes.kvstore import socket_bytes
from mgpu.programs.report import report

__all__ = ["push_pull_traffic", "reduce_timeline", "step_timeline", "train_traffic"]


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
    report(kvstore=kvstore, num_devices=num_devices,
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
    report(kvstore=kvstore, overlap_ms=times[False], waitall_ms=times[True],
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
    report(rank=kv.rank, num_workers=kv.num_workers, model=model, threshold=threshold,
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
    from mgpu import loop
    from mgpu.backend import mx
    from mgpu.data import load_fashion_mnist
    from mgpu.models import LeNet
    from mgpu.step import StepResult, forward_backward

    data = load_fashion_mnist(subset=subset, test_subset=test_subset, seed=seed)
    kv = mx.kv.create("dist_sync")
    if threshold is not None:
        kv.set_gradient_compression({"type": "2bit", "threshold": threshold})
    before = socket_bytes()
    start = time.perf_counter()
    devices = [mx.cpu(0)]
    net = LeNet()
    loop.initialise(net, devices, seed)
    net(mx.nd.zeros((1, 1, 28, 28)))  # every parameter gets its shape and values
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]
    keys = list(range(len(params)))
    kv.set_optimizer(mx.optimizer.SGD(learning_rate=lr, rescale_grad=1.0 / batch_size))
    kv.init(keys, [p.data() for p in params])  # the servers keep rank 0's values
    kv.pull(keys, out=[p.data() for p in params])  # so every worker starts from them
    images, labels = loop.worker_shard(data.train_images, data.train_labels,
                                       batch_size, kv.num_workers, kv.rank)
    loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()

    def step(X, y) -> StepResult:  # forward, backward, then Trainer.step's push, pull
        result = forward_backward(net, X, y, devices, loss)
        for i, p in zip(keys, params, strict=True):
            kv.push(i, p.grad(), priority=-i)
            kv.pull(i, out=p.data(), priority=-i)
        return result

    hist = loop.History(devices=[str(d) for d in devices], batch_size=batch_size,
                        lr=lr, model=type(net).__name__,
                        reduction="dist_sync push and pull")
    batches = loop.epoch_batches(images, labels, batch_size // kv.num_workers, seed)
    loop.train_epochs(step, batches, devices, hist, num_epochs,
                      lambda: loop.evaluate_accuracy(net, data.test_images,
                                                     data.test_labels, devices))
    seconds = time.perf_counter() - start
    traffic = _difference(socket_bytes(), before)
    report(rank=kv.rank, num_workers=kv.num_workers, threshold=threshold,
           seconds=seconds, sent=sum(v[0] for v in traffic.values()),
           received=sum(v[1] for v in traffic.values()), test_acc=hist.test_acc,
           loss=hist.loss, epoch_time=hist.epoch_time)
