"""The overhead of mgpu.train against a plain, hand-written Gluon loop (LeNet, 2 CPU devices).

Four configurations, interleaved repeat by repeat: ``mgpu.train`` with its own allreduce, with
MXNet's ``kvstore='device'``, the plain loop, and the plain loop plus running sums of the loss and
of the correct predictions, updated every batch (``mgpu.train`` computes those once per epoch).
"""

from __future__ import annotations

import statistics
import time

import mgpu
from bench import common
from bench.common import BATCH, LR, figure, interleave, ratio
from mgpu import mx

nd, gluon, autograd = mx.nd, mx.gluon, mx.autograd

CONFIGS = {
    "train_allreduce": "mgpu.train(net, data, devices, allreduce=True)",
    "train_kvstore_device": "mgpu.train(net, data, devices, allreduce=False, kvstore='device')",
    "plain": "plain Gluon loop, gluon.Trainer with its default kvstore='device'",
    "plain_metrics": "the plain loop plus running sums of the loss and of the correct predictions",
}


def plain_gluon_epoch(net, trainer, images, labels, devices, metrics=False, seed=0) -> float:
    """One epoch of the minimal hand-written loop; returns images per second.

    ``metrics=True`` adds running sums of the loss and of the correct predictions on every
    device, updated every batch, to measure what that costs.
    """
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    loss_sum = [nd.zeros((1,), ctx=d) for d in devices]
    correct = [nd.zeros((1,), ctx=d) for d in devices]
    seen = 0
    nd.waitall()
    start = time.perf_counter()
    for X, y in mgpu.iter_batches(images, labels, BATCH, shuffle=True, seed=seed):
        Xs = gluon.utils.split_and_load(X, devices, even_split=False)
        ys = gluon.utils.split_and_load(y, devices, even_split=False)
        with autograd.record():
            outs = [net(a) for a in Xs]
            losses = [loss_fn(o, b) for o, b in zip(outs, ys)]
        for lo in losses:
            lo.backward()
        trainer.step(len(y))
        if metrics:
            for i, (lo, o, b) in enumerate(zip(losses, outs, ys)):
                loss_sum[i] += lo.sum()
                correct[i] += (o.argmax(axis=1) == b).sum()
        seen += len(y)
    nd.waitall()
    return seen / (time.perf_counter() - start)


def run(cfg: dict) -> dict:
    devices = common.cpus(2)
    epochs = cfg["overhead_epochs"]
    data = mgpu.load_fashion_mnist(subset=cfg["overhead_subset"], test_subset=common.TEST_SUBSET)
    warm = common.warm_up_data()

    def via_train(**reduction):
        def measure(seed):
            net = mgpu.LeNet()
            kw = dict(batch_size=BATCH, lr=LR, verbose=False, progress=False, seed=seed,
                      **reduction)
            mgpu.train(net, warm, devices, num_epochs=1, **kw)
            return statistics.mean(
                mgpu.train(net, data, devices, num_epochs=epochs, **kw).images_per_sec)
        return measure

    def via_plain(metrics):
        def measure(seed):
            net = mgpu.LeNet()
            mx.random.seed(seed)
            net.initialize(mx.init.Xavier(), ctx=devices)
            net.hybridize()
            trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": LR})
            plain_gluon_epoch(net, trainer, warm.train_images, warm.train_labels, devices,
                              metrics, seed)
            return statistics.mean(
                plain_gluon_epoch(net, trainer, data.train_images, data.train_labels, devices,
                                  metrics, seed + e) for e in range(epochs))
        return measure

    samples = interleave({
        "train_allreduce": via_train(allreduce=True),
        "train_kvstore_device": via_train(allreduce=False, kvstore="device"),
        "plain": via_plain(False),
        "plain_metrics": via_plain(True),
    }, cfg["overhead_reps"], "overhead")
    return {
        "setup": {"model": "mgpu.LeNet (Gluon)", "devices": [str(d) for d in devices],
                  "batch_size": BATCH, "lr": LR, "train_images": len(data.train_labels),
                  "epochs_measured_per_repeat": epochs, "repeats": cfg["overhead_reps"],
                  "per_repeat_figure": "mean images/s of the measured epochs",
                  "warm_up_images": common.WARMUP_SUBSET, "configs": CONFIGS,
                  "measured": "training throughput only (History.images_per_sec): the test "
                              "evaluation after each epoch is not counted"},
        "images_per_sec": {n: figure(s, "images/s") for n, s in samples.items()},
        "ratio_to_plain": {
            n: ratio(s, samples["plain"], "ratio (per repeat, to the plain loop in the same "
                                          "repeat)")
            for n, s in samples.items() if n != "plain"},
    }
