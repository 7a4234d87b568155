"""tools/horovod_wheel.py: the check done once per install, the wheel build and its failure (with
a fake interpreter: the real build takes minutes, tests/cluster/test_horovod.py uses its result)."""

import os
import stat
import sys

import pytest

from tools import horovod_wheel
from tools.stamps import digest
from tools.system import SetupError

# A fake interpreter for `python -m pip wheel ... -w DIR horovod==...`: prints a build log and
# writes a wheel into DIR, or fails with FAIL set.
FAKE_PYTHON = """#!/bin/sh
for arg; do [ "$prev" = "-w" ] && out="$arg"; prev="$arg"; done
echo "building $HOROVOD_WITH_MXNET $HOROVOD_CPU_OPERATIONS"
[ -n "$FAIL" ] && { echo "error: no compiler"; exit 1; }
touch "$out/horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
"""


@pytest.fixture
def python(tmp_path):
    script = tmp_path / "python"
    script.write_text(FAKE_PYTHON)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_build_wheel(tmp_path, python):
    cache = tmp_path / "wheels" / "horovod-0.28.1-mxnet"
    wheel = horovod_wheel.build_wheel(python, cache, env={"PATH": os.environ["PATH"]})
    assert wheel == cache / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
    assert (cache / "build.log").read_text() == "building 1 gloo\n"  # Horovod's build settings


def test_a_failed_build_shows_the_end_of_its_log(tmp_path, python):
    with pytest.raises(SetupError, match=r"(?s)failed \(exit code 1\).*error: no compiler"):
        horovod_wheel.build_wheel(python, tmp_path / "wheels",
                                  env={"PATH": os.environ["PATH"], "FAIL": "1"})


def test_checked_once_per_install(tmp_path):
    venv, log, steps = tmp_path / "venv", [], []
    venv.mkdir()
    install_stamp = venv / "mgpu-install.sha256"
    install_stamp.write_text("the install")

    def ensure():
        horovod_wheel.ensure_horovod(
            sys.executable, venv, install_stamp, log=log.append, apt=None,
            prepare=lambda: steps.append("prepare"), install=lambda *a: steps.append(a))

    (venv / "mgpu-horovod.sha256").write_text(digest(horovod_wheel.HOROVOD, install_stamp))
    ensure()
    assert steps == []
    assert log == [f"{horovod_wheel.HOROVOD}: checked in this venv since its last install, "
                   "not rebuilt"]


def test_missing_build_tools_are_named_with_their_packages(monkeypatch):
    monkeypatch.setenv("PATH", "")
    assert horovod_wheel.missing_tools() == ["g++", "make"]
    with pytest.raises(SetupError, match="needs g\\+\\+, make.*'apt-get install g\\+\\+ make'"):
        horovod_wheel.ensure_build_tools(print, None)
