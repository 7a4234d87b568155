"""MXNet's own launcher through mgpu.mxlaunch, local and over ssh, everything on 127.0.0.1.

The ssh tests start their own sshd (Debian's openssh-server, which `nox -s tests` installs),
listening on 127.0.0.1 only, with a temporary host key and a temporary client key. The client
side gets them from an ssh configuration file, through an ``ssh`` wrapper first on PATH, as a
user's ~/.ssh/config would give them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mgpu.launch import LOOPBACK, descendants, running

_spec = importlib.util.spec_from_file_location(
    "_book_commands", Path(__file__).with_name("_book_commands.py"))
_support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_support)
book_commands, run_book_command = _support.book_commands, _support.run_book_command

SSHD = Path("/usr/sbin/sshd")
SECTION = "## Running on real machines"
MXLAUNCH = [sys.executable, "-m", "mgpu.mxlaunch"]
WORKER = [sys.executable, "-m", "mgpu"]


def _reports(text: str) -> list[dict]:
    """Every JSON object the workers printed. They share one stdout, and an unbuffered print
    writes the object and its newline separately, so two objects may share a line."""
    import json

    decoder, found, i = json.JSONDecoder(), [], text.find("{")
    while i >= 0:
        obj, end = decoder.raw_decode(text, i)
        found.append(obj)
        i = text.find("{", end)
    return found


def _tree(root: int) -> list[int]:
    """The live descendants of ``root``."""
    return sorted(descendants(root))


def _wait_until_gone(root: int, seconds: float = 10.0) -> list[int]:
    end = time.monotonic() + seconds
    while _tree(root) and time.monotonic() < end:
        time.sleep(0.1)
    return _tree(root)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    """An sshd on 127.0.0.1 (port, the PATH entry of its ssh wrapper, its PID)."""
    if not SSHD.is_file() or not shutil.which("ssh-keygen"):
        pytest.skip("Debian's openssh-server is not installed (apt-get install openssh-server; "
                    "`nox -s tests` installs it)")
    if os.geteuid() != 0:
        pytest.skip("the test's sshd runs as root (it needs /run/sshd and privilege separation)")
    d = tmp_path_factory.mktemp("sshd")
    for key in ("host_key", "id"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)],
                       check=True)
    shutil.copy(d / "id.pub", d / "authorized_keys")
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        port = s.getsockname()[1]
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress {LOOPBACK}\nHostKey {d / 'host_key'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        f"StrictModes no\nPidFile {d / 'sshd.pid'}\n")
    (d / "ssh_config").write_text(
        f"Host *\n  IdentityFile {d / 'id'}\n  IdentitiesOnly yes\n"
        "  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n  BatchMode yes\n"
        "  LogLevel ERROR\n")
    bin_dir = d / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {d / "ssh_config"} "$@"\n')
    (bin_dir / "ssh").chmod(0o755)
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    with open(d / "sshd.log", "wb") as log:
        proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(d / "sshd_config")],
                                stderr=log, stdin=subprocess.DEVNULL)
    for _ in range(100):
        with socket.socket() as s:
            if s.connect_ex((LOOPBACK, port)) == 0:
                break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail(f"sshd did not start: {(d / 'sshd.log').read_text()}")
    yield port, str(bin_dir), proc.pid
    proc.terminate()
    proc.wait(10)


def test_host_ip_is_required():
    out = subprocess.run([*MXLAUNCH, "-n", "1", "--launcher", "local", "true"],
                         capture_output=True, text=True)
    assert out.returncode != 0 and "--host-ip is required" in out.stderr


def test_local_launch_sums_pushes():
    out = subprocess.run([*MXLAUNCH, "--host-ip", LOOPBACK, "--timeout", "90", "-n", "2", "-s",
                          "1", "--launcher", "local", *WORKER, "push_pull_demo", "--rounds", "2"],
                         capture_output=True, text=True, timeout=150)
    assert out.returncode == 0, out.stderr
    reports = _reports(out.stdout)
    assert sorted(r["rank"] for r in reports) == [0, 0, 1, 1]
    assert all(r["pulled"] == [[3.0] * 3] * 2 for r in reports)


def test_local_launch_stops_the_job_when_a_worker_dies():
    proc = subprocess.Popen([*MXLAUNCH, "--host-ip", LOOPBACK, "--timeout", "90", "-n", "2",
                             "-s", "1", "--launcher", "local", *WORKER, "push_pull_demo",
                             "--rounds", "3", "--kill-rank", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=150)
    assert proc.returncode == 1
    assert "was killed by signal 9" in err and "so the job was stopped" in err
    assert _wait_until_gone(proc.pid) == []


def test_timeout_ends_a_job_that_hangs():
    # Worker rank 0 pushes once more than the other: ps-lite waits forever, the timeout ends it.
    start = time.monotonic()
    out = subprocess.run([*MXLAUNCH, "--host-ip", LOOPBACK, "--timeout", "8", "-n", "2", "-s",
                          "1", "--launcher", "local", *WORKER, "push_pull_demo",
                          "--extra-round-rank", "0"], capture_output=True, text=True, timeout=90)
    assert out.returncode == 124, out.stderr
    assert "did not finish within 8 s" in out.stderr
    assert time.monotonic() - start < 40


def test_the_books_local_command(real_data_dir, tmp_path):
    (command,) = book_commands("multi-machine.md", SECTION, "--launcher local")
    out = run_book_command(command, {}, tmp_path, timeout=240)
    a, b = sorted(_reports(out.stdout), key=lambda r: r["rank"])
    assert a["checksum"] == b["checksum"] and a["num_workers"] == 2


def test_the_books_ssh_command(real_data_dir, sshd, tmp_path):
    port, ssh_bin, sshd_pid = sshd
    (command,) = book_commands("multi-machine.md", SECTION, "--launcher ssh")
    replace = {"192.0.2.1": LOOPBACK, "192.0.2.2": f"{LOOPBACK}:{port}",
               "192.0.2.3": f"{LOOPBACK}:{port}"}
    out = run_book_command(command, replace, tmp_path, timeout=240, path=(ssh_bin,))
    a, b = sorted(_reports(out.stdout), key=lambda r: r["rank"])
    assert a["checksum"] == b["checksum"] and a["num_workers"] == 2
    assert _wait_until_gone(sshd_pid) == [], "processes left on the 'remote' hosts"


def test_ssh_job_with_a_dead_worker_leaves_nothing_on_the_hosts(sshd, tmp_path):
    port, ssh_bin, sshd_pid = sshd
    hosts = tmp_path / "hosts"
    hosts.write_text(f"{LOOPBACK}:{port}\n{LOOPBACK}:{port}\n")
    env = {**os.environ, "PATH": f"{ssh_bin}{os.pathsep}{os.environ['PATH']}"}
    start = time.monotonic()
    out = subprocess.run([*MXLAUNCH, "--host-ip", LOOPBACK, "--timeout", "90", "-n", "2", "-s",
                          "2", "-H", str(hosts), "--launcher", "ssh", *WORKER, "push_pull_demo",
                          "--rounds", "3", "--kill-rank", "1"], capture_output=True, text=True,
                         timeout=150, env=env, cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert "(through ssh) exited with code 255" in out.stderr
    assert time.monotonic() - start < 60
    # The remote processes hang up with their terminal: none is left under the sshd.
    assert _wait_until_gone(sshd_pid) == [], "processes left on the 'remote' hosts"
    assert running([sshd_pid]) == [sshd_pid]
