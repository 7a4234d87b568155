"""The book's models: LeNet from scratch, LeNet in Gluon, ResNet-18 for 28x28 images."""

from __future__ import annotations

import numpy as np

from mgpu.backend import mx

__all__ = ["LENET_SHAPES", "LeNet", "gradient_shapes", "lenet_forward", "lenet_params",
           "resnet18_28"]

nd = mx.nd
nn = mx.gluon.nn

#: Shapes of the from-scratch LeNet's parameters, in the order :func:`lenet_forward`
#: uses them.
LENET_SHAPES: list[tuple[int, ...]] = [
    (20, 1, 3, 3), (20,),        # conv 20@3x3
    (50, 20, 5, 5), (50,),       # conv 50@5x5
    (128, 800), (128,),          # dense 128 (50 channels x 4 x 4 after two poolings)
    (10, 128), (10,),            # dense 10
]


def lenet_params(seed: int = 0, scale: float | None = None) -> list[nd.NDArray]:
    """Fresh LeNet parameters on the CPU: weights ~ N(0, scale^2), biases zero.

    By default ``scale`` is He's ``sqrt(2 / fan_in)`` per layer, which suits ReLU
    networks and lets a few hundred SGD steps reach useful accuracy (a fixed small scale
    such as 0.01 leaves the loss flat at ln 10 for a long time). The numbers come from
    NumPy with a fixed ``seed``, so they depend neither on the device nor on the order
    in which MXNet's generators were used (all CPU devices share one, each GPU has its
    own); copy them to each device with :func:`mgpu.parallel.get_params`.

    >>> [p.shape for p in lenet_params()][:2]
    [(20, 1, 3, 3), (20,)]
    """
    rng = np.random.RandomState(seed)
    params = []
    for shape in LENET_SHAPES:
        if len(shape) == 1:
            params.append(nd.zeros(shape))
            continue
        std = scale if scale is not None else float(np.sqrt(2.0 / np.prod(shape[1:])))
        params.append(nd.array(rng.normal(0, std, shape), dtype="float32"))
    return params


def lenet_forward(X: nd.NDArray, params: list[nd.NDArray]) -> nd.NDArray:
    """LeNet's forward pass written with raw operators; returns unnormalised scores
    (logits).

    >>> lenet_forward(nd.zeros((4, 1, 28, 28)), lenet_params()).shape
    (4, 10)
    """
    W1, b1, W2, b2, W3, b3, W4, b4 = params
    h = nd.relu(nd.Convolution(X, W1, b1, kernel=(3, 3), num_filter=20))
    h = nd.Pooling(h, pool_type="max", kernel=(2, 2), stride=(2, 2))
    h = nd.relu(nd.Convolution(h, W2, b2, kernel=(5, 5), num_filter=50))
    h = nd.Pooling(h, pool_type="max", kernel=(2, 2), stride=(2, 2))
    h = nd.relu(nd.FullyConnected(h.flatten(), W3, b3, num_hidden=128))
    return nd.FullyConnected(h, W4, b4, num_hidden=10)


def LeNet() -> nn.HybridSequential:  # noqa: N802 - a constructor, named like a class
    """The same LeNet as a hybridizable Gluon network (parameters not yet initialised).

    >>> net = LeNet(); net.initialize(); net(nd.zeros((2, 1, 28, 28))).shape
    (2, 10)
    """
    net = nn.HybridSequential()
    net.add(
        nn.Conv2D(20, kernel_size=3, activation="relu"),
        nn.MaxPool2D(pool_size=2, strides=2),
        nn.Conv2D(50, kernel_size=5, activation="relu"),
        nn.MaxPool2D(pool_size=2, strides=2),
        nn.Dense(128, activation="relu"),
        nn.Dense(10),
    )
    return net


def resnet18_28(num_classes: int = 10, width: int = 64) -> nn.HybridSequential:
    """ResNet-18 for small (28x28) images, built from the model zoo's residual blocks.

    ImageNet's ResNet-18 starts with a 7x7 stride-2 convolution and a max-pooling that
    would shrink a 28x28 image to 7x7 at once; here the stem is a single 3x3
    convolution, followed by four stages of two
    :class:`~mxnet.gluon.model_zoo.vision.resnet.BasicBlockV1` each (64, 128, 256 and
    512 channels, the last three halving the resolution), global average pooling and a
    dense layer. ``width`` scales the channel counts (64 is the standard network, 11.2 M
    parameters; the book's CPU budget uses 16, which keeps the 18 layers and the
    structure at 1/16 of the work).

    >>> net = resnet18_28(); net.initialize(); net(nd.zeros((2, 1, 28, 28))).shape
    (2, 10)
    """
    from mxnet.gluon.model_zoo.vision.resnet import BasicBlockV1

    net = nn.HybridSequential()
    if width < 1:
        raise ValueError(f"width must be a positive number of channels, got {width}")
    net.add(nn.Conv2D(width, kernel_size=3, strides=1, padding=1, use_bias=False),
            nn.BatchNorm(), nn.Activation("relu"))
    in_channels = width
    stages = [(width, 1), (2 * width, 2), (4 * width, 2), (8 * width, 2)]
    for channels, stride in stages:
        net.add(BasicBlockV1(channels, stride, downsample=channels != in_channels,
                             in_channels=in_channels))
        net.add(BasicBlockV1(channels, 1, in_channels=channels))
        in_channels = channels
    net.add(nn.GlobalAvgPool2D(), nn.Dense(num_classes))
    return net


def gradient_shapes(net: nn.Block,
                    input_shape: tuple[int, ...] = (1, 1, 28, 28)) -> list[tuple]:
    """The shapes of the parameters of ``net`` that have a gradient: what training
    reduces.

    ``net`` is initialised on the CPU and run on zeros of ``input_shape`` first if
    needed.

    >>> shapes = gradient_shapes(resnet18_28())
    >>> len(shapes), sum(int(np.prod(s)) for s in shapes)
    (62, 11172810)
    """
    try:
        for p in net.collect_params().values():
            p.list_ctx()  # raises while a parameter has not been initialised
    except RuntimeError:
        net.initialize()
    net(nd.zeros(input_shape))
    return [p.shape for p in net.collect_params().values() if p.grad_req != "null"]
