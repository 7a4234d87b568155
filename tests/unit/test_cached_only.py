"""The single-page editions that tools/pdf.py prints read the execution cache and run nothing.

A small project with one executed page, built with ``_ext/mgpu_book.py``'s
``mgpu_cached_only``: before any build it fails at once; after a normal build has filled the
cache it succeeds and shows the cached output; a page whose code changed is executed by MyST-NB
all the same, and the build fails saying so (every time: that execution is not kept); a
changed package fails it before anything runs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXT = Path(__file__).parents[2] / "docs" / "_ext"

CONF = f"""
import sys
from pathlib import Path
sys.path.insert(0, {str(EXT)!r})
extensions = ["mgpu_book", "myst_nb"]
source_suffix = {{".md": "myst-nb"}}
nb_execution_mode = "cache"
nb_execution_cache_path = str(Path(__file__).parent / "_build" / "_cache")
nb_execution_raise_on_error = True
mgpu_package_dir = "pkg"
"""
PAGE = """---
jupytext:
  text_representation:
    format_name: myst
kernelspec:
  name: python3
  display_name: Python 3
---
# Page

```{code-cell} ipython3
print(6 * 7)
```
"""


def build(src: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sphinx", "-q", "-b", "singlehtml",
                           "-d", str(out / ".doctrees"), *extra, str(src), str(out)],
                          capture_output=True, text=True, timeout=600)


def test_a_cached_only_build_runs_no_page(tmp_path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "module.py").write_text("X = 1\n")
    (src / "conf.py").write_text(CONF, encoding="utf-8")
    (src / "index.md").write_text(PAGE, encoding="utf-8")
    cached_only = ("-D", "mgpu_cached_only=1")

    never = build(src, tmp_path / "first", *cached_only)  # nothing was ever executed
    assert never.returncode != 0
    assert "not computed with this src/mgpu" in never.stderr

    filled = build(src, tmp_path / "html")  # a normal build executes and caches the page
    assert filled.returncode == 0, filled.stderr[-2000:]
    done = build(src, tmp_path / "second", *cached_only)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "42" in (tmp_path / "second" / "index.html").read_text("utf-8")

    # A page whose code changed has no cached execution: MyST-NB runs it, the build fails.
    (src / "index.md").write_text(PAGE.replace("6 * 7", "6 * 8"), encoding="utf-8")
    ran = build(src, tmp_path / "third", *cached_only)
    assert ran.returncode != 0
    assert "1 page(s) executed in a build that must only read the cache" in ran.stderr
    # Built again where the failed build wrote (its environment kept, as nox -s pdf does):
    # the execution was not kept, so the build fails again.
    again = build(src, tmp_path / "third", *cached_only)
    assert again.returncode != 0
    assert "1 page(s) executed in a build that must only read the cache" in again.stderr
    (src / "index.md").write_text(PAGE, encoding="utf-8")

    (src / "pkg" / "module.py").write_text("X = 2\n")  # the package changed: stale outputs
    stale = build(src, tmp_path / "fourth", *cached_only)
    assert stale.returncode != 0
    assert "not computed with this src/mgpu" in stale.stderr
