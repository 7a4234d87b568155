#!/usr/bin/env python
"""Benchmarks for the mgpu book: training-loop overhead, allreduce, scaling and data loading.

    python bench/run.py            # the full run (3 to 20 minutes on 2 CPU cores)
    python bench/run.py --quick    # smaller subsets and fewer repeats (a few minutes)
    python bench/run.py --docs-times docs-times.json   # also record the book's build times

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

from bench import allreduce, common, data, engines, overhead, scaling, targets  # noqa: E402

TEMP_COPY = 4  # MXNET_CPU_TEMP_COPY for the scaling_temp_copy part: MXNet's own default
PARTS = ["data", "overhead", "scaling", "scaling_temp_copy", "allreduce", "engines"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smaller subsets and fewer repeats (a few minutes on 2 cores)")
    parser.add_argument("--out-dir", type=Path, default=common.HERE,
                        help="where results.json goes (default: bench/)")
    parser.add_argument("--only", default=",".join(PARTS),
                        help=f"comma-separated parts to run (default: all of {','.join(PARTS)})")
    parser.add_argument("--temp-copy", type=int, default=TEMP_COPY, metavar="N",
                        help="MXNET_CPU_TEMP_COPY for the scaling_temp_copy part "
                             f"(default {TEMP_COPY}, MXNet's own)")
    parser.add_argument("--no-fair-baseline", action="store_true",
                        help="scaling: skip one device using every core (a fresh process)")
    parser.add_argument("--docs-times", type=Path, metavar="FILE",
                        help="a JSON file with the book's build seconds, copied in")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown part(s) {sorted(unknown)}: use {', '.join(PARTS)}")
    docs = None
    if args.docs_times:
        try:
            docs = {"source": str(args.docs_times),
                    "timings": json.loads(args.docs_times.read_text())}
        except (OSError, json.JSONDecodeError) as err:
            parser.error(f"--docs-times {args.docs_times}: {err}")
    mode = "quick" if args.quick else "full"
    cfg = common.SETTINGS[mode]
    args.out_dir.mkdir(parents=True, exist_ok=True)

    funcs = {"data": data.run, "overhead": overhead.run,
             "scaling": lambda c: scaling.run(c, fair=not args.no_fair_baseline),
             "scaling_temp_copy": lambda _: scaling.run_temp_copy(mode, args.temp_copy),
             "allreduce": allreduce.run, "engines": engines.run}
    started = time.perf_counter()
    res: dict = {"meta": common.meta(mode, parts)}
    for part in parts:
        common.log(f"[{time.perf_counter() - started:6.0f} s] {part} ...")
        res[part] = funcs[part](cfg)
    res["docs_build"] = docs  # None unless --docs-times: this script never builds the docs
    res["targets"] = targets.evaluate(res)
    common.finish_meta(res["meta"], time.perf_counter() - started)
    path = args.out_dir / "results.json"
    path.write_text(json.dumps(res, indent=2) + "\n")
    info = res["meta"]
    print(f"mgpu benchmarks ({mode}), {info['hardware']}, {info['duration_s']:.0f} s, "
          f"load average {info['load_average_at_start'][0]:.2f} -> "
          f"{info['load_average_at_end'][0]:.2f}")
    print(targets.table(res["targets"]))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
