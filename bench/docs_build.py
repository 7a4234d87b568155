"""How long the book takes to build, cold and warm, and what an edit makes it execute again.

In a fresh clone of the repository (its committed ``HEAD``, in a temporary directory), four runs
of ``nox -s docs``, one after the other:

1. **cold**: a new virtual environment and an empty execution cache: installs, executes every
   chapter, builds both editions;
2. **warm**: the same command again, nothing changed, :data:`WARM_REPEATS` times (the median
   run is reported, with the others' wall times);
3. **prose edit**: one paragraph of one chapter changed (English edition only, since a changed
   English sentence has no translation yet): must execute no chapter;
4. **code edit**: one code cell of that chapter changed (English only): must execute that chapter
   and no other.

Each run records its wall time, the sphinx-build seconds of each edition (``nox -s docs`` logs
them), the chapters that MyST-NB executed (it logs ``Executing notebook`` for each) and the
steps the session skipped because nothing they depend on changed (install, Horovod check,
catalog extraction).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import HERE, log

ROOT = HERE.parent
#: The chapter whose prose and code the edit runs change.
EDITED_PAGE = "heterogeneous"
#: How many times the warm build is timed (the median run is reported).
WARM_REPEATS = 3
EXECUTING = re.compile(r"docs/([\w-]+)\.md: Executing notebook")
BUILD_TIMES = re.compile(r"build times: (.*)")
#: What the docs session logs when it skips a step because nothing it depends on changed.
SKIPPED = {"install": re.compile(r"installed already \("),
           "horovod_check": re.compile(r"checked in this venv since its last install"),
           "catalog_extraction": re.compile(r"catalogs: no page, catalog or conf changed")}


def skipped(log: str) -> list[str]:
    """The steps a ``nox -s docs`` log says it skipped (see :data:`SKIPPED`)."""
    return [step for step, said in SKIPPED.items() if said.search(log)]


class DocsBuildError(RuntimeError):
    """A ``nox -s docs`` run of this measurement failed."""


def nox_docs(clone: Path, *posargs: str) -> dict:
    """Run ``nox -s docs [-- posargs]`` in ``clone``; its wall time, build times and executions."""
    nox = shutil.which("nox")
    if nox is None:
        raise DocsBuildError("the docs_build part runs 'nox -s docs' and needs nox on the PATH: "
                             "pip install nox")
    cmd = [nox, "-s", "docs", *(["--", *posargs] if posargs else [])]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=clone, capture_output=True, text=True)
    wall = time.perf_counter() - start
    out = done.stdout + done.stderr
    if done.returncode != 0:
        tail = "\n".join(out.splitlines()[-30:])
        raise DocsBuildError(f"{' '.join(cmd)} failed in {clone} (exit {done.returncode}):\n{tail}")
    times = {}
    match = BUILD_TIMES.search(out)
    if match:
        for part in match.group(1).split(","):
            edition, seconds, _ = part.split()
            times[edition] = float(seconds)
    return {"wall_s": round(wall, 1), "sphinx_s": times,
            "outside_sphinx_s": round(wall - sum(times.values()), 1),
            "executed": sorted(set(EXECUTING.findall(out))), "skipped": skipped(out)}


def edit_prose(page: Path) -> str:
    """Add a word to the first paragraph after the page's title; return the edited line."""
    lines = page.read_text().splitlines(keepends=True)
    title = next(i for i, line in enumerate(lines) if line.startswith("# "))
    i = next(i for i in range(title + 1, len(lines))
             if lines[i].strip() and lines[i][0].isalpha())
    lines[i] = lines[i].rstrip("\n") + " (edited)\n"
    page.write_text("".join(lines))
    return lines[i].strip()


def edit_code(page: Path) -> str:
    """Add a statement at the end of the page's first code cell; return it."""
    text = page.read_text()
    start = text.index("```{code-cell}")
    end = text.index("\n```", start)
    statement = "edited_by_the_docs_build_benchmark = True"
    page.write_text(text[:end] + "\n" + statement + text[end:])
    return statement


def median_run(runs: list[dict]) -> dict:
    """The run of median wall time (the lower middle one of an even number).

    >>> median_run([{"wall_s": 20.0}, {"wall_s": 12.0}, {"wall_s": 13.0}])
    {'wall_s': 13.0}
    """
    return sorted(runs, key=lambda r: r["wall_s"])[(len(runs) - 1) // 2]


def run(cfg: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="mgpu-docs-build-") as tmp:
        clone = Path(tmp) / "book"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True,
                                text=True, check=True).stdout.strip()
        page = clone / "docs" / f"{EDITED_PAGE}.md"
        runs = {}
        for name, prepare, posargs in (
            ("cold", None, ()), *[("warm", None, ())] * WARM_REPEATS,
            ("prose_edit", edit_prose, ("--en",)), ("code_edit", edit_code, ("--en",)),
        ):
            change = prepare(page) if prepare else None
            log(f"  docs_build: {name} ...")
            measured = {**nox_docs(clone, *posargs), "change": change}
            log(f"  docs_build: {name}: {measured['wall_s']:.0f} s, executed "
                f"{measured['executed'] or 'nothing'}")
            if name == "warm":
                runs.setdefault("warm_repeats", []).append(measured)
            else:
                runs[name] = measured
        repeats = runs.pop("warm_repeats")
        runs["warm"] = {**median_run(repeats),
                        "repeats_wall_s": [r["wall_s"] for r in repeats]}
    chapters = len(runs["cold"]["executed"])
    return {
        "setup": {"what": "nox -s docs in a fresh clone of the committed HEAD",
                  "commit": commit, "edited_page": EDITED_PAGE,
                  "runs": f"cold (new venv, empty cache), warm (nothing changed; the median of "
                          f"{WARM_REPEATS} runs), then a prose edit and a code edit of the edited "
                          "page (English edition only)"},
        "runs": runs,
        "cold_s": runs["cold"]["wall_s"],
        "warm_s": runs["warm"]["wall_s"],
        "warm_sphinx_s": round(sum(runs["warm"]["sphinx_s"].values()), 1),
        "chapters_executed_cold": chapters,
        "prose_edit_executed": len(runs["prose_edit"]["executed"]),
        "code_edit_executed_page": int(EDITED_PAGE in runs["code_edit"]["executed"]),
        "code_edit_executed_others": len(set(runs["code_edit"]["executed"]) - {EDITED_PAGE}),
    }
