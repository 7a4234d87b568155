"""tools/stamps.py: one digest, and steps done once per state of what they depend on."""

import hashlib
import importlib
from pathlib import Path

from tools.stamps import digest, install_once, record, unchanged


def test_digest_covers_strings_bytes_and_files(tmp_path):
    f = tmp_path / "pyproject.toml"
    f.write_text("a")
    before = digest(".[cpu,docs]", f)
    assert digest(".[cpu,docs]", f) == before
    assert digest(".[cpu,test]", f) != before
    f.write_text("b")
    assert digest(".[cpu,docs]", f) != before
    f.unlink()
    assert digest(".[cpu,docs]", f) == digest(".[cpu,docs]", f"missing {f}")


def test_digest_separates_its_parts():
    assert digest("ab", "c") != digest("a", "bc")
    assert digest("a", b"b") == digest(b"a", "b")
    # The encoding the stamps in existing venvs were written with: an unchanged venv is not
    # reinstalled.
    assert digest("x", b"y") == hashlib.sha256(b"x\0y\0").hexdigest()


def test_stamps(tmp_path):
    stamp = tmp_path / "new" / "step.sha256"
    assert not unchanged(stamp, "d1")
    record(stamp, "d1")
    assert unchanged(stamp, "d1") and not unchanged(stamp, "d2")


def test_install_once(tmp_path):
    pyproject, lock = tmp_path / "pyproject.toml", tmp_path / "constraints.txt"
    pyproject.write_text("[project]")
    lock.write_text("numpy==1.23.5")
    stamp, installs, log = tmp_path / "venv" / "mgpu-install.sha256", [], []

    def once(spec: str) -> bool:
        return install_once(stamp, spec, (pyproject, lock), lambda: installs.append(spec),
                            log.append)

    assert once(".[cpu,docs]") and installs == [".[cpu,docs]"] and log == []
    assert not once(".[cpu,docs]") and len(installs) == 1
    assert log == [".[cpu,docs]: installed already (pyproject.toml and constraints.txt "
                   "unchanged)"]
    lock.write_text("numpy==1.23.4")
    assert once(".[cpu,docs]") and len(installs) == 2
    assert once(".[cpu,test]") and len(installs) == 3


def test_the_books_cache_uses_the_same_digest(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "docs" / "_ext"))
    assert importlib.import_module("mgpu_book").digest is digest
