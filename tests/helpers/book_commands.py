"""Run the shell commands a chapter gives for real machines, with loopback in place of hosts.

The chapters write hosts as documentation addresses (192.0.2.x, RFC 5737) and interfaces as
``eth0``; a test replaces them by 127.0.0.1 and ``lo`` and runs the block exactly as printed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def book_commands(page: str, section: str, contains: str) -> list[str]:
    """The bash code blocks of ``section`` (a heading) of ``docs/page`` holding ``contains``."""
    text = (DOCS / page).read_text(encoding="utf-8")
    start = text.index(section + "\n")
    end = text.find("\n## ", start + len(section))
    part = text[start:] if end < 0 else text[start:end]
    return [b for b in re.findall(r"```bash\n(.*?)```", part, re.S) if contains in b]


def run_book_command(command: str, replace: dict[str, str], cwd: Path, timeout: float,
                     path: tuple[str, ...] = (), check: bool = True,
                     env: dict[str, str] | None = None,
                     prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Run ``command`` with bash after replacing placeholders; ``python`` is this venv's.

    ``env`` (default: this environment) is the base environment, ``prefix`` words run
    bash (e.g. ``Hosts.command(host, [])``: on an emulated host)."""
    for old, new in replace.items():
        command = command.replace(old, new)
    assert "192.0.2." not in command, f"a placeholder address is left in:\n{command}"
    base = os.environ if env is None else env
    env = {**base, "PYTHONUNBUFFERED": "1",
           "PATH": os.pathsep.join([*path, str(Path(sys.executable).parent),
                                    base.get("PATH", "")])}
    proc = subprocess.Popen([*prefix, "bash", "-eu", "-c", command], cwd=cwd, env=env, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"the book's command ran longer than {timeout} s:\n{command}\n"
                             f"{err[-2000:]}") from None
    result = subprocess.CompletedProcess(command, proc.returncode, out, err)
    if check:
        assert proc.returncode == 0, (f"the book's command failed ({proc.returncode}):\n"
                                      f"{command}\n{err[-3000:]}")
    return result
