"""The local parameter-server cluster: real scheduler, server and worker processes on 127.0.0.1."""

import socket
import time
from functools import partial

import pytest

import mgpu
from mgpu import dist

# A worker program that also reports the TCP sockets it listens on (from /proc/net/tcp).
LISTENING = """
import json, os
import mxnet as mx
kv = mx.kv.create('dist_sync')
kv.init(0, mx.nd.zeros((2,)))
kv.push(0, mx.nd.ones((2,)))
out = mx.nd.zeros((2,)); kv.pull(0, out=out)
mine = set()
for fd in os.listdir('/proc/self/fd'):
    target = os.readlink(f'/proc/self/fd/{fd}') if os.path.islink(f'/proc/self/fd/{fd}') else ''
    if target.startswith('socket:['):
        mine.add(target[8:-1])
listen = []
for line in open('/proc/net/tcp').read().splitlines()[1:]:
    f = line.split()
    if f[3] == '0A' and f[9] in mine:
        host, port = f[1].split(':')
        listen.append('.'.join(str(int(host[i:i + 2], 16)) for i in (6, 4, 2, 0)))
print(json.dumps({'rank': kv.rank, 'pulled': out.asnumpy().tolist(), 'listen': listen}))
"""

CRASH = """
import sys
import mxnet as mx
kv = mx.kv.create('dist_sync')
kv.init(0, mx.nd.zeros((2,)))
out = mx.nd.zeros((2,))
for step in range(3):
    if step == 1 and kv.rank == 1:
        raise RuntimeError('rank 1 ' + ' '.join(sys.argv[1:]))
    kv.push(0, mx.nd.ones((2,)))
    kv.pull(0, out=out)
    out.wait_to_read()
"""


@pytest.fixture(autouse=True)
def started(monkeypatch):
    """Record the PID of every process the launcher starts; none may survive the test."""
    pids = []
    original = dist._Proc.__init__

    def spy(self, *args, **kwargs):
        original(self, *args, **kwargs)
        pids.append(self.popen.pid)

    monkeypatch.setattr(dist._Proc, "__init__", spy)
    yield pids
    assert dist.running(pids) == [], "processes left running"
    assert all(dist._group_members(pid) == [] for pid in pids), "children left running"


def test_push_pull_sums_over_workers(started):
    result = dist.run_local_cluster(dist.push_pull_demo, 2, args=((2, 3), 2), timeout=60)
    assert len(started) == 4  # scheduler, server, 2 workers
    assert sorted(result.pids) == sorted(started)
    reports = result.reports()
    assert sorted(r["rank"] for r in reports) == [0, 0, 1, 1]
    for r in reports:  # worker r pushed (r + 1) * ones; every pull is 1 + 2
        assert r["pushed"] == r["rank"] + 1
        assert r["pulled"] == [[3.0] * 3] * 2
    assert [w.returncode for w in result.workers] == [0, 0]
    assert all(p.returncode == 0 for p in result.processes)


def test_dist_sync_training_keeps_workers_identical(real_data_dir):
    # 1,000 examples, global batch 128: each worker's shard of 500 is cut to 448 = 7 x 64, so
    # both run 7 steps per epoch (a short last batch would change the servers' gradient scale)
    result = dist.run_local_cluster(dist.train_demo, 2, args=(1000, 300, 2, 128, 0.1),
                                    timeout=90)
    a, b = sorted(result.reports(), key=lambda r: r["rank"])
    assert (a["rank"], b["rank"], a["num_workers"]) == (0, 1, 2)
    assert a["checksum"] == b["checksum"]
    assert a["test_acc"] == b["test_acc"]  # the same weights on the same test set
    assert a["examples"] == b["examples"] == 448
    assert a["batch_size"] == 128 and len(a["epoch_time"]) == 2  # no hang between epochs


def test_dist_sync_training_with_one_worker(real_data_dir):
    result = dist.run_local_cluster(dist.train_demo, 1, args=(1000, 300, 1, 128, 0.1),
                                    timeout=90)
    (r,) = result.reports()
    assert r["num_workers"] == 1 and r["examples"] == 896  # 7 whole batches of 128
    assert r["test_acc"] > 0.15  # chance is 0.1


def test_killed_worker_ends_the_job_with_a_clear_error():
    start = time.perf_counter()
    with pytest.raises(dist.ClusterError) as info:
        dist.run_local_cluster(partial(dist.push_pull_demo, rounds=3, kill_rank=1), 2,
                               timeout=60)
    assert time.perf_counter() - start < 60
    err = info.value
    assert type(err) is dist.ClusterError
    assert err.failed.role == "worker" and err.failed.returncode == -9
    assert f"worker {err.failed.index} of 2 (pid {err.failed.pid})" in str(err)
    assert "killed by signal 9 (SIGKILL)" in str(err)
    # the worker that died is the one whose ps-lite rank was 1
    assert {"rank": 1, "event": "killing myself", "pid": err.failed.pid} in err.failed.json()
    survivor = next(w for w in err.result.workers if w is not err.failed)
    assert survivor.returncode == -15  # stopped by the launcher while blocked in a pull


def test_worker_exception_ends_the_job(tmp_path):
    # without the launcher's wrapper the failed worker would hang in MXNet's exit barrier
    script = tmp_path / "crash.py"
    script.write_text(CRASH)
    with pytest.raises(dist.ClusterError, match="exited with code 1") as info:
        dist.run_local_cluster(script, 2, args=["gives", "up"], timeout=60)
    assert "RuntimeError: rank 1 gives up" in str(info.value)


def test_unequal_batch_counts_hit_the_timeout():
    # the worker with rank 0 runs one round more: it waits for a push that never comes
    start = time.perf_counter()
    with pytest.raises(dist.ClusterTimeout, match="did not finish within 8 s") as info:
        dist.run_local_cluster(partial(dist.push_pull_demo, extra_round_rank=0), 2, timeout=8)
    assert time.perf_counter() - start < 8 + 10
    reports = info.value.result.reports()
    assert sorted((r["rank"], r["round"]) for r in reports) == [(0, 0), (1, 0)]


def test_port_in_use_is_reported(started):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        with pytest.raises(dist.PortInUseError, match=f"port {taken} on 127.0.0.1"):
            dist.run_local_cluster(dist.push_pull_demo, 2, port=taken)
    assert started == []  # refused before starting anything


def test_taken_port_is_retried_and_everything_listens_on_loopback(monkeypatch):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        ports = iter([taken])
        real = dist.free_port
        # the first "free" port is taken: ps-lite's scheduler fails with "bind failed"
        monkeypatch.setattr(dist, "free_port", lambda host="127.0.0.1": next(ports, None)
                            or real(host))
        result = dist.run_local_cluster(LISTENING, 2, timeout=60)
    assert result.ports_tried == [taken] and result.port != taken
    for r in result.reports():
        assert r["pulled"] == [2.0, 2.0]
        assert r["listen"] and set(r["listen"]) == {"127.0.0.1"}


def test_bad_arguments():
    with pytest.raises(ValueError, match="pathlib.Path"):
        dist.run_local_cluster("train.py")
    with pytest.raises(ValueError, match="set by the launcher"):
        dist.run_local_cluster("pass", env={"DMLC_PS_ROOT_URI": "10.0.0.1"})
    with pytest.raises(ValueError, match="cannot be imported"):
        dist.run_local_cluster(lambda: None)
    with pytest.raises(ValueError, match="must be Python literals"):
        dist.run_local_cluster(partial(dist.push_pull_demo, shape=object()))
    assert mgpu.run_local_cluster is dist.run_local_cluster
