"""This machine: the MXNet build that fits it, and what the sessions install from Debian.

Everything installed from Debian goes through :func:`apt_install`, and only as root
(:func:`root_apt`): the Fashion-MNIST package, CJK fonts, iproute2 and openssh-server (the
emulated hosts), Chromium. Without root
the sessions say what to install instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = ["CJK_FONTS", "DATA_PROBE", "Log", "SetupError", "apt_install", "ensure_chromium",
           "ensure_cjk_fonts", "ensure_data", "ensure_iproute2", "ensure_sshd", "has_cjk_font",
           "mxnet_extra", "root_apt"]

#: What the steps report with: nox's ``session.log``.
Log = Callable[[str], object]


class SetupError(RuntimeError):
    """What a session needs is missing and could not be installed; the message says what to do."""


def mxnet_extra(env: Mapping[str, str] = os.environ) -> str:
    """``gpu`` when an NVIDIA GPU answers ``nvidia-smi``, otherwise ``cpu``.

    ``MGPU_EXTRA`` (``cpu`` or ``gpu``) in ``env`` decides instead.

    >>> mxnet_extra({"MGPU_EXTRA": "gpu"})
    'gpu'
    """
    if env.get("MGPU_EXTRA") in ("cpu", "gpu"):
        return env["MGPU_EXTRA"]
    smi = shutil.which("nvidia-smi")
    if smi and subprocess.run([smi, "-L"], capture_output=True).returncode == 0:
        return "gpu"
    return "cpu"


def root_apt() -> str | None:
    """The path of ``apt-get`` when it is there and this process runs as root, else ``None``."""
    apt = shutil.which("apt-get")
    return apt if apt and os.geteuid() == 0 else None


def apt_install(apt: str, packages: Sequence[str], *, recommends: bool = True,
                run: Callable[[list[str]], subprocess.CompletedProcess] = subprocess.run) -> bool:
    """``apt install -y -q packages``; on failure refresh the package lists and try once more.

    ``recommends=False`` adds ``--no-install-recommends``. Returns whether the last try
    succeeded.
    """
    cmd = [apt, "install", "-y", "-q", *([] if recommends else ["--no-install-recommends"]),
           *packages]
    if run(cmd).returncode == 0:
        return True
    run([apt, "update", "-q"])  # a fresh machine needs its package lists
    return run(cmd).returncode == 0


DATA_PROBE = """
import mgpu.data as d
try:
    d.find_data_dir(download={})
    print("DATA-OK")
except d.DataError as err:
    print(err)
"""


def ensure_data(run: Callable[..., object], log: Log, apt: str | None) -> None:
    """Make sure Fashion-MNIST is on disk: Debian's package via ``apt``, else MXNet's download.

    ``run(*command, silent=True)`` runs a command in the session's venv and returns its output
    (nox's ``session.run``); ``apt`` is :func:`root_apt`'s answer. Raises :class:`SetupError`
    when neither way gives the files.
    """
    def found(download: bool) -> tuple[bool, str]:
        out = run("python", "-c", DATA_PROBE.format(download), silent=True)
        return "DATA-OK" in str(out), str(out).strip()

    if found(False)[0]:
        return
    if apt:
        log("Fashion-MNIST not found: installing Debian's dataset-fashion-mnist")
        apt_install(apt, ["dataset-fashion-mnist"])
    ok, message = found(True)
    if not ok:
        raise SetupError(
            f"Fashion-MNIST is not available and could not be installed or downloaded.\n{message}"
            "\nInstall it with 'apt-get install dataset-fashion-mnist' (as root), or put the four "
            "IDX files in a directory and set MGPU_DATA_DIR to it."
        )


#: Debian's CJK fonts, and the family each provides: Noto Sans CJK for the pages and figures,
#: WenQuanYi Micro Hei for the PDF (TrueType outlines, which Chromium embeds as a font; it draws
#: Noto's CFF outlines as Type 3 glyphs, see docs/_static/mgpu-book.css).
CJK_FONTS = {"fonts-noto-cjk": "Noto Sans CJK", "fonts-wqy-microhei": "WenQuanYi Micro Hei"}


def has_cjk_font(family: str = "CJK") -> bool:
    """Whether fontconfig (``fc-list``) knows a font for Chinese whose name holds ``family``."""
    fc_list = shutil.which("fc-list")
    return bool(fc_list) and family in subprocess.run(
        [fc_list, ":lang=zh"], capture_output=True, text=True).stdout


def ensure_cjk_fonts(log: Log, apt: str | None) -> None:
    """Debian's :data:`CJK_FONTS` that are missing, for the Chinese figures, pages and PDF,
    installed on their own as root."""
    missing = [package for package, family in CJK_FONTS.items() if not has_cjk_font(family)]
    if not missing:
        return
    if apt:
        log(f"installing Debian's {' '.join(missing)} (Chinese figures, pages and PDF)")
        apt_install(apt, missing, recommends=False)
    else:
        log(f"Chinese fonts missing: install {' '.join(missing)} (Debian) for the Chinese "
            "edition")


def ensure_iproute2(log: Log, apt: str | None,
                    which: Callable[[str], str | None] = shutil.which) -> None:
    """Debian's iproute2 (``ip``, ``tc``), for the emulated hosts (:mod:`mgpu.cluster.hosts`)
    that the tests and the chapters make; installed as root only (it starts no service)."""
    if which("ip") and which("tc"):
        return
    if not apt:
        log("iproute2 is not installed: no emulated hosts (their tests are skipped, the "
            "chapters measure on loopback); apt-get install iproute2")
        return
    log("installing Debian's iproute2 (ip and tc, for the emulated hosts)")
    apt_install(apt, ["iproute2"], recommends=False)


def ensure_sshd(log: Log, apt: str | None, sshd: Path = Path("/usr/sbin/sshd"),
                policy: Path = Path("/usr/sbin/policy-rc.d")) -> None:
    """Debian's openssh-server, for tests/cluster/test_mxlaunch.py (which starts its own sshd)
    and the emulated hosts of the tests and chapters (:mod:`mgpu.cluster.hosts`: an sshd in
    each host).

    Installed only as root, and only where Debian's ``policy`` (policy-rc.d) forbids starting
    services, so that installing the package does not start the system's sshd; elsewhere those
    tests are skipped.
    """
    if sshd.is_file():
        return
    if not (apt and policy.is_file()
            and subprocess.run([str(policy), "ssh", "start"]).returncode == 101):
        log("openssh-server is not installed: the ssh tests of tests/cluster/test_mxlaunch.py "
            "and the emulated hosts' tests will be skipped, and the chapters measure on "
            "loopback (apt-get install openssh-server)")
        return
    apt_install(apt, ["openssh-server"], recommends=False)


def ensure_chromium(chromium: Path, log: Log, apt: str | None) -> None:
    """Debian's chromium at ``chromium`` if it is missing (Playwright's own download is not used).

    Installed as root only (``apt``); the caller checks that ``chromium`` is there afterwards.
    """
    if not chromium.is_file() and apt:
        log("installing Debian's chromium (Playwright's own browser download is not used)")
        apt_install(apt, ["chromium"])
