"""mgpu.cluster.processes: the one way the package stops processes, and the code that uses it."""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mgpu.cluster import processes
from mgpu.cluster.processes import TERM_GRACE, running, stop_processes

# A group leader that exits on SIGTERM and a child of it, in the same group, that ignores
# SIGTERM. The child says it is ready (its PID on stdout) once its handler is in place.
STUBBORN = """
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print(os.getpid(), flush=True); time.sleep(120)"])
time.sleep(120)
"""


@pytest.fixture
def group():
    """A process group: (its leader, a Popen; the PID of its child that ignores SIGTERM)."""
    leader = subprocess.Popen([sys.executable, "-c", STUBBORN], start_new_session=True,
                              stdout=subprocess.PIPE, text=True)
    child = int(leader.stdout.readline())
    yield leader, child
    for pid in running([leader.pid], groups=True):  # whatever the test left
        subprocess.run(["kill", "-9", str(pid)], check=False)
    leader.wait()


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace_and_counted(group):
    leader, child = group
    assert running([leader.pid], groups=True) == [leader.pid, child]
    start = time.monotonic()
    left = stop_processes([leader.pid], grace=1.0)
    took = time.monotonic() - start
    assert left == [child]  # the leader went on SIGTERM, the child needed SIGKILL
    assert 1.0 <= took < 1.0 + 5
    assert leader.wait(5) == -15
    assert running([leader.pid, child], groups=True) == []


def test_a_group_that_obeys_sigterm_is_stopped_at_once():
    leader = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                              start_new_session=True)
    start = time.monotonic()
    assert stop_processes([leader.pid]) == []
    assert time.monotonic() - start < TERM_GRACE
    assert leader.wait(5) == -15


def test_processes_of_other_groups_are_stopped_one_by_one():
    # horovodrun's ranks are no group leaders of the caller's: they get the signal themselves
    one = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    assert stop_processes([one.pid], grace=1.0) == []
    assert one.wait(5) == -15


def test_gone_and_unknown_processes_are_ignored():
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    assert stop_processes([done.pid], grace=0.5) == []
    assert stop_processes([], grace=0.5) == []


CALLERS = ("local.py", "mxlaunch.py", "horovodrun.py")


def _calls(path: Path) -> set[str]:
    """The dotted names of everything ``path`` calls (code only, not the strings it runs)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            found.add(ast.unparse(node.func))
    return found


@pytest.mark.parametrize("name", CALLERS)
def test_every_launcher_stops_its_processes_the_one_way(name):
    calls = _calls(Path(processes.__file__).parent / name)
    assert "stop_processes" in calls
    signals = {c for c in calls if c in ("os.kill", "os.killpg", "signal.signal")
               or c.endswith((".terminate", ".kill", ".send_signal"))}
    assert not signals, f"{name} sends signals itself: {signals}"


def test_one_grace_and_one_free_port():
    cluster = Path(processes.__file__).parent
    for path in cluster.glob("*.py"):
        text = path.read_text()
        if path.name != "processes.py":
            assert "GRACE = 3" not in text and "def free_port" not in text, path.name
            assert "bind((host, 0))" not in text, f"{path.name} picks a port itself"
