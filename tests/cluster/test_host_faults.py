"""Faults across emulated hosts, through ``python -m mgpu.cluster.mxlaunch --launcher ssh``.

Every job: mxlaunch and the scheduler on host1, one server and one worker on each of host2
and host3 (``-n 2 -s 2``, the host file lists host2 and host3), ``--keepalive 1``. Three
faults on host3, each with a bound, and afterwards no process on any host:

* its cable pulled mid-job (``Hosts.set_link``): mxlaunch ends the job with status 1 within
  CUT_BOUND s, naming host3's address and what ssh said (``Timeout, server ... not
  responding.``: ssh gives up about 4 keepalives, 4 s, after the host fell silent). The
  processes on host3 cannot be reached meanwhile; once the cable is back they end within
  BACK_BOUND s (host3's sshd learns the client is gone and hangs up their terminal);
* its processes killed (``Hosts.kill``, sshd's sessions included): status 1 within
  KILL_BOUND s, naming host3 (``Connection to ... closed by remote host.``);
* LOSS_PERCENT (5) % of the packets host3 sends dropped (``Hosts.shape(host3,
  Link(loss=...))``: dropped on the bridge side of host3's link, after they have left
  host3, so that host3's TCP is told nothing and retransmits them, as after a loss on a
  cable; what host3 receives is not dropped): the job finishes within LOSS_BOUND s with the
  checksum of the same job without loss, and host3 did retransmit. The job without loss
  runs at the same time (it uses the CPU while the other waits for retransmissions), with
  its servers and workers on host1 and host2, so that none of its packets crosses host3's
  link.

The job is told to be running when the scheduler (``PS_VERBOSE=1``) logs that every node has
connected; the fault comes 1 s later, inside a training that would last about a minute.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mgpu.cluster.hosts import Host, Hosts, Link
from mgpu.programs.report import read_reports

KEEPALIVE = 1       # s, mxlaunch --keepalive (ssh's ServerAliveInterval)
CUT_BOUND = 10.0    # s from pulling host3's cable to mxlaunch's exit (about 4 x KEEPALIVE)
BACK_BOUND = 20.0   # s from plugging it back in to no process left on host3
KILL_BOUND = 5.0    # s from killing host3's processes to mxlaunch's exit
GONE_BOUND = 10.0   # s from mxlaunch's exit to no process left on a host it can reach
LOSS_PERCENT = 5    # % of the packets host3 sends, dropped after they have left it
LOSS_BOUND = 60.0   # s for the whole job with that loss on host3's link (about 6 s without)
CONNECTED = "the scheduler is connected to 2 workers and 2 servers"
LONG_JOB = ("train_demo", "--subset", "1024", "--test-subset", "100", "--num-epochs", "100")
SHORT_JOB = ("train_demo", "--subset", "512", "--test-subset", "100")


@pytest.fixture
def hosts(can_make_hosts):
    with Hosts(3) as made:
        yield made


def _start(hosts: Hosts, cwd: Path, job: tuple[str, ...],
           on: tuple[int, int] = (1, 2)) -> subprocess.Popen:
    """mxlaunch on host1 with the servers and workers on the hosts ``on`` (indices: host2
    and host3 by default)."""
    host1 = hosts[0]
    cwd.mkdir(exist_ok=True)
    hostfile = hosts.hostfile(cwd / "hosts", hosts=[hosts[i] for i in on])
    argv = [sys.executable, "-m", "mgpu.cluster.mxlaunch", "--host-ip", host1.address,
            "--timeout", "90", "--keepalive", str(KEEPALIVE), "-n", "2", "-s", "2",
            "-H", str(hostfile), "--launcher", "ssh", sys.executable, "-m", "mgpu", *job]
    return subprocess.Popen(hosts.command(host1, argv), cwd=cwd, text=True,
                            env={**hosts.env(), "PS_VERBOSE": "1"},
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def _wait_connected(proc: subprocess.Popen) -> str:
    """Read mxlaunch's stderr until every node has connected to the scheduler."""
    seen = []
    for line in proc.stderr:  # type: ignore[union-attr]
        seen.append(line)
        if CONNECTED in line:
            return "".join(seen)
    proc.wait(30)
    raise AssertionError(f"the job never started ({proc.returncode}):\n{''.join(seen)}")


