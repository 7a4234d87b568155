"""Horovod for real: horovodrun with Gloo, every rank on 127.0.0.1 or across emulated hosts over
ssh (tests need Horovod built for MXNet in this venv: `nox -s tests` builds it; the hosts need root:
the can_make_hosts fixture)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.book_commands import book_commands, run_book_command
from mgpu.cluster import horovodrun
from mgpu.cluster.hosts import Host, Hosts
from mgpu.cluster.local import run_local_cluster
from mgpu.cluster.processes import processes, running
from mgpu.programs import horovod
from mgpu.programs import ps as dist

needs_horovod = pytest.mark.skipif(
    not horovodrun.horovod_available(),
    reason="Horovod is not installed in this venv (with MXNet): `nox -s tests` builds it "
           "(noxfile.py, ensure_horovod)")

PROGRAM = [sys.executable, "-m", "mgpu"]


def _nothing_left(result: horovodrun.HorovodResult, pids=()) -> None:
    assert result.left_running == [], "processes still running after horovodrun exited"
    assert set(pids) <= set(result.pids), "a rank's PID was not recorded"
    assert running([*result.pids, *pids]) == []


@needs_horovod
def test_allreduce_sums_across_two_ranks():
    result = horovodrun.run_horovod([*PROGRAM, "hvd_allreduce", "--rounds", "2"], np=2,
                                 timeout=90)
    reports = result.reports()
    assert sorted(r["rank"] for r in reports) == [0, 0, 1, 1]
    for r in reports:  # rank r sent (r + 1) * ones; the sum over 2 ranks is 1 + 2 = 3
        assert r["size"] == 2 and r["sent"] == r["rank"] + 1
        assert r["received"] == [[3.0] * 3] * 2
    _nothing_left(result, {r["pid"] for r in reports})


@needs_horovod
def test_allreduce_timing_reports_every_round_of_every_rank():
    result = horovodrun.run_horovod([*PROGRAM, "hvd_allreduce_timing", "--rounds", "3",
                                  "--width", "4"], np=2, timeout=90)
    reports = sorted(result.reports(), key=lambda r: r["rank"])
    assert [r["rank"] for r in reports] == [0, 1]
    for r in reports:  # ResNet-18 at width 4 still has 62 gradients
        assert r["size"] == 2 and r["tensors"] == 62 and len(r["ms"]) == 3
        assert all(ms > 0 for ms in r["ms"])
    _nothing_left(result, {r["pid"] for r in reports})


@needs_horovod
def test_training_leaves_identical_weights_on_every_rank(real_data_dir):
    # The ranks start from different weights (seed + rank); the broadcast from rank 0 and the
    # allreduce of every step must leave them identical. 1,000 examples, global batch 128: each
    # rank's shard of 500 is cut to 448 = 7 x 64, as under dist_sync.
    result = horovodrun.run_horovod(
        [*PROGRAM, "hvd_train", "--subset", "1000", "--test-subset", "300", "--num-epochs", "2",
         "--batch-size", "128", "--lr", "0.1"], np=2, timeout=150)
    a, b = sorted(result.reports(), key=lambda r: r["rank"])
    assert (a["rank"], b["rank"], a["num_workers"]) == (0, 1, 2)
    assert a["checksum"] == b["checksum"]
    assert a["test_acc"] == b["test_acc"]
    assert a["examples"] == b["examples"] == 448
    assert a["batch_size"] == 128 and len(a["epoch_time"]) == 2
    assert a["test_acc"] > 0.15  # chance is 0.1
    _nothing_left(result, {a["pid"], b["pid"]})


@needs_horovod
def test_horovod_makes_the_same_updates_as_dist_sync(real_data_dir):
    # batch_size is the global batch under both engines: the same initial weights (rank 0's),
    # the same shards and batches and the same scaling give the same SGD steps; with two workers
    # the sum of the gradients is exact whoever adds them, so the weights agree bit for bit.
    ps = run_local_cluster(dist.train_demo, 2, args=(1000, 300, 1, 128, 0.1), timeout=120)
    hv = horovodrun.run_horovod(
        [*PROGRAM, "hvd_train", "--subset", "1000", "--test-subset", "300", "--num-epochs", "1",
         "--batch-size", "128", "--lr", "0.1"], np=2, timeout=150)
    (ps_sum,) = {r["checksum"] for r in ps.reports()}
    (hv_sum,) = {r["checksum"] for r in hv.reports()}
    assert ps_sum == hv_sum


@needs_horovod
def test_a_killed_rank_ends_the_job_and_nothing_is_left():
    # Two "hosts" on loopback: horovodrun treats both as this machine (no ssh).
    with pytest.raises(horovodrun.HorovodError) as caught:
        horovodrun.run_horovod([*PROGRAM, "hvd_allreduce", "--rounds", "3", "--kill-rank", "1"],
                            np=2, hosts="localhost:1,127.0.0.1:1", timeout=90)
    result = caught.value.result
    assert str(caught.value).startswith("horovodrun exited with code 1")
    assert "exited with non-zero status" in result.error_line()
    assert "Exit code: 137" in result.stderr  # 128 + SIGKILL
    (kill,) = [r for r in result.reports() if r.get("event") == "killing myself"]
    assert kill["rank"] == 1
    assert result.ended - kill["time"] < 30, "the job outlived the killed rank by 30 s"
    _nothing_left(result, {r["pid"] for r in result.reports()})


def _rank_processes(fault: horovod.RankFailure) -> list[int]:
    """Live processes whose command line names this rank_failure job's meeting
    directory: every rank, and every keeper, of this job (not of a concurrent one)."""
    command = fault.result.command
    meet = command[command.index("--meet") + 1].encode()
    found = []
    for pid, _, _ in processes():
        try:
            if meet in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:  # gone meanwhile
            pass
    return found


def _no_rank_left(fault: horovod.RankFailure) -> None:
    _nothing_left(fault.result, {r["pid"] for r in fault.result.reports()})
    assert _rank_processes(fault) == [], "a rank (or its keeper) outlived the job"


@needs_horovod
def test_a_lone_rank_fails_at_once_when_its_peer_is_killed():
    # The keeper hides rank 1's death from horovodrun: rank 0 is on its own. Its socket to
    # rank 1 is closed by the kernel, so its allreduce fails long before Gloo's timeout.
    fault = horovod.rank_failure("kill", hide_exit=True, gloo_timeout=20, timeout=120)
    assert fault.failed_after[0] < 10, fault.failed_after
    assert fault.gloo_source.startswith("gloo/transport/tcp/pair.cc"), fault.gloo_error
    assert "peer" in fault.gloo_error
    # rank 0 failed on its own; horovodrun then terminated rank 1's keeper (SIGTERM, 143;
    # horovodrun sometimes prints no status for a rank it terminated)
    assert fault.exit_codes[0] == 1 and fault.exit_codes.get(1, 143) == 143
    assert fault.result.returncode == 1 and fault.ended_after < 60
    _no_rank_left(fault)


@needs_horovod
def test_a_stopped_rank_holds_the_others_for_the_gloo_timeout():
    # SIGSTOP leaves rank 1's sockets open: rank 0 waits for HOROVOD_GLOO_TIMEOUT_SECONDS.
    fault = horovod.rank_failure("stop", gloo_timeout=3, timeout=120)
    # (rank 0 may start the wait that times out a moment before rank 1 reports its stop)
    assert 2.9 <= fault.failed_after[0] < 13, fault.failed_after
    # The error names the first wait rank 0 cannot complete: a receive, or a send, which
    # completes only when the stopped rank posts the matching receive (pair.cc, Pair::send)
    assert fault.gloo_error in {f"Timed out waiting 3000ms for {op} operation to complete"
                                for op in ("recv", "send")}, fault.gloo_error
    assert fault.gloo_source.startswith("gloo/transport/tcp/unbound_buffer.cc")
    # rank 0 failed on its own; horovodrun had to SIGKILL the frozen rank 1
    assert fault.exit_codes[0] == 1 and fault.exit_codes.get(1, 137) == 137
    assert fault.result.returncode == 1
    _no_rank_left(fault)


@needs_horovod
def test_a_sleeping_rank_holds_the_others_beyond_the_gloo_timeout():
    # Rank 1's program sleeps, its background thread answers: no Gloo timeout, rank 0
    # waits for it and gets the right sum.
    fault = horovod.rank_failure("sleep", gloo_timeout=3, sleep=10, timeout=120)
    assert fault.failed_after == {} and fault.gloo_error == ""
    assert 10 <= fault.finished_after[0] < 20, fault.finished_after
    (second,) = [r for r in fault.result.reports()
                 if r.get("rank") == 0 and r.get("round") == 1]
    assert second["received"] == [[3.0] * 3] * 2
    assert fault.result.returncode == 0
    _no_rank_left(fault)


@pytest.mark.parametrize("kwargs, message", [
    ({"how": "crash"}, "how must be 'kill', 'stop' or 'sleep'"),
    ({"how": "stop", "hide_exit": True}, "hide_exit=True is for how='kill'"),
    ({"how": "sleep", "hide_exit": True}, "hide_exit=True is for how='kill'"),
    ({"how": "sleep", "sleep": -1}, "sleep must be a number of seconds >= 0"),
    ({"victim": 2}, "victim must be a rank from 0 to 1"),
    ({"np": 1}, "np must be at least 2"),
    ({"gloo_timeout": 0}, "gloo_timeout must be at least 1"),
])
def test_rank_failure_checks_its_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        horovod.rank_failure(**kwargs)


@needs_horovod
def test_timeout_kills_a_job_that_hangs():
    # One rank sleeps before its allreduce; the timeout must end the job and every process.
    code = "import time; import mgpu.programs.horovod as h; h._hvd(); time.sleep(120)"
    start = time.perf_counter()
    with pytest.raises(horovodrun.HorovodError, match="did not finish within 8 s"):
        horovodrun.run_horovod([sys.executable, "-c", code], np=2, timeout=8)
    assert time.perf_counter() - start < 30


@needs_horovod
def test_the_books_horovodrun_command_runs_across_two_hosts(can_make_hosts, real_data_dir,
                                                            tmp_path):
    # As a reader would on a cluster: the command runs on host1, which starts rank 0 itself and
    # rank 1 on host2 over ssh (with the run's key); the ranks meet over eth0.
    (command,) = book_commands("horovod.md", "## Across hosts over ssh", "horovodrun")
    # HOME: horovodrun's cache of its host checks (~/.horovod) goes to tmp_path, not the user's
    env_home = {"HOME": str(tmp_path), "MGPU_DATA_DIR": str(real_data_dir)}
    with Hosts(2) as cluster:
        a, b = cluster
        netns = [subprocess.run(cluster.command(h, ["readlink", "/proc/self/ns/net"]),
                                capture_output=True, text=True, check=True).stdout.strip()
                 for h in (a, b)]
        out = run_book_command(command, {"192.0.2.2": a.address, "192.0.2.3": b.address},
                               tmp_path, timeout=240, env=cluster.env({**os.environ, **env_home}),
                               prefix=tuple(cluster.command(a, [])))
        left = cluster.left(5.0)
    reports = horovodrun.HorovodResult([], 0, out.stdout, out.stderr, 0, 0).reports()
    # where each rank said it ran (HOROVOD_HOSTNAME) and where its process really was
    assert [(r["rank"], r["host"], r["netns"])
            for r in sorted(reports, key=lambda r: r["rank"])] == [
        (0, a.address, netns[0]), (1, b.address, netns[1])]
    assert len({r["checksum"] for r in reports}) == 1
    assert left == {}, "a process of the job outlived horovodrun on a host"
    assert running([r["pid"] for r in reports]) == []


@needs_horovod
def test_across_hosts_the_timeout_stops_every_process_on_every_host(can_make_hosts):
    # The ranks sleep; at the timeout run_horovod stops horovodrun (in host1) and what it
    # started, and what appeared in host2 (rank 1 under its sshd session): none of it is a
    # descendant of horovodrun, run_horovod finds it among host2's processes.
    with Hosts(2) as cluster:
        a, b = cluster
        start = time.perf_counter()
        with pytest.raises(horovodrun.HorovodError, match="did not finish within 8 s") as caught:
            horovodrun.run_horovod([sys.executable, "-c", "import time; time.sleep(120)"],
                                   np=2, emulated=cluster, timeout=8)
        left = cluster.left()
    result = caught.value.result
    assert time.perf_counter() - start < 30
    assert result.command[result.command.index("-H") + 1] == f"{a.address}:1,{b.address}:1"
    assert result.by_host["host1"] and result.by_host["host2"]
    assert set(result.by_host["host2"]) <= set(result.pids)
    assert left == {} and running(result.pids) == []


def test_running_across_hosts_checks_its_arguments():
    cluster = Hosts(2)
    with pytest.raises(ValueError, match="inside its with block"):
        horovodrun.run_horovod(PROGRAM, emulated=cluster)
    cluster.hosts.append(Host("host1", "mgpu00000-h1", "10.1.2.1", "mgpu00000v1"))
    with pytest.raises(ValueError, match="np=2 ranks, one per host, need 2 hosts"):
        horovodrun.run_horovod(PROGRAM, emulated=cluster)
    with pytest.raises(ValueError, match="'localhost' is none of 10.1.2.1"):
        horovodrun.run_horovod(PROGRAM, hosts="localhost:2", emulated=cluster)
    with pytest.raises(ValueError, match="network_interface='lo' cannot join emulated hosts"):
        horovodrun.run_horovod(PROGRAM, hosts="10.1.2.1:2", emulated=cluster,
                               network_interface="lo")
    cluster = Hosts(2, ssh=False)
    cluster.hosts += [Host("host1", "mgpu00000-h1", "10.1.2.1", "mgpu00000v1"),
                      Host("host2", "mgpu00000-h2", "10.1.2.2", "mgpu00000v2")]
    with pytest.raises(ValueError, match="over ssh, but emulated was made with ssh=False"):
        horovodrun.run_horovod(PROGRAM, emulated=cluster)


@needs_horovod
def test_horovods_collectives_bind_to_the_address_of_the_hosts_name(can_make_hosts):
    # Horovod 0.28.1 gives HOROVOD_GLOO_IFACE (horovodrun's --network-interface) to its first
    # Gloo context only; the contexts of its process sets, which every collective uses, get a
    # device of their own with no interface (GlooContext::InitializeForProcessSet), so Gloo takes
    # the address of this machine's name (CreateDeviceAttr). In an emulated host that name
    # resolves to the host's address (hosts.py: /etc/netns/NAMESPACE/hosts).
    env = {"HOROVOD_GLOO_IFACE": "lo", "HOROVOD_LOG_LEVEL": "debug", "HOROVOD_RANK": "0",
           "HOROVOD_SIZE": "1", "HOROVOD_LOCAL_RANK": "0", "HOROVOD_LOCAL_SIZE": "1",
           "HOROVOD_CROSS_RANK": "0", "HOROVOD_CROSS_SIZE": "1", "HOROVOD_CONTROLLER": "gloo",
           "HOROVOD_CPU_OPERATIONS": "gloo"}
    with Hosts(1, ssh=False) as cluster:
        (host,) = cluster
        init = [sys.executable, "-c", "import mgpu.programs.horovod as h; h._hvd()"]
        done = subprocess.run(cluster.command(host, init), env=cluster.env({**os.environ, **env}),
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    devices = dict(re.findall(r"\] (\w+?) rendezvous started for .*?addr=\[([\d.]+)\]",
                              done.stdout + done.stderr))
    process_set = [name for name in devices if name.startswith("global_process_set")]
    assert devices["global"] == "127.0.0.1", devices
    assert process_set and devices[process_set[0]] == host.address, devices


def test_a_missing_horovod_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "horovod", None)  # import horovod -> ImportError
    monkeypatch.setitem(sys.modules, "horovod.mxnet", None)
    with pytest.raises(ImportError, match="(?s)nox -s tests.*HOROVOD_WITH_MXNET=1"):
        horovod._hvd()


def test_run_horovod_wants_a_list_of_arguments():
    with pytest.raises(TypeError, match="list of arguments"):
        horovodrun.run_horovod("python -m mgpu hvd_allreduce")


def test_worker_program_command_line():
    from mgpu.__main__ import parse

    fn, kwargs = parse(["hvd_train", "--subset", "2048", "--lr", "0.2", "--num-epochs", "2"])
    assert fn is horovod.train_demo and kwargs == {"subset": 2048, "lr": 0.2, "num_epochs": 2}
    bad = subprocess.run([*PROGRAM, "no_such_program"], capture_output=True, text=True)
    assert bad.returncode != 0 and "PROGRAM one of" in bad.stderr
