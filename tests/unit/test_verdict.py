"""The ``{verdict}`` directive (docs/_ext/mgpu_verdict.py) in a small Sphinx project.

The page is a notebook whose outputs already hold the glue data that ``mgpu.verdict`` writes, so
nothing is executed: the tests build it with Sphinx and read what the page shows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EXT = Path(__file__).parents[2] / "docs" / "_ext"

CONF = f"""
import sys
sys.path.insert(0, {str(EXT)!r})
extensions = ["mgpu_verdict", "myst_nb"]
myst_enable_extensions = ["colon_fence"]
nb_execution_mode = "off"
root_doc = "page"
locale_dirs = ["locales/"]
gettext_compact = False
"""

PAGE = """# Page

::::{verdict} big
:::{case} true
The value was big.
:::
:::{case} false
The value was small.
:::
::::

:::::{verdict} trend
::::{case} faster
It got faster.
::::
::::{case} slower same
It did not get faster.
::::
:::::
"""


def notebook(markdown: str, glued: dict[str, str]) -> dict:
    """A notebook of one Markdown cell and one code cell whose outputs glue ``glued``."""
    outputs = [{"output_type": "display_data", "data": {"text/plain": repr(value)},
                "metadata": {"scrapbook": {"name": key, "mime_prefix": ""}}}
               for key, value in glued.items()]
    return {
        "cells": [
            {"cell_type": "code", "execution_count": 1, "metadata": {"tags": ["remove-cell"]},
             "outputs": outputs, "source": "mgpu.verdict(...)"},
            {"cell_type": "markdown", "metadata": {}, "source": markdown},
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                    "language": "python"},
                     "language_info": {"name": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }


def build(tmp_path: Path, glued: dict[str, str], builder: str = "html",
          markdown: str = PAGE, language: str = "en") -> subprocess.CompletedProcess:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "conf.py").write_text(CONF)
    (src / "page.ipynb").write_text(json.dumps(notebook(markdown, glued)))
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", builder, "-W", "-q", "-D",
         f"language={language}", str(src), str(tmp_path / builder)],
        capture_output=True, text=True)


def shown(tmp_path: Path) -> str:
    return (tmp_path / "html" / "page.html").read_text(encoding="utf-8")


def test_the_outcome_chooses_the_sentence(tmp_path):
    result = build(tmp_path, {"big": "true", "trend": "same"})
    assert result.returncode == 0, result.stderr
    page = shown(tmp_path)
    assert "The value was big." in page and "It did not get faster." in page
    assert "The value was small." not in page and "It got faster." not in page


def test_the_other_outcome_chooses_the_other_sentence(tmp_path):
    assert build(tmp_path, {"big": "false", "trend": "faster"}).returncode == 0
    page = shown(tmp_path)
    assert "The value was small." in page and "It got faster." in page
    assert "The value was big." not in page and "It did not get faster." not in page


def test_an_outcome_without_a_case_fails_the_build_naming_it(tmp_path):
    result = build(tmp_path, {"big": "true", "trend": "sideways"})
    assert result.returncode != 0
    assert "verdict 'trend'" in result.stderr and "'sideways'" in result.stderr
    assert "faster, same, slower" in result.stderr


def test_a_verdict_nobody_glued_fails_the_build(tmp_path):
    result = build(tmp_path, {"big": "true"})
    assert result.returncode != 0
    assert "verdict 'trend'" in result.stderr and "nothing was glued" in result.stderr


def test_a_verdict_needs_cases_only(tmp_path):
    markdown = "::::{verdict} x\nA stray paragraph.\n:::{case} true\nYes.\n:::\n::::\n"
    result = build(tmp_path, {"x": "true"}, markdown=markdown)
    assert result.returncode != 0
    assert "two or more {case} directives and nothing else" in result.stderr


def test_the_role_chooses_words_inside_a_table_cell(tmp_path):
    table = ("| target | outcome |\n|---|---|\n"
             "| speed | {verdict}`big; true: met; false: not met` |\n")
    result = build(tmp_path, {"big": "false"}, markdown=table)
    assert result.returncode == 0, result.stderr
    page = shown(tmp_path)
    assert "<td><p>not met</p></td>" in page.replace("\n", "")
    assert ">met<" not in page


def test_a_malformed_role_fails_the_build(tmp_path):
    result = build(tmp_path, {"big": "true"}, markdown="It {verdict}`big; true met` here.\n")
    assert result.returncode != 0
    assert "verdict 'big'" in result.stderr and "not of that form" in result.stderr


def test_the_catalog_gets_every_case(tmp_path):
    """The gettext builder keeps all cases, so the Chinese edition translates each sentence."""
    result = build(tmp_path, {"big": "true", "trend": "faster"}, builder="gettext")
    assert result.returncode == 0, result.stderr
    pot = (tmp_path / "gettext" / "page.pot").read_text(encoding="utf-8")
    for sentence in ("The value was big.", "The value was small.", "It got faster.",
                     "It did not get faster."):
        assert f'msgid "{sentence}"' in pot


def test_the_chinese_edition_shows_the_translated_case(tmp_path):
    messages = tmp_path / "src" / "locales" / "zh_CN" / "LC_MESSAGES"
    messages.mkdir(parents=True)
    (messages / "page.po").write_text(
        'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
        'msgid "The value was small."\nmsgstr "这个值很小。"\n\n'
        'msgid "It got faster."\nmsgstr "它变快了。"\n', encoding="utf-8")
    result = build(tmp_path, {"big": "false", "trend": "faster"}, language="zh_CN")
    assert result.returncode == 0, result.stderr
    page = shown(tmp_path)
    assert "这个值很小。" in page and "它变快了。" in page
    assert "The value was big." not in page
