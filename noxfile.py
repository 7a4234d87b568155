"""Sessions for the mgpu book: tests, docs (the book), lint, i18n, bench, browser, site, serve,
lock.

Every session provisions what it needs on a fresh machine: the right MXNet build (the ``gpu``
extra when ``nvidia-smi`` sees a GPU, else ``cpu``) and the Fashion-MNIST files. Every session
installs the versions pinned in ``constraints.txt`` (``nox -s lock`` refreshes them), with uv
when it is installed (``pip install 'nox[uv]'``), else with pip.
"""

from __future__ import annotations

import filecmp
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nox

nox.options.reuse_existing_virtualenvs = True
# uv creates the venvs and installs into them when it is there, else virtualenv and pip.
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "tests", "docs"]
nox.needs_version = ">=2024.3.2"

ROOT = Path(__file__).parent
DOCS = ROOT / "docs"
BUILD = DOCS / "_build"
PYTHON = "3.11"
# Every version every session installs: `nox -s lock` writes it from pyproject.toml's ranges.
LOCK = ROOT / "constraints.txt"
# The extras the lock covers (all but gpu: mxnet-cu112 cannot be resolved on a CPU-only machine).
LOCKED_EXTRAS = ("cpu", "docs", "test", "lint", "plot", "browser", "horovod", "serve", "site",
                 "lock")


def mxnet_extra() -> str:
    """``gpu`` when an NVIDIA GPU answers ``nvidia-smi``, otherwise ``cpu``."""
    if os.environ.get("MGPU_EXTRA") in ("cpu", "gpu"):
        return os.environ["MGPU_EXTRA"]
    smi = shutil.which("nvidia-smi")
    if smi and subprocess.run([smi, "-L"], capture_output=True).returncode == 0:
        return "gpu"
    return "cpu"


def pinned(session: nox.Session, *args: str) -> None:
    """``pip install`` (or ``uv pip install``) with the versions of ``constraints.txt``.

    uv, unlike pip, does not compile the installed modules to bytecode; where Python may not
    write bytecode either (``PYTHONDONTWRITEBYTECODE``), every run would compile every imported
    module again (the warm docs build took twice as long), so uv is asked to compile.
    """
    session.install("-c", str(LOCK), *args, env={"UV_COMPILE_BYTECODE": "1"})


def digest(*parts: str | bytes | Path) -> str:
    """SHA-256 over strings, bytes and the contents of files (a file that is missing counts too)."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            part = part.read_bytes() if part.is_file() else f"missing {part}"
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()


def install_stamp(session: nox.Session) -> Path:
    """Where a session's venv records what :func:`install` put into it."""
    return Path(session.virtualenv.location) / "mgpu-install.sha256"


def install(session: nox.Session, *extras: str) -> None:
    """Install mgpu (editable) with ``extras`` and the MXNet build for this machine, pinned.

    Skipped when the venv already holds exactly this: same extras, same ``pyproject.toml``, same
    ``constraints.txt`` (a stamp in the venv records them). Code under ``src/mgpu`` needs no
    reinstall: the install is editable.
    """
    spec = f".[{','.join([mxnet_extra(), *extras])}]"
    stamp, wanted = install_stamp(session), digest(spec, ROOT / "pyproject.toml", LOCK)
    if stamp.is_file() and stamp.read_text() == wanted:
        session.log(f"{spec}: installed already (pyproject.toml and constraints.txt unchanged)")
        return
    pinned(session, "-e", spec)
    stamp.write_text(wanted)


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


def apt_install(cmd: list[str]) -> None:
    """Run ``apt-get install ...``; on failure refresh the package lists and try once more."""
    if subprocess.run(cmd).returncode != 0:  # a fresh machine needs its package lists
        subprocess.run([cmd[0], "update", "-q"])
        subprocess.run(cmd)


