"""The launcher of mgpu.cluster.local: real scheduler, server and worker processes on 127.0.0.1."""

import ast
import contextlib
import math
import os
import signal
import socket
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest

import mgpu
from mgpu.cluster import local as launch
from mgpu.cluster.processes import free_port, running
from mgpu.programs import ps as dist

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

# A worker that kills the cluster's server (found by its environment in /proc), then pushes.
KILL_SERVER = """
import os, signal
import mxnet as mx
kv = mx.kv.create('dist_sync')
kv.init(0, mx.nd.zeros((2,)))
mine = ('DMLC_ROLE=server', 'DMLC_PS_ROOT_PORT=' + os.environ['DMLC_PS_ROOT_PORT'])
for pid in filter(str.isdigit, os.listdir('/proc')):
    try:
        env = open(f'/proc/{pid}/environ', 'rb').read().decode(errors='replace').split('\\0')
    except OSError:
        continue
    if all(m in env for m in mine):
        print('killing server', pid, flush=True)
        os.kill(int(pid), signal.SIGKILL)
out = mx.nd.zeros((2,))
kv.push(0, mx.nd.ones((2,)))
kv.pull(0, out=out)
out.wait_to_read()
"""

# A launcher in a process of its own (mgpu.cluster.local imports no MXNet).
LAUNCHER = """
import sys
from pathlib import Path
from mgpu.cluster.local import run_local_cluster
run_local_cluster(Path(sys.argv[1]), 1, args=[sys.argv[2]], timeout=300)
"""

