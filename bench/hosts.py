"""The network in the cost model: a dist_sync round and a Horovod ring allreduce across
emulated hosts at a shaped rate, against the link-limited model (mgpu.probes.links).

Three hosts (mgpu.Hosts, network namespaces on a private bridge), every link at 200 Mbit/s
each way: one server and two workers started by the book's ``python -m mgpu.cluster.mxlaunch
--launcher ssh -H hostfile``, then two Horovod ranks (``mgpu.run_horovod`` across the hosts).
ResNet-18's gradients at width 16 (701,178 numbers, 2.8 MB per worker). Every figure is the
median over rounds (after a warm-up round) of the slowest process's round. Each job runs a
phase on unshaped links before and after the shaped one: the median of both phases' rounds is
the model's overhead term (the software's own time, measured, not derived); the ratios divide
the shaped rounds by the model with that overhead. Needs root; without it the
part records why it did not run.
"""

from __future__ import annotations

from statistics import median

import mgpu
from bench.common import figure, log

RATE = "200mbit"
WIDTH = 16


def run(cfg: dict) -> dict:
    from mgpu.probes.links import (
        push_pull_across_hosts,
        push_pull_seconds,
        ring_across_hosts,
        ring_seconds,
    )

    rounds = 3 if cfg["allreduce_rounds"] <= 4 else 8
    res: dict = {"setup": {
        "hosts": f"3 emulated hosts, every link {RATE} each way (tbf), no added delay",
        "gradients": f"ResNet-18 at width {WIDTH}: 62 arrays",
        "dist_sync": "1 server and 2 workers, each on its own host (mxlaunch --launcher ssh)",
        "ring": "2 Horovod ranks, one per host (horovodrun --gloo --network-interface eth0)",
        "per_round": "the slowest process's round; median after a warm-up round",
        "overhead": "median of the rounds on unshaped links before and after the shaped phase",
        "rounds": rounds,
    }}
    lacks = mgpu.hosts_missing()
    if lacks:
        res["hosts_missing"] = lacks
        return res
    link = mgpu.Link(rate=RATE)
    sizes = [int(mgpu.mx.nd.zeros(s).size)
             for s in mgpu.gradient_shapes(mgpu.resnet18_28(width=WIDTH))]
    with mgpu.Hosts(3) as hosts:
        before, ps, after = push_pull_across_hosts(hosts, [mgpu.Link(), link, mgpu.Link()],
                                                   servers=1, workers=2, rounds=rounds,
                                                   width=WIDTH)
        free = before.seconds + after.seconds
        model = push_pull_seconds(sizes, 2, 1, link.bits_per_second,
                                  overhead=median(free))
        res["dist_sync"] = {"seconds": figure(ps.seconds, "s"), "model_s": model,
                            "unshaped": figure(free, "s"),
                            "ratio_to_model": ps.median / model}
        log(f"  hosts: dist_sync {ps.median * 1e3:.0f} ms, model {model * 1e3:.0f} ms")
        if mgpu.horovod_available():
            before, ring, after = ring_across_hosts(
                hosts, [mgpu.Link(), link, mgpu.Link()], workers=2, rounds=rounds,
                width=WIDTH)
            free = before.seconds + after.seconds
            model = ring_seconds(4 * sum(sizes), 2, link.bits_per_second,
                                 overhead=median(free))
            res["ring"] = {"seconds": figure(ring.seconds, "s"), "model_s": model,
                           "unshaped": figure(free, "s"),
                           "ratio_to_model": ring.median / model}
            log(f"  hosts: ring {ring.median * 1e3:.0f} ms, model {model * 1e3:.0f} ms")
        else:
            res["horovod_missing"] = "horovod.mxnet is not installed in this environment"
    return res
