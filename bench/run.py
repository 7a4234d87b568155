#!/usr/bin/env python
"""Benchmarks for the mgpu book: training-loop overhead, allreduce, scaling and data loading.

    python bench/run.py            # the full run (3 to 20 minutes on 2 CPU cores)
    python bench/run.py --quick    # smaller subsets and fewer repeats (a few minutes)
    python bench/run.py --only docs_build   # the book's build: cold, warm, after edits
    python bench/run.py --only docs_build --update   # ... and keep the other parts' figures

Runs the parts (a module each beside this file), writes ``results.json`` (into ``--out-dir``,
default: this folder) and prints the targets table (:mod:`bench.targets`). It measures and
records only: the Performance chapter of the book draws and explains the figures. Every figure
is the median of repeats; every ratio compares two measurements taken in the same run,
interleaved (A, B, A, B, ...) so that a change in the machine's load hits both. CPU "devices"
share the machine's cores: the figures say how the code behaves on this machine, not how GPUs
would.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the package ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import (  # noqa: E402
    allreduce,
    common,
    data,
    docs_build,
    engines,
    hosts,
    overhead,
    scaling,
    targets,
)

TEMP_COPY = 4  # MXNET_CPU_TEMP_COPY for the scaling_temp_copy part: MXNet's own default
PARTS = ["data", "overhead", "scaling", "scaling_temp_copy", "allreduce", "engines", "hosts",
         "docs_build"]
#: What --quick leaves out unless --only names it: building the book takes minutes.
NOT_QUICK = {"docs_build"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smaller subsets and fewer repeats (a few minutes on 2 cores)")
    parser.add_argument("--out-dir", type=Path, default=common.HERE,
                        help="where results.json goes (default: bench/)")
    parser.add_argument("--only", default=None,
                        help=f"comma-separated parts to run (default: all of {','.join(PARTS)}; "
                             f"--quick leaves out {', '.join(sorted(NOT_QUICK))})")
    parser.add_argument("--temp-copy", type=int, default=TEMP_COPY, metavar="N",
                        help="MXNET_CPU_TEMP_COPY for the scaling_temp_copy part "
                             f"(default {TEMP_COPY}, MXNet's own)")
    parser.add_argument("--update", action="store_true",
                        help="keep the parts of the existing results.json that this run does "
                             "not measure (same mode only); meta.updates records this run")
    parser.add_argument("--no-fair-baseline", action="store_true",
                        help="scaling: skip one device using every core (a fresh process)")
    args = parser.parse_args(argv)
    if args.only is None:
        parts = [p for p in PARTS if not (args.quick and p in NOT_QUICK)]
    else:
        parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown part(s) {sorted(unknown)}: use {', '.join(PARTS)}")
    mode = "quick" if args.quick else "full"
    cfg = common.SETTINGS[mode]
    args.out_dir.mkdir(parents=True, exist_ok=True)

    funcs = {"data": data.run, "overhead": overhead.run,
             "scaling": lambda c: scaling.run(c, fair=not args.no_fair_baseline),
             "scaling_temp_copy": lambda _: scaling.run_temp_copy(mode, args.temp_copy),
             "allreduce": allreduce.run, "engines": engines.run, "hosts": hosts.run,
             "docs_build": docs_build.run}
    path = args.out_dir / "results.json"
    earlier = load_earlier(path, mode, parser) if args.update else None
    started = time.perf_counter()
    res: dict = {"meta": common.meta(mode, parts)}
    for part in parts:
        common.log(f"[{time.perf_counter() - started:6.0f} s] {part} ...")
        res[part] = funcs[part](cfg)
    common.finish_meta(res["meta"], time.perf_counter() - started)
    info = res["meta"]
    if earlier is not None:
        res = merge(earlier, res)
    res["targets"] = targets.evaluate(res)
    path.write_text(json.dumps(res, indent=2) + "\n")
    print(f"mgpu benchmarks ({mode}), {info['hardware']}, {info['duration_s']:.0f} s, "
          f"load average {info['load_average_at_start'][0]:.2f} -> "
          f"{info['load_average_at_end'][0]:.2f}")
    print(targets.table(res["targets"]))
    print(f"\nwrote {path}")
    return 0


def load_earlier(path: Path, mode: str, parser: argparse.ArgumentParser) -> dict:
    """The results.json that ``--update`` completes; exits with a message if it cannot."""
    if not path.is_file():
        parser.error(f"--update: there is no {path} to update: run without --update first")
    earlier = json.loads(path.read_text())
    if earlier.get("meta", {}).get("mode") != mode:
        parser.error(f"--update: {path} holds a {earlier.get('meta', {}).get('mode')!r} run and "
                     f"this is a {mode!r} one: run with{'' if mode == 'full' else 'out'} --quick "
                     "to match it, or without --update to replace it")
    return earlier


def merge(earlier: dict, new: dict) -> dict:
    """``earlier`` with the parts ``new`` measured replaced, and ``new``'s run in meta.updates.

    >>> old = {"meta": {"parts": ["data", "scaling"], "date": "d0"}, "data": 1, "scaling": 2}
    >>> new = {"meta": {"parts": ["data"], "date": "d1"}, "data": 3}
    >>> m = merge(old, new)
    >>> m["data"], m["scaling"], m["meta"]["parts"], m["meta"]["updates"][0]["date"]
    (3, 2, ['data', 'scaling'], 'd1')
    """
    merged = {**earlier, **{part: new[part] for part in new["meta"]["parts"]}}
    meta = dict(earlier["meta"])
    meta["parts"] = [p for p in PARTS if p in {*meta["parts"], *new["meta"]["parts"]}]
    meta["updates"] = [*meta.get("updates", []), new["meta"]]
    merged["meta"] = meta
    return merged


if __name__ == "__main__":
    sys.exit(main())
