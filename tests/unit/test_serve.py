"""docs/serve.py, which `nox -s docs -- --open` runs: the built book over http://127.0.0.1."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

SERVE = Path(__file__).parents[2] / "docs" / "serve.py"
ROOT_PAGES = Path(__file__).parents[2] / "docs" / "_root"


@pytest.fixture
def site(tmp_path):
    (tmp_path / "en").mkdir()
    (tmp_path / "en" / "index.html").write_text("<h1>mgpu</h1>", "utf-8")
    for page in ROOT_PAGES.iterdir():  # the published root: index.html, 404.html
        (tmp_path / page.name).write_bytes(page.read_bytes())
    return tmp_path


def _start(site: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, str(SERVE), str(site)], stdout=subprocess.PIPE,
                            text=True)
    line = proc.stdout.readline()
    match = re.search(r"http://127\.0\.0\.1:\d+/", line)
    assert match, f"no address in {line!r}"
    return proc, match.group(0)


def test_serves_the_book_on_loopback_and_404s_with_the_bilingual_page(site):
    proc, base = _start(site)
    try:
        with urllib.request.urlopen(base + "en/index.html", timeout=10) as response:
            assert response.status == 200 and b"mgpu" in response.read()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(base + "en/no-such-page.html", timeout=10)
        assert missing.value.code == 404
        body = missing.value.read().decode("utf-8")
        assert "Page not found" in body and "页面不存在" in body
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_stop_after_checks_the_site_and_exits(site):
    run = subprocess.run([sys.executable, str(SERVE), "--stop-after", "0.5", str(site)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "HTTP 200" in run.stdout


def test_refuses_a_directory_without_a_book(tmp_path):
    run = subprocess.run([sys.executable, str(SERVE), str(tmp_path)], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode != 0 and "nox -s docs" in run.stderr