# A worker that starts a child of its own, says so in a file, then blocks.
BLOCKED = """
import os, subprocess, sys, time
import mxnet as mx
kv = mx.kv.create('dist_sync')
child = subprocess.Popen(['sleep', '300'])
with open(sys.argv[1] + '.tmp', 'w') as f:
    f.write(f'{os.getpid()} {child.pid}')
os.rename(sys.argv[1] + '.tmp', sys.argv[1])
time.sleep(300)
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
    assert running(started) == [], "processes left running"
    assert running(started, groups=True) == [], "children left running"


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
    # 20 s: enough for both workers to start MXNet and finish round 0 on a slow, busy machine
    with pytest.raises(launch.ClusterTimeout, match="did not finish within 20 s") as info:
        cluster(partial(dist.push_pull_demo, extra_round_rank=0), 2, timeout=20)
    assert time.perf_counter() - start < 20 + 10
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
                         pick_port=lambda: next(ports, None) or free_port())
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


def test_cluster_code_imports_the_standard_library_only():
    """Every module of mgpu.cluster imports the standard library, the other cluster modules
    and the report reader only (which imports the standard library only); mxlaunch also MXNet's
    dmlc_tracker, which does not import MXNet."""
    allowed = ("mgpu.cluster.", "mgpu.programs.report", "dmlc_tracker")
    files = [*Path(launch.__file__).parent.glob("*.py"),
             Path(launch.__file__).parents[1] / "programs" / "report.py"]
    assert len(files) >= 6
    for path in files:
        tree = ast.parse(path.read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                    for alias in node.names}
        imported |= {node.module for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.module}
        others = [m for m in imported if m.split(".")[0] not in sys.stdlib_module_names
                  and not m.startswith(allowed) and m != "__future__"]
        assert not others, f"{path.name} imports {others}"


def test_server_that_dies_ends_the_job(cluster):
    with pytest.raises(launch.ClusterError) as info:
        cluster(KILL_SERVER, 1, timeout=60)
    err = info.value
    assert type(err) is launch.ClusterError
    assert err.failed.role == "server" and err.failed.returncode == -9
    assert f"server 0 (pid {err.failed.pid}) was killed by signal 9 (SIGKILL)" in str(err)
    assert f"killing server {err.failed.pid}" in err.result.workers[0].stdout


def _children(pid: int) -> list[int]:
    """The PIDs whose parent is ``pid``, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, IndexError):
            if entry.name.isdigit() and int(
                    (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def test_children_end_when_the_launcher_is_killed(tmp_path):
    (tmp_path / "launcher.py").write_text(LAUNCHER)
    (tmp_path / "worker.py").write_text(BLOCKED)
    ready, log = tmp_path / "ready", tmp_path / "launcher.log"
    with open(log, "wb") as out:
        launcher = subprocess.Popen(
            [sys.executable, str(tmp_path / "launcher.py"), str(tmp_path / "worker.py"),
             str(ready)], stdout=out, stderr=subprocess.STDOUT)
    started = []
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert launcher.poll() is None, f"launcher ended early:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"worker never got ready:\n{log.read_text()}"
            time.sleep(0.1)
        worker, grandchild = map(int, ready.read_text().split())
        started = _children(launcher.pid)  # the scheduler, the server and the worker
        assert len(started) == 3 and worker in started
        assert running(started, groups=True) == sorted(started) + [grandchild]
        launcher.kill()
        launcher.wait()
        killed = time.perf_counter()
        while running(started, groups=True) and time.perf_counter() - killed < 5:
            time.sleep(0.01)
        waited = time.perf_counter() - killed
        print(f"children gone {waited:.3f} s after the launcher was killed")
        assert running(started, groups=True) == [], f"left after {waited:.1f} s"
    finally:  # whatever happened, end every process this test started
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        for pid in running(started, groups=True):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


BAD = [  # keyword arguments, error type, words the message must hold
    ({"num_workers": 0}, ValueError, "num_workers must be at least 1"),
    ({"num_workers": -1}, ValueError, "num_workers must be at least 1"),
    ({"num_workers": 2.5}, TypeError, "num_workers must be an int"),
    ({"num_workers": "2"}, TypeError, "num_workers must be an int"),
    ({"num_workers": True}, TypeError, "num_workers must be an int"),
    ({"num_servers": 0}, ValueError, "num_servers must be at least 1"),
    ({"num_servers": -1}, ValueError, "num_servers must be at least 1"),
    ({"num_servers": 2.5}, TypeError, "num_servers must be an int"),
    ({"num_servers": "2"}, TypeError, "num_servers must be an int"),
    ({"num_servers": True}, TypeError, "num_servers must be an int"),
    ({"timeout": 0}, ValueError, "timeout must be a positive, finite number of seconds"),
    ({"timeout": -1}, ValueError, "timeout must be a positive, finite number of seconds"),
    ({"timeout": math.nan}, ValueError, "timeout must be a positive, finite number of seconds"),
    ({"timeout": math.inf}, ValueError, "timeout must be a positive, finite number of seconds"),
    ({"timeout": "60"}, TypeError, "timeout must be a number of seconds"),
    ({"timeout": None}, TypeError, "timeout must be a number of seconds"),
    ({"port": 0}, ValueError, "port must be from 1 to 65535"),
    ({"port": 70000}, ValueError, "port must be from 1 to 65535"),
    ({"port": -1}, ValueError, "port must be from 1 to 65535"),
    ({"port": "9091"}, TypeError, "port must be an int from 1 to 65535"),
    ({"port": 9091.0}, TypeError, "port must be an int from 1 to 65535"),
    ({"port": True}, TypeError, "port must be an int from 1 to 65535"),
    ({"env": {"OMP_NUM_THREADS": 1}}, TypeError, "env['OMP_NUM_THREADS'] must be a str"),
    ({"env": {"X": None}}, TypeError, "env['X'] must be a str"),
    ({"env": {1: "x"}}, TypeError, "env has the key 1"),
    ({"env": {"A=B": "x"}}, ValueError, "env has the key 'A=B'"),
    ({"env": ["OMP_NUM_THREADS=1"]}, TypeError, "env must be a mapping"),
    ({"args": "gives up"}, TypeError, "args must be a list or tuple"),
    ({"args": 5}, TypeError, "args must be a list or tuple"),
    ({"args": (a for a in "xy")}, TypeError, "args must be a list or tuple"),
    ({"program": 42}, TypeError, "program must be a pathlib.Path"),
    ({"program": b"print(1)"}, TypeError, "program must be a pathlib.Path"),
    ({"program": None}, TypeError, "program must be a pathlib.Path"),
    ({"program": Path("no-such-dir/train.py")}, FileNotFoundError, "does not exist"),
    ({"program": Path(__file__).parent}, IsADirectoryError, "is a directory"),
    ({"ps_verbose": 3}, ValueError, "ps_verbose must be 0 (quiet), 1"),
    ({"ps_verbose": -1}, ValueError, "ps_verbose must be 0 (quiet), 1"),
    ({"ps_verbose": "2"}, TypeError, "ps_verbose must be 0 (quiet), 1"),
    ({"ps_verbose": 1.0}, TypeError, "ps_verbose must be 0 (quiet), 1"),
    ({"pick_port": 9091}, TypeError, "pick_port must be a function"),
    ({"pick_port": lambda: "9091"}, TypeError, "port returned by pick_port"),
    ({"pick_port": lambda: 0}, ValueError, "port returned by pick_port"),
]


def _id(kwargs: dict) -> str:
    ((name, value),) = kwargs.items()
    shown = type(value).__name__ if callable(value) or hasattr(value, "__next__") else repr(value)
    return f"{name}={shown}"[:40]


@pytest.mark.parametrize(("kwargs", "error", "words"), BAD, ids=[_id(kw) for kw, _, _ in BAD])
def test_bad_input_is_refused_with_a_clear_error(cluster, kwargs, error, words):
    kwargs = {"program": "pass", **kwargs}
    with pytest.raises(error) as info:
        cluster(**kwargs)
    assert type(info.value) is error
    assert words in str(info.value)
    name = next(iter(kwargs.keys() - {"program"}), "program")
    assert name in str(info.value)  # the message names the argument
    assert cluster.started == []  # refused before starting anything
