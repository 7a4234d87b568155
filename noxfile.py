"""Sessions for the mgpu book: tests, docs (the book), pdf, lint, i18n, bench, browser, site,
serve, lock.

Every session provisions what it needs on a fresh machine: the right MXNet build (the ``gpu``
extra when ``nvidia-smi`` sees a GPU, else ``cpu``) and the Fashion-MNIST files. Every session
installs the versions pinned in ``constraints.txt`` (``nox -s lock`` refreshes them), with uv
when it is installed (``pip install 'nox[uv]'``), else with pip.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nox

ROOT = Path(__file__).parent
sys.path.insert(0, str(ROOT))  # nox's interpreter imports the package tools from the repository
from tools import catalogs, horovod_wheel, stamps, system  # noqa: E402
from tools.pdf import pdf_name  # noqa: E402
from tools.site import publish, publish_pdfs, site_size  # noqa: E402

nox.options.reuse_existing_virtualenvs = True
# uv creates the venvs and installs into them when it is there, else virtualenv and pip.
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "tests", "docs"]
nox.needs_version = ">=2024.3.2"

DOCS = ROOT / "docs"
BUILD = DOCS / "_build"
PYTHON = "3.11"
# Every version every session installs: `nox -s lock` writes it from pyproject.toml's ranges.
LOCK = ROOT / "constraints.txt"
# The extras the lock covers (all but gpu: mxnet-cu112 cannot be resolved on a CPU-only machine).
LOCKED_EXTRAS = ("cpu", "docs", "test", "lint", "plot", "browser", "horovod", "serve", "site",
                 "pdf", "lock")


def pinned(session: nox.Session, *args: str) -> None:
    """``pip install`` (or ``uv pip install``) with the versions of ``constraints.txt``.

    uv, unlike pip, does not compile the installed modules to bytecode; where Python may not
    write bytecode either (``PYTHONDONTWRITEBYTECODE``), every run would compile every imported
    module again (the warm docs build took twice as long), so uv is asked to compile.
    """
    session.install("-c", str(LOCK), *args, env={"UV_COMPILE_BYTECODE": "1"})


def install_stamp(session: nox.Session) -> Path:
    """Where a session's venv records what :func:`install` put into it."""
    return Path(session.virtualenv.location) / "mgpu-install.sha256"


def install(session: nox.Session, *extras: str) -> None:
    """Install mgpu (editable) with ``extras`` and the MXNet build for this machine, pinned.

    Skipped when the venv already holds exactly this: same extras, same ``pyproject.toml``, same
    ``constraints.txt`` (a stamp in the venv records them). Code under ``src/mgpu`` needs no
    reinstall: the install is editable.
    """
    spec = f".[{','.join([system.mxnet_extra(), *extras])}]"
    stamps.install_once(install_stamp(session), spec, (ROOT / "pyproject.toml", LOCK),
                        lambda: pinned(session, "-e", spec), session.log)


@contextmanager
def setup(session: nox.Session) -> Iterator[None]:
    """A failed setup step (:class:`tools.system.SetupError`) fails the session with its message."""
    try:
        yield
    except system.SetupError as err:
        session.error(str(err))


def ensure_data(session: nox.Session) -> None:
    """Make sure Fashion-MNIST is on disk: Debian's package via apt, else MXNet's download."""
    with setup(session):
        system.ensure_data(session.run, session.log, system.root_apt())


def ensure_hosts_tools(session: nox.Session) -> None:
    """iproute2 and openssh-server, for the emulated hosts (mgpu.cluster.hosts) that the tests
    and the chapters make; as root only (without them those tests skip, unless
    MGPU_REQUIRE_HOSTS=1, and the chapters measure on loopback)."""
    system.ensure_iproute2(session.log, system.root_apt())
    system.ensure_sshd(session.log, system.root_apt())


def ensure_horovod(session: nox.Session) -> None:
    """Build Horovod (MXNet + Gloo) into this session's venv once, or reuse it."""
    with setup(session):
        horovod_wheel.ensure_horovod(
            str(Path(session.bin) / "python"), Path(session.virtualenv.location),
            install_stamp(session), log=session.log, apt=system.root_apt(),
            # uv's venvs have no pip
            prepare=lambda: pinned(session, "-e", f".[{system.mxnet_extra()},horovod]", "pip"),
            install=session.install)


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Unit tests and doctests (pytest --doctest-modules). Extra arguments go to pytest."""
    install(session, "test")
    ensure_horovod(session)  # tests/cluster/test_horovod.py runs Horovod for real
    # tests/cluster/test_mxlaunch.py runs MXNet's launcher over ssh, on 127.0.0.1 and across
    # emulated hosts; tests/cluster/test_hosts.py makes hosts
    ensure_hosts_tools(session)
    ensure_data(session)
    # MGPU_REQUIRE_HOSTS (CI sets it) reaches pytest with the rest of the environment.
    session.run("pytest", *session.posargs, env={"MGPU_REQUIRE_DATA": "1"})


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """Ruff over the package, the tests, bench, tools, the docs' Python and this file."""
    pinned(session, "ruff")
    session.run("ruff", "check", "src", "tests", "bench", "tools", "docs/conf.py", "docs/_ext",
                "docs/check_translations.py", "docs/serve.py", "noxfile.py")


def sphinx(session: nox.Session, language: str, builder: str = "html") -> None:
    """One edition into ``docs/_build/sphinx/<language>`` (its doctrees beside, not inside).

    The ``singlehtml`` builder (the page ``tools/pdf.py`` prints) writes to
    ``docs/_build/singlehtml/<language>`` and only reads the execution cache.
    """
    html = builder == "html"
    session.run(
        "sphinx-build", "-b", builder, "-W", "--keep-going", "-n",
        "-d", str(BUILD / "doctrees" / (language if html else f"{builder}-{language}")),
        "-D", f"language={language}", *([] if html else ["-D", "mgpu_cached_only=1"]),
        str(DOCS), str(BUILD / ("sphinx" if html else builder) / language),
    )


