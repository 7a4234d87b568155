"""Shared fixtures: CPU devices, the real Fashion-MNIST files and small IDX files."""

from __future__ import annotations

import os

import numpy as np
import pytest

import mgpu
from helpers import write_idx
from mgpu.data import DataError, find_data_dir


def pytest_collection_modifyitems(items):
    """The tests under tests/cluster start several processes: mark them ``cluster``."""
    cluster = os.path.join("tests", "cluster", "")
    for item in items:
        if cluster in str(item.path):
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(autouse=True)
def _no_device_override(monkeypatch):
    """Tests choose their devices themselves; a developer's MGPU_DEVICES must not leak in."""
    monkeypatch.delenv("MGPU_DEVICES", raising=False)


@pytest.fixture
def cpus():
    return lambda n: [mgpu.mx.cpu(i) for i in range(n)]


@pytest.fixture(scope="session")
def real_data_dir():
    """The real Fashion-MNIST files. CI sets MGPU_REQUIRE_DATA=1 so that their absence fails."""
    try:
        return find_data_dir(download=False)
    except DataError as err:
        if os.environ.get("MGPU_REQUIRE_DATA") == "1":
            pytest.fail(f"MGPU_REQUIRE_DATA=1 but {err}")
        pytest.skip(str(err))


@pytest.fixture(scope="session")
def small_data(real_data_dir):
    return mgpu.load_fashion_mnist(subset=3072, test_subset=1000, data_dir=real_data_dir)


@pytest.fixture
def idx_dir(tmp_path):
    """A complete tiny data set: 40 training and 20 test images of 28x28."""
    rng = np.random.RandomState(0)
    for prefix, n in (("train", 40), ("t10k", 20)):
        write_idx(tmp_path / f"{prefix}-images-idx3-ubyte.gz",
                  rng.randint(0, 256, (n, 28, 28)))
        write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte.gz", rng.randint(0, 10, n))
    return tmp_path


@pytest.fixture(scope="session")
def can_make_hosts():
    """Skip unless emulated hosts can be made here (root, iproute2, openssh-server). CI sets
    MGPU_REQUIRE_HOSTS=1 so that a machine that cannot make them fails the tests instead."""
    from mgpu.cluster.hosts import hosts_missing

    lacks = hosts_missing()
    if lacks:
        message = "cannot make emulated hosts; missing: " + "; ".join(lacks)
        if os.environ.get("MGPU_REQUIRE_HOSTS") == "1":
            pytest.fail(f"MGPU_REQUIRE_HOSTS=1 but {message}")
        pytest.skip(message)
