"""Memory per device: what data-parallel training keeps on every device, in bytes.

Four parts, each counted from the arrays themselves, never from a formula:

- **parameters**: every parameter's array on the device (a Gluon block's, including
  BatchNorm's running statistics, or a from-scratch model's list of NDArrays);
- **gradients**: the gradient array of every parameter that has one;
- **optimizer state**: what the optimizer keeps per parameter (momentum, Adam's two
  moments, a float32 master copy under ``multi_precision``), read from a
  :class:`gluon.Trainer`'s updater for that device or from given arrays;
- **activations**: the output of every operator of a hybridizable block's graph for a
  given micro-batch, from the symbol's ``infer_shape`` and ``infer_type``: what the
  backward pass may need. Counted once each; not counted: the input batch itself,
  operators' temporary workspaces, the gradients of the activations (alive only during
  the backward pass) and the casts of the weights that mixed precision inserts. MXNet's
  memory planner may run an operator in place (a ReLU over its convolution's output),
  so what it really keeps can be lower: a measured peak (the program
  :func:`mgpu.programs.memory.peak_memory`) checks the count.

Data parallelism keeps a full copy of the first three on every device; only the
activations shrink when the batch is split over more devices or micro-batches.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields

import numpy as np

from mgpu.backend import mx

__all__ = ["MemoryUse", "activation_bytes", "array_bytes", "gradient_bytes",
           "memory_use", "optimizer_state_bytes", "parameter_bytes"]

gluon = mx.gluon
NDArray = mx.nd.NDArray
MB = 1e6


@dataclass(frozen=True)
class MemoryUse:
    """Bytes one device holds for training, by part.

    >>> MemoryUse(parameters=400_000, gradients=400_000, optimizer_state=0,
    ...           activations=2_500_000)
    MemoryUse(parameters 0.40 MB, gradients 0.40 MB, optimizer state 0.00 MB, activations 2.50 MB; total 3.30 MB)
    """  # noqa: E501 - a doctest's output is one line

    parameters: int
    gradients: int
    optimizer_state: int
    activations: int

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) \
                    or value < 0:
                raise ValueError(f"MemoryUse: {f.name}={value!r} must be a whole, "
                                 "non-negative number of bytes")

    @property
    def total(self) -> int:
        """The sum of the four parts, in bytes."""
        return (self.parameters + self.gradients + self.optimizer_state
                + self.activations)

    def megabytes(self) -> list[float]:
        """The four parts and the total in MB (10^6 bytes): a row for a
        :class:`~mgpu.book.claims.Table`.

        >>> MemoryUse(1_000_000, 1_000_000, 2_000_000, 500_000).megabytes()
        [1.0, 1.0, 2.0, 0.5, 4.5]
        """
        parts = [self.parameters, self.gradients, self.optimizer_state,
                 self.activations, self.total]
        return [n / MB for n in parts]

    def __repr__(self) -> str:
        p, g, o, a, t = self.megabytes()
        return (f"MemoryUse(parameters {p:.2f} MB, gradients {g:.2f} MB, optimizer "
                f"state {o:.2f} MB, activations {a:.2f} MB; total {t:.2f} MB)")


def array_bytes(arrays: object) -> int:
    """The bytes of every NDArray (or NumPy array) in ``arrays``: one array, ``None``,
    or any nesting of lists, tuples and dicts of them (an optimizer's state).

    >>> array_bytes([mx.nd.zeros((2, 3)), (None, mx.nd.zeros(4, dtype="float16"))])
    32
    """
    if arrays is None:
        return 0
    if isinstance(arrays, NDArray | np.ndarray):
        return int(arrays.size) * np.dtype(arrays.dtype).itemsize
    if isinstance(arrays, dict):
        arrays = arrays.values()
    if isinstance(arrays, Iterable) and not isinstance(arrays, str | bytes):
        return sum(array_bytes(a) for a in arrays)
    raise TypeError(f"array_bytes counts NDArrays, NumPy arrays and lists, tuples or "
                    f"dicts of them, got a {type(arrays).__name__}")


def _on(arrays: Iterable[NDArray], device: mx.Context) -> list[NDArray]:
    return [a for a in arrays if a is not None and a.context == device]


def parameter_bytes(model: gluon.Block | Sequence[NDArray], device: mx.Context) -> int:
    """The bytes of ``model``'s parameters on ``device``: a Gluon block's (every
    parameter, trained or not) or a list of NDArrays (a from-scratch model's copy).

    >>> net = gluon.nn.Dense(10, in_units=100); net.initialize(ctx=mx.cpu(1))
    >>> parameter_bytes(net, mx.cpu(1)), parameter_bytes(net, mx.cpu(0))
    (4040, 0)
    """
    if isinstance(model, gluon.Block):
        return array_bytes(_on((a for p in _initialised(model)
                                for a in p.list_data()), device))
    return array_bytes(_on(_arrays(model, "model"), device))


def gradient_bytes(model: gluon.Block | Sequence[NDArray], device: mx.Context) -> int:
    """The bytes of the gradients of ``model``'s parameters on ``device`` (parameters
    with ``grad_req="null"`` have none).

    >>> net = gluon.nn.BatchNorm(in_channels=8); net.initialize()
    >>> gradient_bytes(net, mx.cpu(0))  # gamma and beta; running statistics: none
    64
    """
    if isinstance(model, gluon.Block):
        return array_bytes(_on((g for p in _initialised(model)
                                if p.grad_req != "null" for g in p.list_grad()),
                               device))
    return array_bytes(_on((a.grad for a in _arrays(model, "model")), device))


def _initialised(net: gluon.Block) -> list:
    params = list(net.collect_params().values())
    waiting = [p.name for p in params if p._deferred_init]
    if waiting:
        raise ValueError(f"{type(net).__name__}'s parameters {waiting[:3]} wait for "
                         "their shapes (deferred initialisation): run one forward pass "
                         "of a batch first")
    return params


def _arrays(arrays, name: str) -> list[NDArray]:
    arrays = list(arrays)
    for i, a in enumerate(arrays):
        if not isinstance(a, NDArray):
            raise TypeError(f"{name}: item {i} is a {type(a).__name__}; pass a Gluon "
                            "block or a list of mx.nd.NDArray")
    return arrays


def optimizer_state_bytes(state: gluon.Trainer | object, device: mx.Context) -> int:
    """The bytes of the optimizer state on ``device``: a :class:`gluon.Trainer`'s (its
    updater for that device; the state exists after the first update) or any arrays
    (e.g. a sharded optimizer's) of which those on ``device`` count. A Trainer that
    updates on its KVStore keeps the state in the store, where it is not counted.

    >>> net = gluon.nn.Dense(10, in_units=100); net.initialize()
    >>> trainer = gluon.Trainer(net.collect_params(), "sgd",
    ...                         {"learning_rate": 0.1, "momentum": 0.9}, kvstore=None)
    >>> with mx.autograd.record():
    ...     loss = net(mx.nd.ones((2, 100))).sum()
    >>> loss.backward(); trainer.step(2)
    >>> optimizer_state_bytes(trainer, mx.cpu(0))  # the momentum: one per parameter
    4040
    """
    if isinstance(state, gluon.Trainer):
        if not getattr(state, "_optimizer", None) or not hasattr(state, "_updaters"):
            return 0
        return sum(optimizer_state_bytes(list(u.states.values()), device)
                   for u in state._updaters)
    return array_bytes(_on(_flatten(state), device))


def _flatten(state) -> list[NDArray]:
    if state is None:
        return []
    if isinstance(state, NDArray):
        return [state]
    if isinstance(state, dict):
        state = state.values()
    if isinstance(state, Iterable) and not isinstance(state, str | bytes):
        return [a for s in state for a in _flatten(s)]
    raise TypeError(f"optimizer state must be a Trainer or NDArrays (in lists, tuples "
                    f"or dicts), got a {type(state).__name__}")


def activation_bytes(net: gluon.HybridBlock, input_shape: Sequence[int],
                     dtype: str = "float32") -> int:
    """The bytes of every operator output of ``net``'s graph for one input of
    ``input_shape`` (the micro-batch one device computes, batch axis first).

    ``dtype="bfloat16"`` counts the graph as MXNet's AMP converts it
    (``mxnet.contrib.amp.convert_symbol``): the operators AMP runs in bfloat16 have
    2-byte outputs, the others stay float32; AMP's bfloat16 copy of the input counts
    (the first convolution keeps it for its backward pass). Operators that depend only
    on the weights (AMP's casts of the weights) are not activations and are not counted.

    >>> from mgpu import LeNet
    >>> activation_bytes(LeNet(), (2, 1, 28, 28))  # 2 x 39,586 floats of 4 bytes
    316688
    >>> activation_bytes(LeNet(), (2, 1, 28, 28), "bfloat16")  # + the input's cast
    161560
    """
    if not isinstance(net, gluon.HybridBlock):
        raise TypeError(f"activation_bytes needs a hybridizable Gluon block (it reads "
                        f"the block's graph), got a {type(net).__name__}")
    shape = tuple(int(n) for n in input_shape)
    if not shape or min(shape) < 1:
        raise ValueError(f"input_shape={tuple(input_shape)} must be the micro-batch's "
                         "shape, batch axis first, every size at least 1")
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"dtype={dtype!r}: count 'float32' or 'bfloat16' activations")
    sym = net(mx.sym.var("data"))
    if dtype == "bfloat16":
        from mxnet.contrib import amp  # imported here: it patches nothing until init()
        sym = amp.convert_symbol(sym, target_dtype="bfloat16")
    internals = sym.get_internals()
    shapes = internals.infer_shape(data=shape)[1]
    types = internals.infer_type(data=np.float32)[1]
    names = internals.list_outputs()
    return sum(int(np.prod(s)) * np.dtype(t).itemsize
               for i, (name, s, t) in enumerate(zip(names, shapes, types, strict=True))
               if name != "data" and "data" in internals[i].list_arguments())


def memory_use(net: gluon.HybridBlock, trainer: gluon.Trainer | object | None,
               device: mx.Context, micro_batch_shape: Sequence[int],
               dtype: str = "float32") -> MemoryUse:
    """Everything ``device`` holds to train ``net``: its parameters and gradients,
    the optimizer state (a Trainer, arrays such as a sharded optimizer's, or ``None``)
    and the activations of one micro-batch of ``micro_batch_shape``.

    >>> from mgpu import LeNet
    >>> net = LeNet(); net.initialize(); net(mx.nd.zeros((1, 1, 28, 28))).shape
    (1, 10)
    >>> memory_use(net, None, mx.cpu(0), (64, 1, 28, 28))  # 129,068 parameters
    MemoryUse(parameters 0.52 MB, gradients 0.52 MB, optimizer state 0.00 MB, activations 10.13 MB; total 11.17 MB)
    """  # noqa: E501 - a doctest's output is one line
    return MemoryUse(parameters=parameter_bytes(net, device),
                     gradients=gradient_bytes(net, device),
                     optimizer_state=0 if trainer is None
                     else optimizer_state_bytes(trainer, device),
                     activations=activation_bytes(net, micro_batch_shape, dtype))
