"""mgpu.probes.kvstore: the owner and server plans, byte counting; mgpu.programs.kvstore: the
chapter's programs (``kv_reduce_timeline`` and ``kv_step_timeline`` run as the chapter runs them,
with run_program)."""

import socket
from collections import Counter
from functools import partial

import pytest

from mgpu.cluster.local import run_local_cluster
from mgpu.cluster.processes import running
from mgpu.probes import kvstore as kvprobe
from mgpu.programs.kvstore import push_pull_traffic, train_traffic
from mgpu.programs.run import run_program


def _program(name, **kwargs):
    """The one report of the program name, run in a fresh process."""
    (found,) = run_program(name, timeout=300, **kwargs)
    return found


def _per_device(run, name):
    """{profiler device index: count} of the operations called name."""
    found = Counter()
    for op, device, _worker, count in run["ops"]:
        if op == name:
            found[device] += count
    return found


def test_device_owners_balance_the_numbers():
    sizes = [1000, 10, 500, 490, 10, 7]
    owners = kvprobe.device_owners(sizes, 2)
    loads = [sum(n for n, o in zip(sizes, owners) if o == d) for d in (0, 1)]
    assert sorted(loads) == [1007, 1010] and owners[0] != owners[2]
    assert kvprobe.device_owners([5, 5, 5], 3) == [0, 1, 2]  # ties: the first in order
    assert kvprobe.device_owners([5, 5, 5], 3, order=[2, 0, 1]) == [2, 0, 1]
    assert kvprobe.device_owners([], 2) == []


def test_device_owners_order_only_relabels_the_devices():
    sizes = [144, 16, 2304, 16, 2304, 4608, 9216, 9216, 512, 36864, 36864, 10]
    plain = kvprobe.device_owners(sizes, 2)
    mirror = kvprobe.device_owners(sizes, 2, order=[1, 0])
    assert mirror == [1 - o for o in plain]


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
    (lambda: kvprobe.device_owners([1, 2], 2, order=[0, 0]), "order"),
    (lambda: kvprobe.device_owners([1, 2], 2, order=[0, 1, 2]), "order"),
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


def test_reduce_timeline_files_by_context_and_names_the_threads():
    local = _program("kv_reduce_timeline", kvstore="local", width=4)
    n = len(local["sizes"])
    assert local["pulled"] == [3.0]  # 1 + 2
    # KVStoreReduce: filed under cpu(0), run on the priority threads (no device's worker)
    assert [r for r in local["ops"] if r[0] == "KVStoreReduce"] == [["KVStoreReduce", 0, None, n]]
    assert 1 <= local["threads"]["KVStoreReduce"] <= 4
    # copies into pinned memory on the source's worker, out of it on cpu(0)'s worker
    copies = sorted(r[1:] for r in local["ops"] if r[0] == "CopyCPU2CPU")
    assert copies[:2] == [[0, 0, n], [1, 1, n]]
    assert len(copies) == 3 and copies[2][0] >= 2 and copies[2][1:] == [0, 2 * n]


def test_reduce_timeline_device_owners_follow_the_push():
    one = _program("kv_reduce_timeline", num_devices=4, width=4, one_key_at_a_time=True)
    batched = _program("kv_reduce_timeline", num_devices=4, width=4)
    n = len(one["sizes"])
    assert one["pulled"] == batched["pulled"] == [10.0]  # 1 + 2 + 3 + 4
    for run in (one, batched):
        assert all(worker == device for name, device, worker, _ in run["ops"]
                   if name == "ElementwiseSum")  # each sum on its owner's worker
    assert _per_device(one, "ElementwiseSum") == Counter(
        kvprobe.device_owners(one["sizes"], 4))  # one key at a time: ties to cpu(0)
    # 62 keys in one call: GroupKVPairs' std::sort puts key 0's arrays as 1, 2, 3, 0
    assert _per_device(batched, "ElementwiseSum") == Counter(
        kvprobe.device_owners(batched["sizes"], 4, order=[1, 2, 3, 0]))
    assert sum(_per_device(batched, "ElementwiseSum").values()) == n


def test_step_timeline_reports_both_timings_and_the_sums():
    run = _program("kv_step_timeline", kvstore="local", width=4, batch_size=8,
                   repeats=2)  # two pairs: each kind of step runs first once
    assert len(run["overlap_ms"]) == len(run["waitall_ms"]) == 2
    assert all(t > 0 for t in run["overlap_ms"] + run["waitall_ms"])
    assert sum(e[0] == "KVStoreReduce" for e in run["events"]) == 62  # ResNet-18's gradients
    assert all(len(e) == 5 for e in run["events"])  # name, device, thread, start, end


def test_push_pull_traffic_compression_sends_a_sixteenth():
    sent = {}
    for threshold in (None, 0.5):
        job = partial(push_pull_traffic, rounds=1, threshold=threshold)
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
    job = partial(train_traffic, threshold=0.5, subset=1000, test_subset=200, num_epochs=1,
                  batch_size=128)
    result = run_local_cluster(job, 2, timeout=180)
    a, b = sorted(result.reports(), key=lambda r: r["rank"])
    assert a["test_acc"] == b["test_acc"] and len(a["test_acc"]) == 1
    assert a["sent"] > 0 and a["received"] > a["sent"]  # pushes compressed, pulls not
    assert running(result.pids, groups=True) == []
