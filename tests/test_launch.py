"""The launcher of mgpu.launch: real scheduler, server and worker processes on 127.0.0.1."""

import ast
import socket
import sys
import time
from functools import partial
from pathlib import Path

import pytest

import mgpu
from mgpu import dist, launch

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


@pytest.fixture
def cluster():
    """``run_local_cluster`` that records the PIDs of its jobs: none may survive the test."""
    started = []

    def run(*args, **kwargs):
        try:
            result = launch.run_local_cluster(*args, **kwargs)
        except launch.ClusterError as err:
            started.extend(err.result.pids if err.result is not None else [])
            raise
        started.extend(result.pids)
        return result

    run.started = started
    yield run
    assert launch.running(started) == [], "processes left running"
    assert launch.running(started, groups=True) == [], "children left running"


def test_killed_worker_ends_the_job_with_a_clear_error(cluster):
    start = time.perf_counter()
    with pytest.raises(launch.ClusterError) as info:
        cluster(partial(dist.push_pull_demo, rounds=3, kill_rank=1), 2, timeout=60)
    assert time.perf_counter() - start < 60
    err = info.value
    assert type(err) is launch.ClusterError
    assert len(set(cluster.started)) == 4  # scheduler, server, 2 workers
    assert err.failed.role == "worker" and err.failed.returncode == -9
    assert f"worker {err.failed.index} of 2 (pid {err.failed.pid})" in str(err)
    assert "killed by signal 9 (SIGKILL)" in str(err)
    # the worker that died is the one whose ps-lite rank was 1
    assert {"rank": 1, "event": "killing myself", "pid": err.failed.pid} in err.failed.json()
    survivor = next(w for w in err.result.workers if w is not err.failed)
    assert survivor.returncode == -15  # stopped by the launcher while blocked in a pull


def test_worker_exception_ends_the_job(cluster, tmp_path):
    # without the launcher's wrapper the failed worker would hang in MXNet's exit barrier
    script = tmp_path / "crash.py"
    script.write_text(CRASH)
    with pytest.raises(launch.ClusterError, match="exited with code 1") as info:
        cluster(script, 2, args=["gives", "up"], timeout=60)
    assert "RuntimeError: rank 1 gives up" in str(info.value)


def test_unequal_batch_counts_hit_the_timeout(cluster):
    # the worker with rank 0 runs one round more: it waits for a push that never comes
    start = time.perf_counter()
    with pytest.raises(launch.ClusterTimeout, match="did not finish within 8 s") as info:
        cluster(partial(dist.push_pull_demo, extra_round_rank=0), 2, timeout=8)
    assert time.perf_counter() - start < 8 + 10
    assert info.value.failed is None
    reports = info.value.result.reports()
    assert sorted((r["rank"], r["round"]) for r in reports) == [(0, 0), (1, 0)]


def test_port_in_use_is_reported(cluster):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        with pytest.raises(launch.PortInUseError, match=f"port {taken} on 127.0.0.1") as info:
            cluster(dist.push_pull_demo, 2, port=taken)
    assert info.value.result is None and cluster.started == []  # refused before starting


def test_taken_port_is_retried_and_everything_listens_on_loopback(cluster):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        ports = iter([taken])
        # the first "free" port is taken: ps-lite's scheduler fails with "bind failed"
        result = cluster(LISTENING, 2, timeout=60,
                         pick_port=lambda: next(ports, None) or launch.free_port())
    assert result.ports_tried == [taken] and result.port != taken
    for r in result.reports():
        assert r["pulled"] == [2.0, 2.0]
        assert r["listen"] and set(r["listen"]) == {"127.0.0.1"}


def test_bad_arguments():
    with pytest.raises(ValueError, match="pathlib.Path"):
        launch.run_local_cluster("train.py")
    with pytest.raises(ValueError, match="set by the launcher"):
        launch.run_local_cluster("pass", env={"DMLC_PS_ROOT_URI": "10.0.0.1"})
    with pytest.raises(ValueError, match="cannot be imported"):
        launch.run_local_cluster(lambda: None)
    with pytest.raises(ValueError, match="must be Python literals"):
        launch.run_local_cluster(partial(dist.push_pull_demo, shape=object()))


def test_public_names():
    assert mgpu.run_local_cluster is launch.run_local_cluster
    for name in ("ClusterError", "ClusterResult", "ClusterTimeout", "PortInUseError"):
        assert getattr(mgpu, name) is getattr(launch, name) and name in mgpu.__all__


def test_launcher_imports_the_standard_library_only():
    tree = ast.parse(Path(launch.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported and all(m.split(".")[0] in sys.stdlib_module_names for m in imported)
