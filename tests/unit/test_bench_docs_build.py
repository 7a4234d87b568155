"""The docs_build benchmark part: its edits change what they should; its targets read it."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: package bench
from bench import docs_build, targets  # noqa: E402

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


def test_the_skip_messages_are_those_of_the_noxfile():
    noxfile = (Path(docs_build.ROOT) / "noxfile.py").read_text()
    for step, said in docs_build.SKIPPED.items():
        assert said.search(noxfile), step


def test_the_warm_figure_is_the_median_run():
    runs = [{"wall_s": 20.0, "n": 1}, {"wall_s": 12.0, "n": 2}, {"wall_s": 13.0, "n": 3}]
    assert docs_build.median_run(runs)["n"] == 3
    assert docs_build.median_run(runs[:2])["n"] == 2  # the lower middle of an even number
