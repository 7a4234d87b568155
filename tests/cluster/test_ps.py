"""The worker programs of mgpu.programs.ps on a real local cluster (scheduler, server, workers)."""

from mgpu.cluster.local import run_local_cluster
from mgpu.cluster.processes import running
from mgpu.programs import ps


def test_push_pull_sums_over_workers():
    result = run_local_cluster(ps.push_pull_demo, 2, args=((2, 3), 2), timeout=60)
    assert len(set(result.pids)) == 4  # scheduler, server, 2 workers
    assert running(result.pids, groups=True) == [], "processes left running"
    reports = result.reports()
    assert sorted(r["rank"] for r in reports) == [0, 0, 1, 1]
    for r in reports:  # worker r pushed (r + 1) * ones; every pull is 1 + 2
        assert r["pushed"] == r["rank"] + 1
        assert r["pulled"] == [[3.0] * 3] * 2
    assert [w.returncode for w in result.workers] == [0, 0]
    assert all(p.returncode == 0 for p in result.processes)


def test_dist_sync_training_keeps_workers_identical(real_data_dir):
    # 1,000 examples, global batch 128: each worker's shard of 500 is cut to 448 = 7 x 64, so
    # both run 7 steps per epoch (the Trainer would refuse a short last batch: see below)
    result = run_local_cluster(ps.train_demo, 2, args=(1000, 300, 2, 128, 0.1), timeout=90)
    assert running(result.pids, groups=True) == [], "processes left running"
    a, b = sorted(result.reports(), key=lambda r: r["rank"])
    assert (a["rank"], b["rank"], a["num_workers"]) == (0, 1, 2)
    assert a["checksum"] == b["checksum"]
    assert a["test_acc"] == b["test_acc"]  # the same weights on the same test set
    assert a["examples"] == b["examples"] == 448
    assert a["batch_size"] == 128 and len(a["epoch_time"]) == 2  # no hang between epochs


def test_dist_sync_training_with_one_worker(real_data_dir):
    result = run_local_cluster(ps.train_demo, 1, args=(1000, 300, 1, 128, 0.1), timeout=90)
    assert running(result.pids, groups=True) == [], "processes left running"
    (r,) = result.reports()
    assert r["num_workers"] == 1 and r["examples"] == 896  # 7 whole batches of 128
    assert r["test_acc"] > 0.15  # chance is 0.1


def test_push_pull_timing_reports_every_round_of_every_worker():
    result = run_local_cluster(ps.push_pull_timing, 2, args=(3, 4), timeout=90)
    reports = sorted(result.reports(), key=lambda r: r["rank"])
    assert [r["rank"] for r in reports] == [0, 1]
    for r in reports:  # ResNet-18 at width 4 still has 62 gradients
        assert r["num_workers"] == 2 and r["tensors"] == 62 and len(r["ms"]) == 3
        assert all(ms > 0 for ms in r["ms"])
    assert running(result.pids) == []


# A worker steps with batches of 8, 8, then 4, and reports where each step's error came from.
_BATCH_CHANGE = """
import traceback
from mgpu.backend import mx
from mgpu.programs.report import report
kv = mx.kv.create("dist_sync")
net = mx.gluon.nn.Dense(1, in_units=3)
net.initialize()
trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore=kv)
steps = []
for batch in (8, 8, 4):
    with mx.autograd.record():
        loss = net(mx.nd.ones((batch, 3))).sum()
    loss.backward()
    try:
        trainer.step(batch)
        mx.nd.waitall()
        steps.append([batch, "ok"])
    except Exception as err:
        where = traceback.extract_tb(err.__traceback__)[-1]
        steps.append([batch, type(err).__name__, where.name, where.filename])
report(steps=steps, on_servers=trainer._update_on_kvstore)
"""


def test_the_worker_refuses_a_step_with_another_batch_size():
    # worker_shard cuts whole batches because of this refusal: it comes from the worker's
    # own Trainer (python/mxnet/gluon/trainer.py, _check_and_rescale_grad), before anything
    # is pushed; the servers, which hold the optimizer, never see the step.
    result = run_local_cluster(_BATCH_CHANGE, 1, timeout=60)
    (report,) = result.reports()
    assert report["on_servers"] is True  # the optimizer runs on the servers
    first, second, third = report["steps"]
    assert first == second == [8, "ok"]
    assert third[:3] == [4, "UserWarning", "_check_and_rescale_grad"]
    assert third[3].endswith("mxnet/gluon/trainer.py")
