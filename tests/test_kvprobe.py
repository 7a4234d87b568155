"""mgpu.kvprobe: the owner and server plans, byte counting, and its programs (the chapter's
commands ``python -m mgpu kv_reduce_timeline`` and ``kv_step_timeline`` included)."""

import json
import socket
import subprocess
import sys
from collections import Counter
from functools import partial

import pytest

from mgpu import kvprobe
from mgpu.launch import run_local_cluster, running


def _program(*argv):
    done = subprocess.run([sys.executable, "-m", "mgpu", *argv], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def _per_queue(run, name):
    return {int(k.rsplit("@", 1)[1]): v[0] for k, v in run["ops"].items()
            if k.rsplit("@", 1)[0] == name}


def test_device_owners_balance_the_numbers():
    sizes = [1000, 10, 500, 490, 10, 7]
    owners = kvprobe.device_owners(sizes, 2)
    loads = [sum(n for n, o in zip(sizes, owners) if o == d) for d in (0, 1)]
    assert sorted(loads) == [1007, 1010] and owners[0] != owners[2]
    assert kvprobe.device_owners([5, 5, 5], 3) == [2, 1, 0]  # ties: the highest id
    assert kvprobe.device_owners([], 2) == []


def test_server_shares_split_only_big_keys():
    rows = kvprobe.server_shares([10, 20, 30, 1_000_001], 2)
    assert rows[:3] == [[10, 0], [0, 20], [30, 0]]  # 9973 * key is odd for odd keys
    assert rows[3] == [500_001, 500_000]  # C++ rounds 500,000.5 up
    assert all(sum(r) == n for r, n in zip(rows, [10, 20, 30, 1_000_001]))
    assert kvprobe.server_shares([5, 5], 1) == [[5], [5]]
    assert kvprobe.server_shares([200], 2, bound=100) == [[100, 100]]


@pytest.mark.parametrize("call, word", [
    (lambda: kvprobe.device_owners([1, 2], 0), "num_devices"),
    (lambda: kvprobe.device_owners([1, -2], 2), r"sizes\[1\]"),
    (lambda: kvprobe.server_shares([3], 0), "num_servers"),
    (lambda: kvprobe.socket_bytes(-1), "pid"),
])
def test_bad_input_names_the_argument(call, word):
    with pytest.raises(ValueError, match=word):
        call()


def test_socket_bytes_counts_a_loopback_transfer():
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        with client, peer:
            key = "{}:{}".format(*server.getsockname())
            before = kvprobe.socket_bytes().get(key, [0, 0])
            client.sendall(b"x" * 100_000)
            got = 0
            while got < 100_000:
                got += len(peer.recv(65536))
            after = kvprobe.socket_bytes()[key]
    assert after[0] - before[0] >= 100_000  # sent by the client's connection to the server


def test_reduce_timeline_local_sums_on_cpu0_device_on_the_owners():
    local = _program("kv_reduce_timeline", "--kvstore", "local", "--width", "4")
    device = _program("kv_reduce_timeline", "--num-devices", "4", "--width", "4")
    n = len(device["sizes"])
    assert local["pulled"] == [3.0] and device["pulled"] == [10.0]  # 1 + 2 and 1 + 2 + 3 + 4
    assert _per_queue(local, "KVStoreReduce") == {0: n}
    sums = _per_queue(device, "ElementwiseSum")
    assert sum(sums.values()) == n and sorted(sums) == [0, 1, 2, 3]
    planned = Counter(kvprobe.device_owners(device["sizes"], 4))
    assert sorted(sums.values()) == sorted(planned.values())


def test_step_timeline_reports_both_timings_and_the_sums():
    run = _program("kv_step_timeline", "--kvstore", "local", "--width", "4", "--batch-size", "8",
                   "--repeats", "1")
    assert run["overlap_ms"] > 0 and run["waitall_ms"] > 0
    assert sum(e[0] == "KVStoreReduce" for e in run["events"]) == 62  # ResNet-18's gradients


def test_push_pull_traffic_compression_sends_a_sixteenth():
    sent = {}
    for threshold in (None, 0.5):
        job = partial(kvprobe.push_pull_traffic, rounds=1, threshold=threshold)
        result = run_local_cluster(job, 2, timeout=120)
        assert running(result.pids) == []
        reports = result.reports()
        assert sorted(r["rank"] for r in reports) == [0, 1]
        sent[threshold] = [sum(v[0] for v in r["bytes"].values()) for r in reports]
        received = [sum(v[1] for v in r["bytes"].values()) for r in reports]
        size = 4 * sum(reports[0]["sizes"])  # the pulled weights: 32 bits per number
        assert all(size <= b < 1.05 * size for b in received)
    assert all(13 < p / c < 16.5 for p, c in zip(sorted(sent[None]), sorted(sent[0.5])))


def test_train_traffic_keeps_workers_identical(real_data_dir):
    job = partial(kvprobe.train_traffic, threshold=0.5, subset=1000, test_subset=200,
                  num_epochs=1, batch_size=128)
    result = run_local_cluster(job, 2, timeout=180)
    a, b = sorted(result.reports(), key=lambda r: r["rank"])
    assert a["test_acc"] == b["test_acc"] and len(a["test_acc"]) == 1
    assert a["sent"] > 0 and a["received"] > a["sent"]  # pushes compressed, pulls not
    assert running(result.pids, groups=True) == []
