"""A checkpointed dist_sync job loses a worker mid-epoch and restarts with one worker fewer
(mgpu.programs.restart), as the checkpoints chapter runs it.

Across emulated hosts (root only): 3 workers, host3's processes killed during epoch 2; the
launcher ends the job, nothing is left on any host or namespace, and the restart on host1 and
host2 resumes after epoch 1 with 2 workers (global batch and learning rate x 2/3) and trains
the epoch left. On loopback (anywhere): 2 workers, one process killing itself, the restart
with 1. And the chapter's two commands, run as printed across the hosts (with fewer examples and
epochs): the first job stops after epoch 1, the second resumes there with 2 workers.
"""

from __future__ import annotations

import subprocess
from functools import partial

import pytest

from helpers.book_commands import book_commands, run_book_command
from mgpu.cluster.hosts import Hosts
from mgpu.cluster.local import run_local_cluster
from mgpu.programs.ps import train_demo
from mgpu.programs.report import read_reports
from mgpu.programs.restart import RestartRun, restart_after_kill, train_checkpointed

SECTION = "## Restarting a cluster with one worker fewer"

JOB = dict(subset=1152, test_subset=200, num_epochs=2, batch_size=96, lr=0.2)


def _namespaces(run: str) -> list[str]:
    """The network namespaces of the Hosts run ``run`` that exist now."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines()
            if line.startswith(f"mgpu{run}-")]


def _check(run: RestartRun, workers: int) -> None:
    fewer = workers - 1
    assert run.workers == workers and run.num_epochs == 2
    assert run.saved == 1, "the worker was killed during epoch 2, after epoch 1's checkpoint"
    assert run.written < run.killed < run.ended < run.restarted < run.finished
    assert run.recomputed == 1  # only the unfinished epoch is trained again
    assert run.left_after_kill == {} and run.left_after_restart == {}
    batch, lr = 96 // workers * fewer, pytest.approx(0.2 * fewer / workers)
    assert (run.restart_batch_size, run.restart_lr) == (batch, lr)
    assert [r["rank"] for r in run.resumed] == list(range(fewer)), run.resumed
    for r in run.resumed:
        assert r["num_workers"] == fewer and r["resumed_after"] == 1
        assert r["batch_size"] == batch and r["lr"] == lr
        assert len(r["test_acc"]) == 2  # epoch 1 from the checkpoint, epoch 2 trained
    assert len({r["checksum"] for r in run.resumed}) == 1  # the workers agree
    # It learnt: chance is 0.1, and 0.15 is 2.4 standard errors above it on 200 test images.
    assert run.test_acc > 0.15


def test_restart_on_loopback(real_data_dir):
    run = restart_after_kill(None, workers=2, **JOB)
    assert run.where == "loopback"
    assert "SIGKILL" in run.how_it_ended, run.how_it_ended
    _check(run, 2)


def test_restart_after_a_host_is_killed(can_make_hosts, real_data_dir):
    with Hosts(3) as hosts:
        assert len(_namespaces(hosts.run)) == 3
        run = restart_after_kill(hosts, workers=3, **JOB)
        assert hosts.left() == {}
        victim = hosts[2].address  # the last host: one worker, nothing else
        made = hosts.run
    assert run.where == "hosts"
    assert run.how_it_ended.startswith("status 1: "), run.how_it_ended
    assert f"the worker on {victim} (through ssh) exited with code 255" in run.how_it_ended
    assert run.ended_after < 10.0
    _check(run, 3)
    assert _namespaces(made) == []  # the hosts' namespaces are gone


def test_the_books_commands(can_make_hosts, real_data_dir, tmp_path):
    first, again = book_commands("checkpoints.md", SECTION, "train_checkpointed")
    small = "--subset 768 --test-subset 100 --num-epochs"
    with Hosts(3) as hosts:
        replace = {"192.0.2.1": hosts[0].address,
                   "/shared/lenet.ckpt": str(tmp_path / "lenet.ckpt")}
        run = dict(cwd=tmp_path, timeout=240, env=hosts.env(),
                   prefix=tuple(hosts.command(hosts[0], [])))
        hosts.hostfile(tmp_path / "hosts")
        out = run_book_command(first, {**replace, "--num-epochs 3": f"{small} 1"}, **run)
        assert sorted(r["num_workers"] for r in read_reports(out.stdout)) == [3, 3, 3]
        (tmp_path / "hosts").unlink()  # host3 is lost: its line goes
        hosts.hostfile(tmp_path / "hosts", hosts=list(hosts)[:2])
        out = run_book_command(again, {**replace, "--num-epochs 3": f"{small} 2"}, **run)
        reports = sorted(read_reports(out.stdout), key=lambda r: r["rank"])
        assert [r["rank"] for r in reports] == [0, 1], out.stdout
        for r in reports:
            assert r["num_workers"] == 2 and r["resumed_after"] == 1
            assert r["batch_size"] == 64 and r["lr"] == pytest.approx(0.2 * 2 / 3, rel=1e-4)
            assert len(r["test_acc"]) == 2
        assert hosts.left(10.0) == {}, "processes left on the hosts"


def test_checkpointed_workers_train_as_an_unchecked_job(real_data_dir, tmp_path):
    """A checkpointed dist_sync job updates on the workers (``update_on_kvstore=False``),
    so MXNet 1.9.1 does not order its first parameter pull before the first gradient
    pushpull; unless mgpu.train sets the store up first, the pull can return the summed
    gradients (5 of 19 starts on 2 workers, before the fix), the workers disagree and learning
    stalls. Each start here must give both workers the unchecked job's parameters; six
    starts catch the race 1 - (14/19)**6 = 84% of the time."""
    job = dict(subset=1152, test_subset=200, num_epochs=1, batch_size=96, lr=0.2)
    unchecked = run_local_cluster(partial(train_demo, **job), 2).reports()
    want = {r["checksum"] for r in unchecked}
    assert len(want) == 1, unchecked
    for start in range(6):
        checkpoint = tmp_path / f"lenet{start}.ckpt"
        got = run_local_cluster(partial(train_checkpointed, str(checkpoint), **job),
                                2).reports()
        assert [r["checksum"] for r in got] == [*want] * 2, (start, got)


def test_bad_arguments_name_what_to_fix():
    with pytest.raises(ValueError, match="workers=1: a restart with one worker fewer needs"):
        restart_after_kill(None, workers=1)
    with pytest.raises(ValueError, match="batch_size=100 does not split over 3 workers"):
        restart_after_kill(None, batch_size=100)
    with pytest.raises(ValueError, match="kill_into must be a share of an epoch"):
        restart_after_kill(None, kill_into=1.5)
    with pytest.raises(ValueError, match="need 3 hosts; hosts has 2"):
        restart_after_kill([object(), object()])
