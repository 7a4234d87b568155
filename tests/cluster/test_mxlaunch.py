"""MXNet's own launcher through mgpu.cluster.mxlaunch: locally on 127.0.0.1, and over ssh
across three emulated hosts (mgpu.cluster.hosts: network namespaces with their own addresses
and an sshd each, which needs root; the can_make_hosts fixture skips otherwise).

Over ssh, mxlaunch and the scheduler run on host1 (the book's 192.0.2.1), the servers and
workers on host2 and host3 (192.0.2.2 and 192.0.2.3), reached through the hosts' ssh wrapper
(Hosts.env). Afterwards no process is left on any host.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.book_commands import book_commands, run_book_command
from mgpu.cluster.hosts import Hosts
from mgpu.cluster.processes import LOOPBACK, descendants
from mgpu.programs.report import read_reports

SECTION = "## Running on real machines"
MXLAUNCH = [sys.executable, "-m", "mgpu.cluster.mxlaunch"]
WORKER = [sys.executable, "-m", "mgpu"]
#: What the scheduler logs with PS_VERBOSE=1 for every node (ps-lite's van.cc).
ASSIGNED = re.compile(r"assign rank=(\d+) to node role=(\w+), ip=([\d.]+)")


def _tree(root: int) -> list[int]:
    """The live descendants of ``root``."""
    return sorted(descendants(root))


def _wait_until_gone(root: int, seconds: float = 10.0) -> list[int]:
    end = time.monotonic() + seconds
    while _tree(root) and time.monotonic() < end:
        time.sleep(0.1)
    return _tree(root)


@pytest.fixture
def hosts(can_make_hosts):
    """Three emulated hosts (host1 launches, host2 and host3 run the servers and workers)."""
    with Hosts(3) as made:
        yield made


def test_host_ip_is_required():
    out = subprocess.run([*MXLAUNCH, "-n", "1", "--launcher", "local", "true"],
                         capture_output=True, text=True)
    assert out.returncode != 0 and "--host-ip is required" in out.stderr
    assert "[--timeout SECONDS] [--keepalive SECONDS] LAUNCH.PY-OPTIONS" in out.stderr


def test_help_prints_the_usage_and_launch_pys_options():
    out = subprocess.run([*MXLAUNCH, "-h"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "python -m mgpu.cluster.mxlaunch --host-ip ADDRESS [--timeout SECONDS]" in out.stdout
    assert "[--keepalive SECONDS] LAUNCH.PY-OPTIONS COMMAND..." in out.stdout
    for option in ("--host-ip", "--timeout", "--keepalive", "ControlMaster=no"):
        assert option in out.stdout
    # -h after mxlaunch's own options: launch.py's help (argparse's usage line).
    out = subprocess.run([*MXLAUNCH, "--host-ip", LOOPBACK, "-h"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: launch.py") and "--launcher" in out.stdout, out.stdout


def test_local_launch_sums_pushes():
    out = subprocess.run([*MXLAUNCH, "--host-ip", LOOPBACK, "--timeout", "90", "-n", "2", "-s",
                          "1", "--launcher", "local", *WORKER, "push_pull_demo", "--rounds", "2"],
                         capture_output=True, text=True, timeout=150)
    assert out.returncode == 0, out.stderr
    reports = read_reports(out.stdout)
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
    a, b = sorted(read_reports(out.stdout), key=lambda r: r["rank"])
    assert a["checksum"] == b["checksum"] and a["num_workers"] == 2


def test_the_books_ssh_command(real_data_dir, hosts, tmp_path):
    (command,) = book_commands("multi-machine.md", SECTION, "--launcher ssh")
    host1, host2, host3 = hosts
    replace = {"192.0.2.1": host1.address, "192.0.2.2": host2.address,
               "192.0.2.3": host3.address}
    out = run_book_command(command, replace, tmp_path, timeout=240,
                           env={**hosts.env(), "PS_VERBOSE": "1"},
                           prefix=tuple(hosts.command(host1, [])))
    a, b = sorted(read_reports(out.stdout), key=lambda r: r["rank"])
    assert a["checksum"] == b["checksum"] and a["num_workers"] == 2
    # The scheduler's own record: one server and one worker on each of host2 and host3.
    where = sorted((role, ip) for _, role, ip in ASSIGNED.findall(out.stderr))
    assert where == sorted((role, h.address) for role in ("server", "worker")
                           for h in (host2, host3)), out.stderr
    assert hosts.left(10.0) == {}, "processes left on the hosts"


def test_ssh_job_with_a_dead_worker_leaves_nothing_on_the_hosts(hosts, tmp_path):
    host1, host2, host3 = hosts
    hostfile = hosts.hostfile(tmp_path / "hosts", hosts=[host2, host3])
    start = time.monotonic()
    out = subprocess.run(hosts.command(host1, [
        *MXLAUNCH, "--host-ip", host1.address, "--timeout", "90", "-n", "2", "-s", "2",
        "-H", str(hostfile), "--launcher", "ssh", *WORKER, "push_pull_demo", "--rounds", "3",
        "--kill-rank", "1"]), capture_output=True, text=True, timeout=150, env=hosts.env(),
        cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert re.search(r"worker on [\d.]+ \(through ssh\) exited with code 255", out.stderr)
    assert time.monotonic() - start < 60
    # The remote processes hang up with their terminal: none is left on any host.
    assert hosts.left(10.0) == {}, "processes left on the hosts"


def test_keepalive_needs_whole_seconds():
    for value, why in (("0", "positive"), ("1.5", "whole")):
        out = subprocess.run([*MXLAUNCH, "--host-ip", LOOPBACK, "--keepalive", value, "-n",
                              "1", "--launcher", "local", "true"], capture_output=True, text=True)
        assert out.returncode != 0
        assert f"--keepalive needs a {why} number of seconds, not '{value}'" in out.stderr


# Credentials: fix 5 of mgpu.cluster.mxlaunch. Every value below must stay off every command line.
SECRETS = {"AWS_ACCESS_KEY_ID": "AKIA-test-not-a-key", "AWS_SECRET_ACCESS_KEY": "aws-secret-x9",
           "AWS_SESSION_TOKEN": "aws-session-x9", "MY_API_TOKEN": "api-token-x9"}
GIVEN_SECRETS = {"DB_PASSWORD": "db-password-x9", "service_key": "service-key-x9"}
DROPPED = [*SECRETS, *GIVEN_SECRETS]


def _recorder(tmp_path: Path, name: str, then: str) -> tuple[str, Path]:
    """A program ``name`` in a fresh directory (returned, to put first on PATH) that records
    its arguments (one JSON list per line, in the returned log) and then runs ``then``, a
    line of Python that may use ``sys.argv``."""
    bin_dir, log = tmp_path / f"fake-{name}", tmp_path / f"{name}-argv.jsonl"
    bin_dir.mkdir()
    (bin_dir / name).write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"with open({str(log)!r}, 'a') as f:\n    f.write(json.dumps(sys.argv) + '\\n')\n"
        f"{then}\n")
    (bin_dir / name).chmod(0o755)
    return str(bin_dir), log


def _fake_ssh(tmp_path: Path) -> tuple[str, Path]:
    """An ``ssh`` that records its arguments and runs the remote command here, with bash,
    as sshd would on the other machine."""
    return _recorder(tmp_path, "ssh", "os.execvp('bash', ['bash', '-c', sys.argv[-1]])")


def _fake_bash(tmp_path: Path) -> tuple[str, Path]:
    """A ``bash`` that records its arguments, then runs /bin/bash.
    ``dmlc_tracker/local.py`` (``exec_cmd``) starts every server and worker with
    ``executable='bash'``, which is looked up on the PATH of the process's environment."""
    return _recorder(tmp_path, "bash", "os.execv('/bin/bash', ['bash', *sys.argv[1:]])")