def ensure_cjk_fonts(session: nox.Session) -> None:
    """Debian's fonts-noto-cjk, for Chinese figures and pages, installed on its own as root."""
    fc_list = shutil.which("fc-list")
    if fc_list and "CJK" in subprocess.run([fc_list, ":lang=zh"], capture_output=True,
                                           text=True).stdout:
        return
    apt = shutil.which("apt-get")
    if apt and os.geteuid() == 0:
        session.log("installing Debian's fonts-noto-cjk (Chinese figures and pages)")
        apt_install([apt, "install", "-y", "-q", "--no-install-recommends", "fonts-noto-cjk"])
    else:
        session.log("no CJK font found: install fonts-noto-cjk (Debian) for the Chinese edition")


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

    # Checked once per install of the venv: the stamp holds the install stamp it was checked with.
    checked = Path(session.virtualenv.location) / "mgpu-horovod.sha256"
    installed = digest(HOROVOD, install_stamp(session))
    if checked.is_file() and checked.read_text() == installed:
        session.log(f"{HOROVOD}: checked in this venv since its last install, not rebuilt")
        return
    if works():
        session.log(f"{HOROVOD}: already in this venv, not rebuilt")
        checked.write_text(installed)
        return
    start = time.perf_counter()
    pinned(session, "-e", f".[{mxnet_extra()},horovod]", "pip")  # uv's venvs have no pip
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
            checked.write_text(installed)
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
    checked.write_text(installed)
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
    pinned(session, "ruff")
    session.run("ruff", "check", "src", "tests", "bench", "docs/conf.py", "docs/_ext",
                "docs/check_translations.py", "docs/serve.py", "noxfile.py")


def sphinx(session: nox.Session, language: str, *extra: str) -> None:
    """One edition into ``docs/_build/sphinx/<language>`` (its doctrees beside, not inside)."""
    session.run(
        "sphinx-build", "-b", "html", "-W", "--keep-going", "-n",
        "-d", str(BUILD / "doctrees" / language),
        "-D", f"language={language}", str(DOCS), str(BUILD / "sphinx" / language), *extra,
    )


# Files of an edition that no page loads: source maps (only a browser's developer tools ask for
# them), and the themes' templates; _static/locales (the theme's catalogs) is build-time only.
UNLOADED = ("*.map", "webpack-macros.html", "sbt-webpack-macros.html")
STATIC_LINK = re.compile(r'((?:src|href)=")((?:\.\./)*)_static/([^"?#]+)')