def _resent(hosts: Hosts, host: Host) -> int:
    """TCP segments ``host`` has retransmitted: RetransSegs of /proc/net/snmp, read inside the
    host (each network namespace counts its own)."""
    out = subprocess.run(hosts.command(host, ["cat", "/proc/net/snmp"]), capture_output=True,
                         text=True, check=True).stdout
    names, values = (line.split() for line in out.splitlines() if line.startswith("Tcp:"))
    return int(dict(zip(names, values))["RetransSegs"])


def _checksums(out: str) -> list[str]:
    reports = sorted(read_reports(out), key=lambda r: r["rank"])
    assert [r["rank"] for r in reports] == [0, 1], out
    return [r["checksum"] for r in reports]


def _fault_mid_job(hosts: Hosts, tmp_path, fault, bound: float) -> tuple[str, float]:
    """Start the long job, call ``fault()`` once its workers are connected, and wait for
    mxlaunch to fail: its stderr, and the seconds from the fault to its end."""
    proc = _start(hosts, tmp_path, LONG_JOB)
    _wait_connected(proc)
    time.sleep(1)
    fault()
    start = time.monotonic()
    _, err = proc.communicate(timeout=bound + 60)
    took = time.monotonic() - start
    assert proc.returncode == 1, err
    return err, took


def test_a_host_cut_off_mid_job(hosts, tmp_path):
    host3 = hosts[2]
    err, took = _fault_mid_job(hosts, tmp_path, lambda: hosts.set_link(host3, up=False),
                               CUT_BOUND)
    assert re.search(rf"on {re.escape(host3.address)} \(through ssh\) exited with code 255 "
                     rf"after [\d.]+ s \(ssh said: Timeout, server {re.escape(host3.address)} "
                     rf"not responding\. The host answered none of 3 keepalives sent "
                     rf"{KEEPALIVE} s apart\)", err), err
    assert "so the job was stopped" in err
    assert took < CUT_BOUND, f"mxlaunch ended the job {took:.1f} s after the cut"
    assert hosts.left(GONE_BOUND, among=list(hosts)[:2]) == {}
    assert hosts.processes(host3), "host3 cannot be reached: its processes are still there"
    hosts.set_link(host3, up=True)
    back = time.monotonic()
    assert hosts.left(BACK_BOUND) == {}, "processes left after the cable came back"
    print(f"cut: mxlaunch exited {took:.1f} s after the cut; host3 empty "
          f"{time.monotonic() - back:.1f} s after the cable came back")


def test_a_hosts_processes_killed(hosts, tmp_path):
    host3 = hosts[2]
    killed = []
    err, took = _fault_mid_job(hosts, tmp_path, lambda: killed.extend(hosts.kill(host3)),
                               KILL_BOUND)
    assert killed
    assert re.search(rf"on {re.escape(host3.address)} \(through ssh\) exited with code 255 "
                     rf"after [\d.]+ s \(ssh said: Connection to {re.escape(host3.address)} "
                     r"closed by remote host\.\)", err), err
    assert took < KILL_BOUND, f"mxlaunch ended the job {took:.1f} s after the kill"
    assert hosts.left(GONE_BOUND) == {}


def test_five_percent_loss_on_one_link(hosts, real_data_dir, tmp_path):
    host3 = hosts[2]
    hosts.shape(host3, Link(loss=LOSS_PERCENT))  # before the jobs start: see Hosts.shape
    resent_before = _resent(hosts, host3)
    start = time.monotonic()
    lossy = _start(hosts, tmp_path / "lossy", SHORT_JOB)
    clean = _start(hosts, tmp_path / "clean", SHORT_JOB, on=(0, 1))  # not through host3
    out, err = clean.communicate(timeout=LOSS_BOUND + 60)
    assert clean.returncode == 0, err
    expected = _checksums(out)
    assert expected[0] == expected[1]
    out, err = lossy.communicate(timeout=LOSS_BOUND + 60)
    took = time.monotonic() - start
    assert lossy.returncode == 0, err
    assert _checksums(out) == expected
    assert took < LOSS_BOUND
    resent = _resent(hosts, host3) - resent_before
    assert resent > 0, "host3 retransmitted nothing: were its packets dropped?"
    assert hosts.left(GONE_BOUND) == {}
    print(f"{LOSS_PERCENT} % loss: {took:.1f} s, {resent} segments retransmitted by host3")