def chromium(session: nox.Session) -> Path:
    """Debian's Chromium (installed if missing, as root), or ``MGPU_CHROMIUM``, and CJK fonts."""
    path = Path(os.environ.get("MGPU_CHROMIUM", "/usr/bin/chromium"))
    system.ensure_chromium(path, session.log, system.root_apt())
    # Chromium may be there without them: Chinese pages need them
    system.ensure_cjk_fonts(session.log, system.root_apt())
    if not path.is_file():
        session.error(f"Chromium not found at {path}: apt-get install chromium, "
                      "or set MGPU_CHROMIUM to a Chromium binary")
    return path


def build_pdfs(session: nox.Session, languages: tuple[str, ...]) -> None:
    """Each edition's PDF in ``docs/_build/pdf/``: its single-page build, from the execution
    cache (no page runs again), printed by headless Chromium (``tools/pdf.py``)."""
    browser = chromium(session)
    for language in languages:
        sphinx(session, language, "singlehtml")
        session.run("python", "-m", "tools.pdf",
                    str(BUILD / "singlehtml" / language / "index.html"),
                    str(BUILD / "pdf" / pdf_name(language)), "--chromium", str(browser))


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the book in English and Chinese (executing every chapter once), and the PDF of
    each edition (printed by Debian's Chromium, installed if missing, as ``nox -s pdf`` does).

    ``-- --open`` serves it on http://127.0.0.1 and opens it in a browser (Ctrl-C stops the
    server). ``-- --en`` builds the English edition only.
    """
    import time

    open_it = "--open" in session.posargs
    install(session, "docs", "pdf")
    ensure_horovod(session)  # the Horovod chapter runs horovodrun
    ensure_data(session)
    ensure_hosts_tools(session)  # chapters measure across emulated hosts where they can
    system.ensure_cjk_fonts(session.log, system.root_apt())  # the Chinese edition's figures
    timings = {}
    languages = ("en",) if "--en" in session.posargs else ("en", "zh_CN")
    start = time.perf_counter()
    sphinx(session, "en")
    timings["en"] = time.perf_counter() - start
    if "zh_CN" in languages:
        start = time.perf_counter()
        # Extracted only when a page, catalog or conf changed since the last extraction.
        catalogs.update_catalogs(DOCS, BUILD, LOCK, session.run, session.log, force=False)
        session.run("python", str(DOCS / "check_translations.py"))
        # Same sources, same execution cache: the Chinese build runs no notebook again.
        sphinx(session, "zh_CN")
        timings["zh_CN"] = time.perf_counter() - start
    start = time.perf_counter()
    build_pdfs(session, languages)
    timings["pdf"] = time.perf_counter() - start
    site = publish(BUILD, DOCS / "_root", languages)
    session.log("build times: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    pdfs = [site / language / "_downloads" / pdf_name(language) for language in languages]
    html = site_size(site) - sum(p.stat().st_size for p in pdfs)
    session.log(f"The book: {site / 'index.html'} ({html / 1e6:.1f} MB; PDFs: "
                + ", ".join(f"{p.name} {p.stat().st_size / 1e6:.1f} MB" for p in pdfs) + ")")
    if open_it:
        # Over http://, not file://: the search fetches its result summaries, which browsers
        # refuse to do for file:// pages.
        stop = os.environ.get("MGPU_SERVE_SECONDS")  # CI: check the server, then go on
        session.run("python", str(DOCS / "serve.py"), "--open", str(site),
                    *(["--stop-after", stop] if stop else []))


@nox.session(python=PYTHON)
def pdf(session: nox.Session) -> None:
    """Rebuild the PDF of each edition from the execution cache (run `nox -s docs` first).

    ``docs/_build/pdf/mgpu-<language>.pdf``, also put into the published site (each edition's
    ``_downloads/``, linked from every page). No page is executed: the build fails if the cache
    is stale. ``-- --en`` builds the English PDF only.
    """
    languages = ("en",) if "--en" in session.posargs else ("en", "zh_CN")
    install(session, "docs", "pdf")
    build_pdfs(session, languages)
    site = BUILD / "html"
    if (site / "en" / "index.html").is_file():
        publish_pdfs(BUILD, site, languages)
        session.log(f"published in {site}")


@nox.session(python=PYTHON)
def serve(session: nox.Session) -> None:
    """Rebuild the English edition on every change (docs/, src/mgpu) and serve it on 127.0.0.1.

    For maintainers editing a chapter: sphinx-autobuild prints the address and reloads the
    page after each rebuild. Extra arguments go to sphinx-autobuild (e.g. ``--port 8000``).
    """
    install(session, "docs", "serve")
    ensure_horovod(session)
    ensure_data(session)
    ensure_hosts_tools(session)
    system.ensure_cjk_fonts(session.log, system.root_apt())
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
    catalogs.update_catalogs(DOCS, BUILD, LOCK, session.run, session.log)
    session.run("python", str(DOCS / "check_translations.py"), success_codes=[0, 1])


@nox.session(python=PYTHON)
def browser(session: nox.Session) -> None:
    """Test the built site (run `nox -s docs` first) in headless Chromium, served on 127.0.0.1."""
    if not (BUILD / "html" / "zh_CN" / "index.html").is_file():
        session.error("no built site in docs/_build/html: run 'nox -s docs' first")
    chromium(session)
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
    ensure_hosts_tools(session)  # the hosts part measures across emulated hosts
    session.run("python", "bench/run.py", *session.posargs)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run this file with nox: nox -s docs")
