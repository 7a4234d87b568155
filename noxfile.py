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


FONT_PROBE = "import mgpu.diagrams as d; d.cjk_font(); print('FONT-OK')"


def ensure_cjk_font(session: nox.Session) -> None:
    """The Chinese edition's figures need a CJK font for matplotlib: Debian's fonts-noto-cjk."""
    if "FONT-OK" in str(session.run("python", "-c", FONT_PROBE, silent=True, success_codes=[0, 1])):
        return
    apt = shutil.which("apt-get")
    if apt and os.geteuid() == 0:
        session.log("no CJK font for the Chinese figures: installing Debian's fonts-noto-cjk")
        cmd = [apt, "install", "-y", "-q", "fonts-noto-cjk"]
        if subprocess.run(cmd).returncode != 0:  # a fresh machine needs its package lists
            subprocess.run([apt, "update", "-q"])
            subprocess.run(cmd)
    session.run("python", "-c", FONT_PROBE, silent=True)  # fails with FontError's advice


HOROVOD = "horovod==0.28.1"
# Horovod built for MXNet with Gloo as its only transport: no MPI, no TensorFlow, no PyTorch.
HOROVOD_BUILD_ENV = {
    "HOROVOD_WITH_MXNET": "1", "HOROVOD_WITH_GLOO": "1", "HOROVOD_WITHOUT_MPI": "1",
    "HOROVOD_WITHOUT_TENSORFLOW": "1", "HOROVOD_WITHOUT_PYTORCH": "1",
    "HOROVOD_CPU_OPERATIONS": "gloo", "MAKEFLAGS": f"-j{os.cpu_count() or 2}",
}
# What the build needs besides the pip extra `horovod` (which brings cmake): tool -> Debian package.
HOROVOD_TOOLS = {"g++": "g++", "make": "make"}


def ensure_horovod(session: nox.Session) -> None:
    """Build Horovod (MXNet + Gloo) into this session's venv once, or reuse it.

    Skipped when ``import horovod.mxnet`` already works in the venv. Otherwise the wheel is built
    once per Horovod, MXNet and Python version and kept in ``~/.cache/mgpu/wheels`` (or
    ``$MGPU_WHEEL_CACHE``), so that the other sessions' venvs install it in seconds. Fails with a
    message naming the missing tool and its Debian package, or the end of the build log.
    """
    import time

    python = str(Path(session.bin) / "python")

    def works() -> bool:  # Horovod's MXNet extension loads, and it has Gloo
        probe = "import horovod.mxnet as h, sys; sys.exit(not h.gloo_built())"
        return subprocess.run([python, "-c", probe], capture_output=True).returncode == 0

    if works():
        session.log(f"{HOROVOD}: already in this venv, not rebuilt")
        return
    start = time.perf_counter()
    session.install("-e", f".[{mxnet_extra()},horovod]")
    tag = subprocess.run(
        [python, "-c", "import mxnet, sys, sysconfig; print(f'mxnet-{mxnet.__version__}-py"
         "{sys.version_info[0]}{sys.version_info[1]}-{sysconfig.get_platform()}')"],
        capture_output=True, text=True, check=True).stdout.strip()
    cache = Path(os.environ.get("MGPU_WHEEL_CACHE", Path.home() / ".cache" / "mgpu" / "wheels"))
    cache = cache / f"{HOROVOD.replace('==', '-')}-{tag}"
    for wheel in sorted(cache.glob("horovod-*.whl")):
        session.install("--no-deps", "--force-reinstall", str(wheel))
        if works():
            session.log(f"{HOROVOD}: installed the wheel built earlier ({wheel}) in "
                        f"{time.perf_counter() - start:.0f} s")
            return
        wheel.unlink()  # a wheel that does not import is rebuilt
    missing = [tool for tool in HOROVOD_TOOLS if not shutil.which(tool)]
    apt = shutil.which("apt-get")
    if missing and apt and os.geteuid() == 0:
        packages = [HOROVOD_TOOLS[tool] for tool in missing]
        session.log(f"building Horovod needs {', '.join(missing)}: apt-get install {packages}")
        cmd = [apt, "install", "-y", "-q", *packages]
        if subprocess.run(cmd).returncode != 0:  # a fresh machine needs its package lists
            subprocess.run([apt, "update", "-q"])
            subprocess.run(cmd)
        missing = [tool for tool in HOROVOD_TOOLS if not shutil.which(tool)]
    if missing:
        packages = " ".join(HOROVOD_TOOLS[tool] for tool in missing)
        session.error(f"{HOROVOD} is compiled from source here and needs {', '.join(missing)}, "
                      f"which is not installed: install it with 'apt-get install {packages}' "
                      "(Debian), then run this session again")
    session.log(f"building {HOROVOD} for MXNet with Gloo (a few minutes, once; log in {cache})")
    cache.mkdir(parents=True, exist_ok=True)
    log = cache / "build.log"
    with log.open("w") as out:
        built = subprocess.run(
            [python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir",
             "-w", str(cache), HOROVOD], stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, **HOROVOD_BUILD_ENV})
    wheels = sorted(cache.glob("horovod-*.whl"))
    if built.returncode != 0 or not wheels:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        session.error(f"building {HOROVOD} failed (exit code {built.returncode}); the end of "
                      f"its log ({log}):\n{tail}\nHorovod needs a C++ compiler (Debian: g++), "
                      "make and CMake 3.13 or newer (installed by the pip extra 'horovod'), "
                      "and the MXNet wheel's headers")
    session.install("--no-deps", "--force-reinstall", str(wheels[-1]))
    if not works():
        check = subprocess.run([python, "-c", "import horovod.mxnet"], capture_output=True,
                               text=True)
        session.error(f"{HOROVOD} was built but 'import horovod.mxnet' fails:\n{check.stderr}")
    session.log(f"{HOROVOD}: built and installed in {time.perf_counter() - start:.0f} s")


def ensure_sshd(session: nox.Session) -> None:
    """Debian's openssh-server, for tests/test_mxlaunch.py (which starts its own sshd on 127.0.0.1).

    Installed only as root, and only where Debian's policy-rc.d forbids starting services, so that
    installing the package does not start the system's sshd; elsewhere those tests are skipped.
    """
    if Path("/usr/sbin/sshd").is_file():
        return
    apt, policy = shutil.which("apt-get"), Path("/usr/sbin/policy-rc.d")
    if not (apt and os.geteuid() == 0 and policy.is_file()
            and subprocess.run([str(policy), "ssh", "start"]).returncode == 101):
        session.log("openssh-server is not installed: the ssh tests of tests/test_mxlaunch.py "
                    "will be skipped (apt-get install openssh-server)")
        return
    cmd = [apt, "install", "-y", "-q", "--no-install-recommends", "openssh-server"]
    if subprocess.run(cmd).returncode != 0:  # a fresh machine needs its package lists
        subprocess.run([apt, "update", "-q"])
        subprocess.run(cmd)


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Unit tests and doctests (pytest --doctest-modules). Extra arguments go to pytest."""
    install(session, "test")
    ensure_horovod(session)  # tests/test_horovod.py runs Horovod for real
    ensure_sshd(session)  # tests/test_mxlaunch.py runs MXNet's launcher over ssh, on 127.0.0.1
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
    ensure_horovod(session)  # the Horovod chapter runs horovodrun
    ensure_data(session)
    ensure_cjk_font(session)  # the Chinese figures are drawn while the chapters execute
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
    ensure_horovod(session)  # the engines part compares the parameter server with Horovod
    session.run("python", "bench/run.py", *session.posargs)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run this file with nox: nox -s docs")
