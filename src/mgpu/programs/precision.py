"""The mixed-precision program: train LeNet in float32 or with MXNet's AMP in bfloat16.

``amp.init(target_dtype="bfloat16")`` patches MXNet's operators for the whole process
and cannot be undone, so each run is a fresh process: ``python -m mgpu amp_train
--dtype "'bfloat16'"`` (:func:`mgpu.programs.run.run_program` writes the arguments).
"""

from __future__ import annotations

import sys
import time

import numpy as np

from mgpu.programs.report import report

__all__ = ["AMP_DTYPES", "amp_train"]

#: What :func:`amp_train` trains in.
AMP_DTYPES = ("float32", "bfloat16")


def _dtype_name(t: object) -> str:
    """A dtype's name; MXNet's bfloat16 is a NumPy record of one uint16 named so."""
    d = np.dtype(t)
    return "bfloat16" if d.names == ("bfloat16",) else d.name


def amp_train(dtype: str = "float32", subset: int = 6000, test_subset: int = 2000,
              epochs: int = 1, batch_size: int = 128, lr: float = 0.1,
              seed: int = 0) -> None:
    """Program: train the Gluon LeNet on ``cpu(0)`` in ``dtype`` (one of
    :data:`AMP_DTYPES`: with ``"bfloat16"``, MXNet's AMP, ``amp.init_trainer`` and
    ``amp.scale_loss``) on ``subset`` Fashion-MNIST images for ``epochs`` epochs.

    Reports one dict: ``dtype``; ``weights`` and ``activations``, the dtypes of the
    first convolution's weight and output in the network's graph (inferred, before any
    kernel runs); ``ran`` (whether training ran) and ``error`` (MXNet's first line if
    it did not); ``test_acc`` and ``images_per_sec`` (after the first batch, a
    warm-up), NaN if it did not run.
    """
    if dtype not in AMP_DTYPES:
        sys.exit(f"amp_train: dtype={dtype!r} is not one of {AMP_DTYPES}")
    from mgpu.backend import mx

    amp = None
    if dtype == "bfloat16":
        from mxnet.contrib import amp

        amp.init(target_dtype="bfloat16")  # before the network is made
    from mgpu.data import iter_batches, load_fashion_mnist
    from mgpu.loop import evaluate_accuracy
    from mgpu.models import LeNet

    data = load_fashion_mnist(subset=subset, test_subset=test_subset, seed=seed)
    mx.random.seed(seed)
    net = LeNet()
    net.initialize(mx.init.Xavier(), ctx=mx.cpu(0))
    # The graph's dtypes, inferred without running a kernel.
    graph = net(mx.sym.var("data")).get_internals()
    _, types, _ = graph.infer_type(data=np.float32)
    dtypes = dict(zip(graph.list_outputs(), types, strict=True))
    conv = next(name for name in dtypes if name.endswith("_weight"))
    layer = conv[: -len("_weight")]
    found = {"dtype": dtype, "weights": _dtype_name(dtypes[conv]),
             "activations": _dtype_name(dtypes[f"{layer}_fwd_output"])}
    net.hybridize()
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": lr},
                               kvstore=None)
    if amp is not None:
        amp.init_trainer(trainer)
    loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    seen, start = 0, None
    try:
        for _ in range(epochs):
            for X, y in iter_batches(data.train_images, data.train_labels, batch_size,
                                     shuffle=True, seed=seed):
                X = mx.nd.array(X, ctx=mx.cpu(0))
                y = mx.nd.array(y, ctx=mx.cpu(0))
                with mx.autograd.record():
                    lo = loss(net(X), y)
                    if amp is not None:
                        with amp.scale_loss(lo, trainer) as scaled:
                            mx.autograd.backward(scaled)
                    else:
                        lo.backward()
                trainer.step(len(y))
                lo.wait_to_read()
                if start is None:  # the first batch is a warm-up
                    start = time.perf_counter()
                else:
                    seen += len(y)
        mx.nd.waitall()
        seconds = time.perf_counter() - start
        acc = evaluate_accuracy(net, data.test_images, data.test_labels, [mx.cpu(0)])
    except mx.base.MXNetError as e:
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        report(**found, ran=False, error=lines[0] if lines else type(e).__name__,
               test_acc=float("nan"), images_per_sec=float("nan"))
        return
    report(**found, ran=True, error="", test_acc=acc,
           images_per_sec=seen / seconds if seconds > 0 else float("nan"))
