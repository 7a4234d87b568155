"""The project's performance targets, each stated once, as data.

Each target names where its value is in ``results.json`` (a dotted path), how it is compared and
with what threshold. :func:`evaluate` turns them into the ``targets`` section of
``results.json`` and :func:`table` into the table that ``bench/run.py`` prints.
"""

from __future__ import annotations

import operator
from dataclasses import asdict, dataclass

COMPARISONS = {">=": operator.ge, "<=": operator.le}


@dataclass(frozen=True)
class Target:
    id: str
    what: str
    comparison: str  # a key of COMPARISONS: value <comparison> threshold is met
    threshold: float
    path: str  # where the value is in results.json, e.g. "overhead.ratio_to_plain.x.median"
    unit: str = "ratio"


#: The two runs of the scaling part: mgpu's default temp space, and --temp-copy's (MXNet's 4).
SCALING_RUNS = {"scaling": "mgpu's MXNET_CPU_TEMP_COPY",
                "scaling_temp_copy": "MXNET_CPU_TEMP_COPY of --temp-copy"}
SCALING_MODELS = {"lenet": "LeNet", "resnet18_w16": "ResNet-18 width 16"}

TARGETS = [
    Target("overhead", "mgpu.train / plain Gluon loop, images/s (LeNet, 2 CPU devices)", ">=",
           1.0, "overhead.ratio_to_plain.train_allreduce.median"),
    *[Target(f"allreduce_{k}",
             f"best from-scratch allreduce / KVStore 'local', time ({k} CPU devices)", "<=",
             1.0, f"allreduce.{k}_devices.best_from_scratch.ratio_to_local") for k in (2, 4)],
    *[Target(f"fused_vs_numpy_{k}",
             f"FusedAllreduce / the NumPy sum in one address space, time ({k} CPU devices)",
             "<=", bound, f"allreduce.{k}_devices.algorithms.fused.ratio_to_numpy.median")
      for k, bound in ((2, 1.5), (4, 2.0))],
    *[Target(f"fused_vs_device_{k}",
             f"FusedAllreduce / KVStore 'device', time ({k} CPU devices)", "<=", 1.0,
             f"allreduce.{k}_devices.algorithms.fused.ratio_to_device.median") for k in (2, 4)],
    *[Target(f"{part}_{model}", f"{label}: images/s on 2 CPU devices / on 1 ({how})", ">=",
             0.9, f"{part}.{model}.speedup_vs_1_device.2.median")
      for part, how in SCALING_RUNS.items() for model, label in SCALING_MODELS.items()],
    *[Target(f"fair_{model}", f"{label}: images/s on 2 CPU devices / on 1 using every core",
             ">=", bound, f"scaling.{model}.fair_speedup_vs_1_device_all_cores.2.median")
      for model, label, bound in (("lenet", "LeNet", 1.3),)],
    Target("docs_cold", "nox -s docs in a fresh clone: install, execute, both editions", "<=",
           480, "docs_build.cold_s", unit="s"),
    Target("docs_warm", "nox -s docs again, nothing changed", "<=", 15,
           "docs_build.warm_s", unit="s"),
    Target("docs_prose_edit", "chapters executed after a prose edit of one chapter", "<=", 0,
           "docs_build.prose_edit_executed", unit="chapters"),
    Target("docs_code_edit_page", "the edited chapter executed after a code edit", ">=", 1,
           "docs_build.code_edit_executed_page", unit="chapters"),
    Target("docs_code_edit_others", "other chapters executed after a code edit of one", "<=", 0,
           "docs_build.code_edit_executed_others", unit="chapters"),
    Target("hosts_dist_sync", "dist_sync round across hosts at 200 Mbit/s / link model",
           "<=", 1.15, "hosts.dist_sync.ratio_to_model"),
    Target("hosts_ring", "Horovod ring allreduce across hosts at 200 Mbit/s / link model",
           "<=", 1.25, "hosts.ring.ratio_to_model"),
    Target("data_load", "load_fashion_mnist(), the whole data set", "<=", 1.0,
           "data.load_fashion_mnist_seconds.median", unit="s"),
]


def lookup(results: dict, path: str):
    """The value at ``path`` (keys joined by dots), or None where a part was not run."""
    node = results
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def evaluate(results: dict) -> list[dict]:
    """Every target whose part was run, with its value and whether it was met."""
    rows = []
    for t in TARGETS:
        value = lookup(results, t.path)
        if value is not None:
            met = bool(COMPARISONS[t.comparison](value, t.threshold))
            rows.append({**asdict(t), "value": value, "met": met})
    return rows


def table(rows: list[dict]) -> str:
    """The targets as a plain-text table."""
    w = max([len(r["what"]) for r in rows] + [6])
    lines = [f"{'target':<{w}} {'value':>9}  {'threshold':<10} met"]
    lines.append("-" * len(lines[0]))
    for r in rows:
        bound = f"{r['comparison']} {r['threshold']:g}"
        lines.append(f"{r['what']:<{w}} {r['value']:>9.3f}  {bound:<10} "
                     f"{'yes' if r['met'] else 'NO'}")
    return "\n".join(lines)
