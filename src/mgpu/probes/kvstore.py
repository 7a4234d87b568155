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

The programs that run these measurements in other processes live in
:mod:`mgpu.programs.kvstore`.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from collections.abc import Sequence

from mgpu.checks import positive_int

__all__ = ["BIGARRAY_BOUND", "device_owners", "server_shares", "socket_bytes"]

#: ``MXNET_KVSTORE_BIGARRAY_BOUND``'s default: arrays with at least this many numbers
#: are cut into one piece per server (``src/kvstore/kvstore_dist.h``).
BIGARRAY_BOUND = 1_000_000


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