def share_static(site: Path, base: str, edition: str) -> int:
    """Let ``edition``'s pages load the static files identical to ``base``'s from ``base``.

    The editions are published side by side, and most of ``_static`` (the theme, MathJax,
    fonts) is the same in both: ``edition`` keeps only the files of its own (its language
    data, search stemmer, options), and its pages' ``src``/``href`` to the others point to
    ``../<base>/_static/``. Returns the bytes saved.
    """
    ours, theirs = site / edition / "_static", site / base / "_static"
    shared = {f.relative_to(ours).as_posix() for f in ours.rglob("*") if f.is_file()
              and (theirs / f.relative_to(ours)).is_file()
              and filecmp.cmp(f, theirs / f.relative_to(ours), shallow=False)}
    for page in (site / edition).rglob("*.html"):
        depth = len(page.relative_to(site / edition).parts) - 1

        def point(m: re.Match, depth: int = depth) -> str:
            if len(m.group(2)) // 3 != depth or m.group(3) not in shared:
                return m.group(0)
            return f"{m.group(1)}{'../' * (depth + 1)}{base}/_static/{m.group(3)}"

        text = page.read_text("utf-8")
        page.write_text(STATIC_LINK.sub(point, text), "utf-8")
    saved = 0
    for name in shared:
        saved += (ours / name).stat().st_size
        (ours / name).unlink()
    for folder in sorted((d for d in ours.rglob("*") if d.is_dir()), reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()
    return saved


IMAGE_LINK = re.compile(r'_images/([^"\'?#]+)')


def prune_images(edition: Path) -> None:
    """Delete the files of ``edition/_images`` that no page of the edition shows.

    Sphinx copies each page's images into ``_images`` but never deletes one: after a figure
    changes, the old file stays in the build directory.
    """
    shown = {name for page in edition.rglob("*.html")
             for name in IMAGE_LINK.findall(page.read_text("utf-8"))}
    for image in (edition / "_images").glob("*"):
        if image.is_file() and image.name not in shown:
            image.unlink()


# What the published site holds besides the editions: docs/_root's files, at its root.
def publish(languages: tuple[str, ...]) -> Path:
    """Assemble the published site in ``docs/_build/html`` from the editions' build directories.

    Only what readers load: no doctrees, no ``jupyter_execute/``, no ``.buildinfo``, no image
    that no page shows. The directory is rebuilt from scratch each time, so nothing stale
    survives in it.
    """
    site = BUILD / "html"
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    for language in languages:
        shutil.copytree(BUILD / "sphinx" / language, site / language,
                        ignore=shutil.ignore_patterns(".buildinfo", ".doctrees", *UNLOADED))
        shutil.rmtree(site / language / "_static" / "locales", ignore_errors=True)
        prune_images(site / language)
    if "en" in languages:
        for language in languages:
            if language != "en":
                share_static(site, "en", language)
    for page in sorted((DOCS / "_root").iterdir()):
        shutil.copyfile(page, site / page.name)
    (site / ".nojekyll").touch()
    return site


def catalog_sources() -> list[Path]:
    """What the extracted messages depend on: pages, conf and extensions, templates, catalogs."""
    files = [*DOCS.glob("*.md"), DOCS / "conf.py", *DOCS.glob("_ext/*.py"),
             *DOCS.glob("_templates/**/*"), *DOCS.glob("locales/**/*.po"), LOCK]
    return sorted(f for f in files if f.is_file())


def update_catalogs(session: nox.Session, force: bool = True) -> None:
    """Extract the English messages (.pot) and merge them into the Chinese catalogs (.po).

    With ``force=False``, skipped when none of :func:`catalog_sources` changed since the last
    extraction (a stamp in ``docs/_build`` records them, as they were after it).
    """
    pot, stamp = BUILD / "gettext", BUILD / "catalogs.sha256"

    def sources() -> str:
        files = catalog_sources()
        return digest(*(f.relative_to(ROOT).as_posix() for f in files), *files)

    if not force and pot.is_dir() and stamp.is_file() and stamp.read_text() == sources():
        session.log("catalogs: no page, catalog or conf changed since the last extraction, "
                    "not extracted again")
        return
    # From the execution cache (filled by the English build; executed here if it is empty): the
    # captions of glued figures exist only when the notebook's glue data does.
    session.run(
        "sphinx-build", "-b", "gettext", "-q", "-D", "nb_execution_mode=cache",
        str(DOCS), str(pot),
    )
    session.run("sphinx-intl", "update", "-p", str(pot), "-l", "zh_CN", "-d",
                str(DOCS / "locales"), "-w", "100", silent=True)
    stamp.write_text(sources())


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the book in English and Chinese (executing every chapter once).

    ``-- --open`` serves it on http://127.0.0.1 and opens it in a browser (Ctrl-C stops the
    server). ``-- --en`` builds the English edition only.
    """
    import time

    open_it = "--open" in session.posargs
    install(session, "docs")
    ensure_horovod(session)  # the Horovod chapter runs horovodrun
    ensure_data(session)
    ensure_cjk_fonts(session)  # the Chinese edition's figures
    timings = {}
    languages = ("en",) if "--en" in session.posargs else ("en", "zh_CN")
    start = time.perf_counter()
    sphinx(session, "en")
    timings["en"] = time.perf_counter() - start
    if "zh_CN" in languages:
        start = time.perf_counter()
        update_catalogs(session, force=False)
        session.run("python", str(DOCS / "check_translations.py"))
        # Same sources, same execution cache: the Chinese build runs no notebook again.
        sphinx(session, "zh_CN")
        timings["zh_CN"] = time.perf_counter() - start
    site = publish(languages)
    session.log("build times: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    session.log(f"The book: {site / 'index.html'} ({site_size(site) / 1e6:.1f} MB)")
    if open_it:
        # Over http://, not file://: the search fetches its result summaries, which browsers
        # refuse to do for file:// pages.
        stop = os.environ.get("MGPU_SERVE_SECONDS")  # CI: check the server, then go on
        session.run("python", str(DOCS / "serve.py"), "--open", str(site),
                    *(["--stop-after", stop] if stop else []))


def site_size(site: Path) -> int:
    """Bytes of every file under ``site``."""
    return sum(f.stat().st_size for f in site.rglob("*") if f.is_file())


@nox.session(python=PYTHON)
def serve(session: nox.Session) -> None:
    """Rebuild the English edition on every change (docs/, src/mgpu) and serve it on 127.0.0.1.

    For maintainers editing a chapter: sphinx-autobuild prints the address and reloads the
    page after each rebuild. Extra arguments go to sphinx-autobuild (e.g. ``--port 8000``).
    """
    install(session, "docs", "serve")
    ensure_horovod(session)
    ensure_data(session)
    ensure_cjk_fonts(session)
    session.run(
        "sphinx-autobuild", "-b", "html", "-n", "-d", str(BUILD / "doctrees" / "serve"),
        "--host", "127.0.0.1", "--port", "0", "--watch", str(ROOT / "src" / "mgpu"),
        "--ignore", str(BUILD), "--ignore", str(DOCS / "locales"),
        *session.posargs, str(DOCS), str(BUILD / "sphinx" / "serve"),
    )


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
        apt_install([apt, "install", "-y", "-q", "chromium"])
    ensure_cjk_fonts(session)  # Chromium may be there without them: Chinese pages need them
    if not Path(chromium).is_file():
        session.error(f"Chromium not found at {chromium}: apt-get install chromium, "
                      "or set MGPU_CHROMIUM to a Chromium binary")
    install(session, "browser")
    session.run("pytest", "-m", "browser", "tests/browser", "-q", *session.posargs)
    session.log(f"screenshots: {BUILD / 'screenshots'}")


@nox.session(python=PYTHON)
def site(session: nox.Session) -> None:
    """Check the published site (run `nox -s docs` first): links, notebook zips, local server."""
    if not (BUILD / "html" / "zh_CN" / "index.html").is_file():
        session.error("no built site in docs/_build/html: run 'nox -s docs' first")
    install(session, "plot", "site")  # what a reader of the notebooks installs
    ensure_data(session)
    session.run("pytest", "-m", "site", "tests/site", "-q", *session.posargs)


@nox.session(python=PYTHON)
def lock(session: nox.Session) -> None:
    """Refresh constraints.txt: the newest versions pyproject.toml's ranges allow.

    ``-- --upgrade-package sphinx`` moves one package only. ``-- --check`` changes nothing and
    fails if constraints.txt no longer satisfies pyproject.toml (CI runs that). Commit a new lock
    after ``nox -s lint tests docs`` pass with it.
    """
    import filecmp
    import tempfile

    pinned(session, "uv")
    extras = [arg for extra in LOCKED_EXTRAS for arg in ("--extra", extra)]
    compile_ = ["uv", "pip", "compile", "pyproject.toml", "--python-version", PYTHON, *extras,
                "--custom-compile-command", "nox -s lock", "--quiet"]
    if "--check" in session.posargs:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / LOCK.name
            shutil.copyfile(LOCK, out)  # uv keeps the pins of the existing output file
            session.run(*compile_, "-o", str(out))
            if not filecmp.cmp(out, LOCK, shallow=False):
                session.error("constraints.txt does not match pyproject.toml: run 'nox -s lock' "
                              "and commit constraints.txt")
        session.log("constraints.txt matches pyproject.toml")
        return
    session.run(*compile_, "-o", str(LOCK), *(session.posargs or ["--upgrade"]))


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
