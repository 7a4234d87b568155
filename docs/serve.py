"""Serve the built book on http://127.0.0.1 (a free port) and, with ``--open``, open a browser.

Usage: ``python docs/serve.py [--open] [--port N] [--stop-after S] [SITE]`` (SITE defaults to
docs/_build/html). ``nox -s docs -- --open`` runs it after the build (CI sets
``MGPU_SERVE_SECONDS``, which the session passes as ``--stop-after``). Over http:// the search
page can fetch its result summaries, which browsers refuse to pages opened as file://. Ctrl-C
stops the server.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import sys
import threading
import urllib.request
import webbrowser
from pathlib import Path

SITE = Path(__file__).parent / "_build" / "html"


class BookHandler(http.server.SimpleHTTPRequestHandler):
    """Static files, and the site's bilingual 404.html for paths that do not exist."""

    def send_error(self, code: int, message: str | None = None, explain: str | None = None):
        page = Path(self.directory) / "404.html"
        if code != 404 or not page.is_file():
            return super().send_error(code, message, explain)
        body = page.read_bytes()
        self.send_response(404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (the base class's name)
        pass  # the terminal shows the address, not every request


def make_server(site: Path, port: int = 0) -> http.server.ThreadingHTTPServer:
    """A server of ``site`` on 127.0.0.1 (``port`` 0: any free port)."""
    if not (site / "index.html").is_file():
        raise SystemExit(f"no built book in {site}: run 'nox -s docs' first")
    handler = functools.partial(BookHandler, directory=str(site))
    return http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", nargs="?", type=Path, default=SITE)
    parser.add_argument("--port", type=int, default=0, help="default: any free port")
    parser.add_argument("--open", action="store_true", help="open the book in a browser")
    parser.add_argument("--stop-after", type=float, default=None, metavar="SECONDS",
                        help="check that the site answers, serve that long, then stop; no browser "
                        "is opened (tests, CI)")
    args = parser.parse_args(argv)
    server = make_server(args.site.resolve(), args.port)
    url = f"http://127.0.0.1:{server.server_address[1]}/index.html"
    print(f"The book: {url} (Ctrl-C stops the server)", flush=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        if args.stop_after is not None:
            with urllib.request.urlopen(url, timeout=30) as response:
                print(f"{url}: HTTP {response.status}", flush=True)
        if args.open and args.stop_after is None and not webbrowser.open(url):
            print("No browser found here: open the address above yourself.", flush=True)
        thread.join(args.stop_after)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())
