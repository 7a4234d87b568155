"""Serve the built site on 127.0.0.1 and drive Debian's Chromium with Playwright."""

from __future__ import annotations

import functools
import http.server
import os
import sys
import threading
from pathlib import Path

import pytest

SITE = Path(__file__).parents[2] / "docs" / "_build" / "html"
CHROMIUM = os.environ.get("MGPU_CHROMIUM", "/usr/bin/chromium")


sys.path.insert(0, str(SITE.parents[1]))  # docs/: serve.py, the server of `nox -s docs -- --open`
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


@pytest.fixture
def page(browser):
    """A fresh page that records console errors and every request to another host."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
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
    yield pg
    context.close()
