"""Sessions for the mgpu book: tests, docs (the book), lint, i18n, bench, browser.

Every session provisions what it needs on a fresh machine: the right MXNet build (the ``gpu``
extra when ``nvidia-smi`` sees a GPU, else ``cpu``) and the Fashion-MNIST files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nox

nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "tests", "docs"]
nox.needs_version = ">=2024.3.2"

ROOT = Path(__file__).parent
DOCS = ROOT / "docs"
BUILD = DOCS / "_build"
PYTHON = "3.11"


def mxnet_extra() -> str:
    """``gpu`` when an NVIDIA GPU answers ``nvidia-smi``, otherwise ``cpu``."""
    if os.environ.get("MGPU_EXTRA") in ("cpu", "gpu"):
        return os.environ["MGPU_EXTRA"]
    smi = shutil.which("nvidia-smi")
    if smi and subprocess.run([smi, "-L"], capture_output=True).returncode == 0:
        return "gpu"
    return "cpu"


def install(session: nox.Session, *extras: str) -> None:
    session.install("-e", f".[{','.join([mxnet_extra(), *extras])}]")


PROBE = """
import mgpu.data as d
try:
    d.find_data_dir(download={})
    print("DATA-OK")
except d.DataError as err:
    print(err)
"""


def ensure_data(session: nox.Session) -> None:
    """Make sure Fashion-MNIST is on disk: Debian's package via apt, else MXNet's download."""
    def found(download: bool) -> tuple[bool, str]:
        out = session.run("python", "-c", PROBE.format(download), silent=True)
        return "DATA-OK" in str(out), str(out).strip()

    if found(False)[0]:
        return
    apt = shutil.which("apt-get")
    if apt and os.geteuid() == 0:
        session.log("Fashion-MNIST not found: installing Debian's dataset-fashion-mnist")
        cmd = [apt, "install", "-y", "-q", "dataset-fashion-mnist"]
        if subprocess.run(cmd).returncode != 0:  # a fresh machine needs its package lists
            subprocess.run([apt, "update", "-q"])
            subprocess.run(cmd)
    ok, message = found(True)
    if not ok:
        session.error(
            f"Fashion-MNIST is not available and could not be installed or downloaded.\n{message}"
            "\nInstall it with 'apt-get install dataset-fashion-mnist' (as root), or put the four "
            "IDX files in a directory and set MGPU_DATA_DIR to it."
        )


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Unit tests and doctests (pytest --doctest-modules). Extra arguments go to pytest."""
    install(session, "test")
    ensure_data(session)
    session.run("pytest", *session.posargs, env={"MGPU_REQUIRE_DATA": "1"})


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """Ruff over the package, the tests, the docs' Python and this file."""
    session.install("ruff>=0.5")
    session.run("ruff", "check", "src", "tests", "bench", "docs/conf.py", "docs/_ext",
                "docs/check_translations.py", "noxfile.py")


def sphinx(session: nox.Session, language: str, outdir: Path, *extra: str) -> None:
    session.run(
        "sphinx-build", "-b", "html", "-W", "--keep-going", "-n",
        "-D", f"language={language}", str(DOCS), str(outdir), *extra,
    )


def update_catalogs(session: nox.Session) -> None:
    """Extract the English messages (.pot) and merge them into the Chinese catalogs (.po)."""
    pot = BUILD / "gettext"
    # From the execution cache (filled by the English build; executed here if it is empty): the
    # captions of glued figures exist only when the notebook's glue data does.
    session.run(
        "sphinx-build", "-b", "gettext", "-q", "-D", "nb_execution_mode=cache",
        str(DOCS), str(pot),
    )
    session.run("sphinx-intl", "update", "-p", str(pot), "-l", "zh_CN", "-d",
                str(DOCS / "locales"), "-w", "100", silent=True)


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the book in English and Chinese (executing every chapter once).

    ``-- --open`` opens it in a browser. ``-- --en`` builds the English edition only.
    """
    import time

    open_it = "--open" in session.posargs
    install(session, "docs")
    ensure_data(session)
    timings = {}
    start = time.perf_counter()
    sphinx(session, "en", BUILD / "html" / "en")
    timings["en"] = time.perf_counter() - start
    if "--en" not in session.posargs:
        start = time.perf_counter()
        update_catalogs(session)
        session.run("python", str(DOCS / "check_translations.py"))
        # Same sources, same execution cache: the Chinese build runs no notebook again.
        sphinx(session, "zh_CN", BUILD / "html" / "zh_CN")
        timings["zh_CN"] = time.perf_counter() - start
    shutil.copyfile(DOCS / "_root" / "index.html", BUILD / "html" / "index.html")
    (BUILD / "html" / ".nojekyll").touch()
    session.log("build times: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    index = BUILD / "html" / "index.html"
    session.log(f"The book: {index}")
    if open_it:
        import webbrowser

        if not webbrowser.open(index.as_uri()):
            session.log(f"No browser found here: open {index} yourself.")


@nox.session(python=PYTHON)
def i18n(session: nox.Session) -> None:
    """Regenerate the .pot catalogs and merge them into docs/locales/zh_CN (no execution)."""
    install(session, "docs")
    update_catalogs(session)
    session.run("python", str(DOCS / "check_translations.py"), success_codes=[0, 1])


@nox.session(python=PYTHON)
def browser(session: nox.Session) -> None:
    """Test the built site (run `nox -s docs` first) in headless Chromium, served on 127.0.0.1."""
    if not (BUILD / "html" / "zh_CN" / "index.html").is_file():
        session.error("no built site in docs/_build/html: run 'nox -s docs' first")
    chromium = os.environ.get("MGPU_CHROMIUM", "/usr/bin/chromium")
    apt = shutil.which("apt-get")
    if not Path(chromium).is_file() and apt and os.geteuid() == 0:
        session.log("installing Debian's chromium (Playwright's own browser download is not used)")
        cmd = [apt, "install", "-y", "-q", "chromium", "fonts-noto-cjk"]
        if subprocess.run(cmd).returncode != 0:  # a fresh machine needs its package lists
            subprocess.run([apt, "update", "-q"])
            subprocess.run(cmd)
    if not Path(chromium).is_file():
        session.error(f"Chromium not found at {chromium}: apt-get install chromium, "
                      "or set MGPU_CHROMIUM to a Chromium binary")
    install(session, "browser")
    session.run("pytest", "-m", "browser", "tests/browser", "-q", *session.posargs)
    session.log(f"screenshots: {BUILD / 'screenshots'}")


@nox.session(python=False)
def clean(session: nox.Session) -> None:
    """Remove the built book and its execution cache (the next docs build re-runs everything)."""
    shutil.rmtree(BUILD, ignore_errors=True)
    session.log(f"removed {BUILD}")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks: writes bench/results.json and bench/*.png. ``-- --quick`` for a short run."""
    install(session, "plot")
    ensure_data(session)
    session.run("python", "bench/run.py", *session.posargs)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run this file with nox: nox -s docs")
