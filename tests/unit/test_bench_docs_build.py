"""The docs_build benchmark part: its edits change what they should; its targets read it."""

import sys
from pathlib import Path

import pytest

from bench import docs_build, targets
from tools import catalogs, horovod_wheel, stamps
from tools.stamps import digest, record

PAGE = """---
kernelspec:
  name: python3
---

# A chapter

First paragraph of prose,
on two lines.

```{code-cell} ipython3
x = 1
```
"""


def test_edit_prose_changes_only_the_first_paragraph(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    line = docs_build.edit_prose(page)
    assert line == "First paragraph of prose, (edited)"
    text = page.read_text()
    assert text.replace(" (edited)", "") == PAGE
    assert "x = 1\n```" in text


def test_edit_code_appends_to_the_first_code_cell(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    statement = docs_build.edit_code(page)
    assert f"x = 1\n{statement}\n```" in page.read_text()


def test_the_edited_page_exists_and_has_prose_and_code():
    page = Path(docs_build.ROOT) / "docs" / f"{docs_build.EDITED_PAGE}.md"
    text = page.read_text()
    assert "```{code-cell}" in text


def test_executions_are_read_from_the_log():
    log = ("/x/docs/heterogeneous.md: Executing notebook using local CWD [mystnb]\n"
           "/x/docs/cost-model.md: Executing notebook using local CWD [mystnb]\n")
    assert sorted(docs_build.EXECUTING.findall(log)) == ["cost-model", "heterogeneous"]


def test_skipped_steps_are_read_from_the_log():
    log = ("nox > .[cpu,docs]: installed already (pyproject.toml and constraints.txt unchanged)\n"
           "nox > catalogs: no page, catalog or conf changed since the last extraction, not "
           "extracted again\n")
    assert docs_build.skipped(log) == ["install", "catalog_extraction"]
    assert docs_build.skipped("nox > uv pip install -c constraints.txt -e '.[cpu,docs]'\n") == []


@pytest.mark.parametrize("executed, met", [([], True), (["heterogeneous"], False)])
def test_prose_edit_target(executed, met):
    results = {"docs_build": {"prose_edit_executed": len(executed)}}
    (row,) = [r for r in targets.evaluate(results) if r["id"] == "docs_prose_edit"]
    assert row["met"] is met


def test_the_skip_messages_are_those_the_docs_session_logs(tmp_path):
    """The steps skipped, run for real on temporary files, log what docs_build looks for."""
    log: list[str] = []
    sources = [tmp_path / "pyproject.toml", tmp_path / "constraints.txt"]
    for source in sources:
        source.write_text("")
    stamp = tmp_path / "venv" / "mgpu-install.sha256"
    for _ in range(2):  # installs, then says it is installed already
        stamps.install_once(stamp, ".[cpu,docs]", sources, lambda: None, log.append)
    record(tmp_path / "venv" / "mgpu-horovod.sha256", digest(horovod_wheel.HOROVOD, stamp))
    horovod_wheel.ensure_horovod(sys.executable, tmp_path / "venv", stamp, log=log.append,
                                 apt=None, prepare=list, install=print)
    docs, build = tmp_path / "docs", tmp_path / "build"
    docs.mkdir()
    (build / "gettext").mkdir(parents=True)
    for _ in range(2):  # extracts, then says nothing changed
        catalogs.update_catalogs(docs, build, sources[1], lambda *a, **k: None, log.append,
                                 force=False)
    assert len(log) == 3
    assert docs_build.skipped("\n".join(f"nox > {line}" for line in log)) == list(
        docs_build.SKIPPED)


def test_the_warm_figure_is_the_median_run():
    runs = [{"wall_s": 20.0, "n": 1}, {"wall_s": 12.0, "n": 2}, {"wall_s": 13.0, "n": 3}]
    assert docs_build.median_run(runs)["n"] == 3
    assert docs_build.median_run(runs[:2])["n"] == 2  # the lower middle of an even number
