"""Horovod for MXNet with Gloo, built from source into a venv once, then reused.

pip cannot build it unaided: Horovod compiles against the installed MXNet, which needs
``HOROVOD_WITH_MXNET=1`` and ``--no-build-isolation``. The wheel is built once per Horovod,
MXNet and Python version and kept in ``~/.cache/mgpu/wheels`` (or ``$MGPU_WHEEL_CACHE``), so
that the other sessions' venvs install it in seconds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from tools.stamps import digest, record, unchanged
from tools.system import Log, SetupError, apt_install

__all__ = ["BUILD_ENV", "HOROVOD", "TOOLS", "build_wheel", "ensure_build_tools",
           "ensure_horovod", "missing_tools", "wheel_cache", "works"]

HOROVOD = "horovod==0.28.1"
# Horovod built for MXNet with Gloo as its only transport: no MPI, no TensorFlow, no PyTorch.
BUILD_ENV = {
    "HOROVOD_WITH_MXNET": "1", "HOROVOD_WITH_GLOO": "1", "HOROVOD_WITHOUT_MPI": "1",
    "HOROVOD_WITHOUT_TENSORFLOW": "1", "HOROVOD_WITHOUT_PYTORCH": "1",
    "HOROVOD_CPU_OPERATIONS": "gloo", "MAKEFLAGS": f"-j{os.cpu_count() or 2}",
}
# What the build needs besides the pip extra `horovod` (which brings cmake): tool -> Debian package.
TOOLS = {"g++": "g++", "make": "make"}
# Horovod's MXNet extension loads, and it has Gloo.
PROBE = "import horovod.mxnet as h, sys; sys.exit(not h.gloo_built())"
TAG = ("import mxnet, sys, sysconfig; print(f'mxnet-{mxnet.__version__}-py"
       "{sys.version_info[0]}{sys.version_info[1]}-{sysconfig.get_platform()}')")


def works(python: str) -> bool:
    """Whether ``python`` imports Horovod's MXNet extension, built with Gloo."""
    return subprocess.run([python, "-c", PROBE], capture_output=True).returncode == 0


def wheel_cache(python: str, env: Mapping[str, str] = os.environ) -> Path:
    """The folder of the wheel for ``python``'s MXNet and Python version and this platform."""
    tag = subprocess.run([python, "-c", TAG], capture_output=True, text=True,
                         check=True).stdout.strip()
    cache = Path(env.get("MGPU_WHEEL_CACHE", Path.home() / ".cache" / "mgpu" / "wheels"))
    return cache / f"{HOROVOD.replace('==', '-')}-{tag}"


def missing_tools() -> list[str]:
    """The build tools of :data:`TOOLS` that are not on the ``PATH``."""
    return [tool for tool in TOOLS if not shutil.which(tool)]


def ensure_build_tools(log: Log, apt: str | None) -> None:
    """Install the missing build tools from Debian as root (``apt``), or raise
    :class:`~tools.system.SetupError` naming them and their packages."""
    missing = missing_tools()
    if missing and apt:
        packages = [TOOLS[tool] for tool in missing]
        log(f"building Horovod needs {', '.join(missing)}: apt-get install {packages}")
        apt_install(apt, packages)
        missing = missing_tools()
    if missing:
        packages = " ".join(TOOLS[tool] for tool in missing)
        raise SetupError(f"{HOROVOD} is compiled from source here and needs {', '.join(missing)}, "
                         f"which is not installed: install it with 'apt-get install {packages}' "
                         "(Debian), then run this session again")


def build_wheel(python: str, cache: Path, env: Mapping[str, str] = os.environ) -> Path:
    """Build :data:`HOROVOD`'s wheel with ``python`` into ``cache`` (its log: ``build.log``).

    Raises :class:`~tools.system.SetupError` with the end of the log when no wheel comes out.
    """
    cache.mkdir(parents=True, exist_ok=True)
    log = cache / "build.log"
    with log.open("w") as out:
        built = subprocess.run(
            [python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir",
             "-w", str(cache), HOROVOD], stdout=out, stderr=subprocess.STDOUT,
            env={**env, **BUILD_ENV})
    wheels = sorted(cache.glob("horovod-*.whl"))
    if built.returncode != 0 or not wheels:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise SetupError(f"building {HOROVOD} failed (exit code {built.returncode}); the end of "
                         f"its log ({log}):\n{tail}\nHorovod needs a C++ compiler (Debian: g++), "
                         "make and CMake 3.13 or newer (installed by the pip extra 'horovod'), "
                         "and the MXNet wheel's headers")
    return wheels[-1]


def ensure_horovod(python: str, venv: Path, install_stamp: Path, *,
                   prepare: Callable[[], object], install: Callable[..., object], log: Log,
                   apt: str | None) -> None:
    """Build Horovod (MXNet + Gloo) into the venv ``venv`` of ``python`` once, or reuse it.

    Skipped when the venv was checked since its last install (``install_stamp``'s contents) or
    ``import horovod.mxnet`` already works. Otherwise ``prepare()`` installs the build's
    requirements (the extra ``horovod``, pip), and ``install(*pip_args)`` installs the wheel
    cached earlier, or the one built now. Raises :class:`~tools.system.SetupError` naming the
    missing tool and its Debian package, or with the end of the build log.
    """
    # Checked once per install of the venv: the stamp holds the install stamp it was checked with.
    checked = venv / "mgpu-horovod.sha256"
    installed = digest(HOROVOD, install_stamp)
    if unchanged(checked, installed):
        log(f"{HOROVOD}: checked in this venv since its last install, not rebuilt")
        return
    if works(python):
        log(f"{HOROVOD}: already in this venv, not rebuilt")
        record(checked, installed)
        return
    start = time.perf_counter()
    prepare()
    cache = wheel_cache(python)
    for wheel in sorted(cache.glob("horovod-*.whl")):
        install("--no-deps", "--force-reinstall", str(wheel))
        if works(python):
            log(f"{HOROVOD}: installed the wheel built earlier ({wheel}) in "
                f"{time.perf_counter() - start:.0f} s")
            record(checked, installed)
            return
        wheel.unlink()  # a wheel that does not import is rebuilt
    ensure_build_tools(log, apt)
    log(f"building {HOROVOD} for MXNet with Gloo (a few minutes, once; log in {cache})")
    install("--no-deps", "--force-reinstall", str(build_wheel(python, cache)))
    if not works(python):
        check = subprocess.run([python, "-c", "import horovod.mxnet"], capture_output=True,
                               text=True)
        raise SetupError(f"{HOROVOD} was built but 'import horovod.mxnet' fails:\n{check.stderr}")
    record(checked, installed)
    log(f"{HOROVOD}: built and installed in {time.perf_counter() - start:.0f} s")