def _cmdlines_while(proc: subprocess.Popen) -> list[str]:
    """The command line of every descendant of ``proc`` seen while it runs, sampled every
    10 ms from /proc (only its own tree: another test run may use the same values).
    ``proc``'s own command line is left out: its children have it too between their fork
    and their exec."""
    own, seen = " ".join(proc.args) + " ", set()
    while proc.poll() is None:
        for pid in descendants(proc.pid):
            try:
                seen.add(Path(f"/proc/{pid}/cmdline").read_bytes()
                         .replace(b"\0", b" ").decode())
            except OSError:
                continue
        time.sleep(0.01)
    return sorted(seen - {own})


def _env_job(tmp_path: Path, launcher: list[str], env: dict[str, str]):
    """Run push_pull_demo with --env* options; every process first writes its role and
    the variables it sees to a file. Returns (process, stdout, stderr, command lines)."""
    given = [w for name, value in GIVEN_SECRETS.items()
             for w in ("--env-worker", f"{name}:{value}")]
    options = ["--env", "MY_API_TOKEN", "--env", "MGPU_BOTH", "--env-worker", "MGPU_W:w1",
               "--env-server=MGPU_S:s1", *given]
    record = [f"echo $DMLC_ROLE ${{MGPU_BOTH:-}} ${{MGPU_W:-}} ${{MGPU_S:-}} > "
              f"{tmp_path}/seen.$$;"]
    proc = subprocess.Popen(
        [*MXLAUNCH, "--host-ip", LOOPBACK, "--timeout", "90", "-n", "2", "-s", "1", *launcher,
         *options, *record, *WORKER, "push_pull_demo"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**os.environ, **SECRETS, "MGPU_BOTH": "both1", **env})
    cmdlines = _cmdlines_while(proc)
    out, err = proc.communicate(timeout=150)
    seen = sorted(p.read_text().split() for p in tmp_path.glob("seen.*"))
    return proc, out, err, cmdlines, seen


