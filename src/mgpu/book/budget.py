"""How much training a page or benchmark can afford on this hardware.

On GPUs the book runs the full experiments of the original tutorials (all 60,000 images,
several epochs, the standard ResNet-18). On CPU devices the same code runs on a random
subset, for fewer epochs and, for ResNet-18, at a quarter of the width, so that the
whole book builds in minutes on a 2-core laptop. Every experiment prints the budget it
used, so no CPU figure passes for a GPU one.
"""

from __future__ import annotations

from dataclasses import dataclass

from mgpu.hardware import num_gpus

__all__ = ["Budget", "budget"]


@dataclass(frozen=True)
class Budget:
    """Training and test examples, epochs, (ResNet) width, and the batch size and
    learning rate for one device; with ``k`` devices the experiments use ``k`` times
    both."""

    subset: int | None
    test_subset: int | None
    num_epochs: int
    width: int = 64
    batch_size: int = 256
    lr: float = 0.1

    def describe(self) -> str:
        """E.g. ``'10,240 training / 2,000 test images, 3 epochs'``.

        >>> Budget(10240, 2000, 3).describe()
        '10,240 training / 2,000 test images, 3 epochs'
        >>> Budget(None, None, 5, width=64).describe()
        '60,000 training / 10,000 test images, 5 epochs'
        """
        train = f"{self.subset:,}" if self.subset else "60,000"
        test = f"{self.test_subset:,}" if self.test_subset else "10,000"
        return f"{train} training / {test} test images, {self.num_epochs} epochs"

    def scaled(self, k: int) -> tuple[int, float]:
        """Batch size and learning rate for ``k`` devices (both grow with ``k``).

        >>> Budget(None, None, 1, batch_size=128, lr=0.05).scaled(2)
        (256, 0.1)
        """
        return self.batch_size * k, self.lr * k


# On CPU devices ResNet-18 sees fewer images, so it takes smaller batches: BatchNorm's
# running statistics (momentum 0.9) need a few dozen steps before evaluation can use
# them.
_CPU = {
    "lenet": Budget(subset=10240, test_subset=2000, num_epochs=3, batch_size=256,
                    lr=0.1),
    "resnet18": Budget(subset=6144, test_subset=1000, num_epochs=2, width=16,
                       batch_size=128, lr=0.05),
}
_GPU = {  # the original tutorials' settings
    "lenet": Budget(subset=None, test_subset=None, num_epochs=5, batch_size=256,
                    lr=0.2),
    "resnet18": Budget(subset=None, test_subset=None, num_epochs=5, width=64,
                       batch_size=256, lr=0.1),
}


def budget(model: str, gpus: int | None = None) -> Budget:
    """The budget for ``model`` (``"lenet"`` or ``"resnet18"``) on this machine.

    >>> budget("resnet18", gpus=0).width, budget("resnet18", gpus=2).width
    (16, 64)
    >>> budget("vgg")
    Traceback (most recent call last):
    ...
    KeyError: "no budget for model 'vgg': use 'lenet' or 'resnet18'"
    """
    table = _GPU if (num_gpus() if gpus is None else gpus) else _CPU
    if model not in table:
        raise KeyError(f"no budget for model {model!r}: "
                       f"use {' or '.join(map(repr, table))}")
    return table[model]
