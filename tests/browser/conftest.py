"""Serve the built site on 127.0.0.1 and drive Debian's Chromium with Playwright."""

from __future__ import annotations

import functools
import http.server
import os
import sys
import threading
from pathlib import Path

import pytest

# The published site (`nox -s docs`); MGPU_SITE tests another copy of it.
SITE = Path(os.environ.get("MGPU_SITE") or Path(__file__).parents[2] / "docs" / "_build" / "html")
CHROMIUM = os.environ.get("MGPU_CHROMIUM", "/usr/bin/chromium")


# docs/serve.py, the server of `nox -s docs -- --open`
sys.path.insert(0, str(Path(__file__).parents[2] / "docs"))
from serve import BookHandler  # noqa: E402


class _QuietHandler(BookHandler):
    def log_message(self, *args):  # keep pytest's output readable
        pass


@pytest.fixture(scope="session")
def site_url():
    if not (SITE / "en" / "index.html").is_file():
        pytest.fail(f"no built site in {SITE}: run 'nox -s docs' first")
    handler = functools.partial(_QuietHandler, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).is_file():
        pytest.fail(f"Chromium not found at {CHROMIUM}: apt-get install chromium")
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run",
                  "--disable-quic"],
        )
        yield b
        b.close()


# The two windows a reader uses: a laptop's, and a phone's (touch, no hover, as Chromium's
# device emulation reports it to CSS and scripts).
DESKTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}
SIZES = {"desktop": DESKTOP, "phone": PHONE}


def _new_page(browser, viewport, phone=False):
    """A page in a fresh context that records console errors and every request to another
    host (``pg.console_errors``, ``pg.foreign_requests``)."""
    options = {"viewport": viewport, "accept_downloads": True}
    if phone:
        options.update(is_mobile=True, has_touch=True, device_scale_factor=3)
    context = browser.new_context(**options)
    pg = context.new_page()
    pg.console_errors = []
    pg.foreign_requests = []
    pg.on("console", lambda m: m.type == "error" and pg.console_errors.append(m.text))
    pg.on("pageerror", lambda e: pg.console_errors.append(str(e)))

    def _check_host(request):
        url = request.url
        if not url.startswith(("http://127.0.0.1", "data:", "blob:", "about:")):
            pg.foreign_requests.append(url)

    pg.on("request", _check_host)
    pg.on("response", lambda r: r.status >= 400
          and pg.console_errors.append(f"HTTP {r.status} for {r.url}"))
    return context, pg


@pytest.fixture
def page(browser):
    """A desktop page (1280x900)."""
    context, pg = _new_page(browser, {"width": 1280, "height": 900})
    yield pg
    context.close()


@pytest.fixture(params=sorted(SIZES))
def reader(browser, request):
    """A page at each of the reader's window sizes: ``reader.size`` is "desktop" (1366x900)
    or "phone" (390x844, touch)."""
    phone = request.param == "phone"
    context, pg = _new_page(browser, SIZES[request.param], phone=phone)
    pg.size = request.param
    yield pg
    context.close()


@pytest.fixture
def desktop(browser):
    """A page at 1366x900."""
    context, pg = _new_page(browser, DESKTOP)
    pg.size = "desktop"
    yield pg
    context.close()
