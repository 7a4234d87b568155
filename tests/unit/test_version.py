"""One version, in pyproject.toml: the package reports it as installed."""

from __future__ import annotations

import re
from pathlib import Path

import mgpu

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"


def test_version_is_pyprojects():
    # tomllib needs Python 3.11; the [project] table's version line is enough here.
    found = re.search(r'^version = "([^"]+)"$', PYPROJECT.read_text("utf-8"), re.MULTILINE)
    assert found is not None, "no version in pyproject.toml"
    assert mgpu.__version__ == found.group(1)