def test_dmlc_tracker_puts_aws_keys_on_the_ssh_command_line(monkeypatch):
    """What fix 5 is for: the installed dmlc_tracker exports the AWS keys."""
    from dmlc_tracker import ssh

    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    exports = ssh.get_env({"DMLC_ROLE": "worker"})
    assert "export AWS_SECRET_ACCESS_KEY=aws-secret-x9;" in exports
    assert "export AWS_ACCESS_KEY_ID=AKIA-test-not-a-key;" in exports


def test_ssh_launch_puts_no_credential_on_any_command_line(tmp_path):
    ssh_bin, log = _fake_ssh(tmp_path)
    hosts = tmp_path / "hosts"
    hosts.write_text(f"{LOOPBACK}\n{LOOPBACK}\n")
    proc, out, err, cmdlines, seen = _env_job(
        tmp_path, ["-H", str(hosts), "--launcher", "ssh"],
        {"PATH": f"{ssh_bin}{os.pathsep}{os.environ['PATH']}"})
    assert proc.returncode == 0, err
    argvs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(argvs) == 3  # one server and two workers, started through ssh
    # Never on a shared connection of the user's ssh configuration (its options would apply).
    assert all(a[1:8] == ["-tt", "-o", "BatchMode=yes", "-o", "ControlMaster=no", "-o",
                          "ControlPath=none"] for a in argvs), argvs
    values = [*SECRETS.values(), *GIVEN_SECRETS.values()]
    assert not [a for a in argvs if any(v in " ".join(a) for v in values)]
    assert not [c for c in cmdlines if any(v in c for v in values)]
    for name in DROPPED:  # each dropped variable is named, with what to do instead
        assert name in err
    assert err.count("chmod 600") == len(DROPPED)
    assert ("AWS_SESSION_TOKEN is set here but is not passed to the other machines: "
            "mxlaunch passes no credential to them") in err
    # The other --env* variables arrive, each at the processes it was meant for.
    exports = [a[-1].split(" cd ")[0] for a in argvs]
    servers = [e for e in exports if "export DMLC_ROLE=server;" in e]
    workers = [e for e in exports if "export DMLC_ROLE=worker;" in e]
    assert len(servers) == 1 and len(workers) == 2
    assert all("export MGPU_S=s1;" in e and "MGPU_W" not in e for e in servers)
    assert all("export MGPU_W=w1;" in e and "MGPU_S" not in e for e in workers)
    assert all("export MGPU_BOTH=both1;" in e for e in exports)
    assert ["server", "both1", "s1"] in seen and ["worker", "both1", "w1"] in seen
    assert sorted(r["rank"] for r in read_reports(out)) == [0, 1]


def test_local_launch_passes_env_options_and_drops_credentials(tmp_path):
    bash_bin, log = _fake_bash(tmp_path)
    proc, out, err, cmdlines, seen = _env_job(
        tmp_path, ["--launcher", "local"],
        {"PATH": f"{bash_bin}{os.pathsep}{os.environ['PATH']}"})
    assert proc.returncode == 0, err
    argvs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(argvs) == 3  # one server and two workers, started with bash -c
    values = [*SECRETS.values(), *GIVEN_SECRETS.values()]
    assert not [a for a in argvs if any(v in " ".join(a) for v in values)]
    assert not [c for c in cmdlines if any(v in c for v in values)]
    for name in GIVEN_SECRETS:
        assert f"--env-worker {name} was dropped" in err
    # Locally every process inherits the environment: --env MY_API_TOKEN is not "dropped".
    assert "--env MY_API_TOKEN: with --launcher local every process inherits" in err
    assert "AWS_SECRET_ACCESS_KEY" not in err  # locally no command line carries the keys
    # launch.py's --env-worker and --env-server reach their processes (as shipped they
    # end up in the command: 'MGPU_W:w1: command not found').
    assert sorted(seen) == [["scheduler", "both1"], ["server", "both1", "s1"],
                            ["worker", "both1", "w1"], ["worker", "both1", "w1"]]
    assert sorted(r["rank"] for r in read_reports(out)) == [0, 1]


def test_env_options_need_a_name_and_value():
    out = subprocess.run([*MXLAUNCH, "--host-ip", LOOPBACK, "-n", "1", "--launcher", "local",
                          "--env-worker", "NOVALUE", "true"], capture_output=True, text=True)
    assert out.returncode != 0 and "--env-worker needs NAME:VALUE" in out.stderr
