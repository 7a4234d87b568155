"""``python -m mgpu.cluster.mxlaunch``: MXNet's own launcher, working on Python 3.10+.

The MXNet wheel ships ``mxnet/tools/launch.py``, which starts a parameter-server job (a
scheduler, servers and workers) locally or on the hosts of a host file over ``ssh``,
with the ``dmlc_tracker`` package. As shipped it cannot run on the Python versions this
book uses, and it has more gaps; this command runs the wheel's own ``launch.py``
with five fixes:

1. ``dmlc_tracker`` calls ``threading.Thread.isAlive()``, which Python 3.9 removed (it
   is ``is_alive()``): every launcher mode fails with ``AttributeError``. The method is
   put back.
2. ``launch.py`` has no ``--host-ip`` option (``dmlc_tracker`` has one, but the argument
   is not passed on), so the tracker guesses the scheduler's address from the route to a
   non-loopback address. Here ``--host-ip`` is required: the scheduler listens on that
   address and every process is told to reach it there. With ``--launcher local`` the
   servers and workers listen on it too (``DMLC_NODE_HOST``); with ``ssh`` each host
   listens on its host-file address.
3. When a process dies, ps-lite's other processes wait forever, and so does
   ``launch.py``. Here the launcher watches every process it started: when one exits
   with an error it stops all of them and exits with status 1, naming the process.
   ``--timeout`` (default 3600 s) ends a job that hangs (exit status 124).
4. ``ssh`` runs the remote commands with a terminal (``ssh -tt``): when the launcher
   stops an ``ssh`` client, the remote terminal hangs up and the remote process gets
   ``SIGHUP``, instead of waiting forever on a machine nobody watches. ``BatchMode=yes``
   makes a missing key fail at once instead of asking for a password. A host that
   stops answering (its cable pulled, a switch port dead) sends no error: without
   more, ps-lite's processes and ``ssh`` wait for it forever. Here every ``ssh``
   client sends a keepalive after ``--keepalive`` seconds (default 5) without a word
   from the host (``ServerAliveInterval``) and gives up after 3 of them go unanswered
   (``ServerAliveCountMax``): it exits with status 255 about 4 ``--keepalive`` seconds
   after the host fell silent, and the launcher stops the job, naming the host. The
   failure message quotes what ``ssh`` said (``Timeout, server ... not responding.``
   for a silent host, ``Connection to ... closed by remote host.`` when the host's
   processes were killed, ``sshd`` included); ``ssh`` runs at ``LogLevel=INFO`` for
   that, and its routine lines (``Connection to ... closed.``, ``Warning: Permanently
   added ...``) are not shown. Every client also runs with ``ControlMaster=no`` and
   ``ControlPath=none``, whatever the user's ``ssh`` configuration says: a session
   that rides on a shared connection (``ControlMaster``) gets the master's options,
   not these keepalives, and a master that outlives the job would hold the client's
   ``stderr`` open. The launcher cannot stop processes on a host it cannot
   reach: they end when that host's ``sshd`` learns that the client is gone, as soon
   as packets pass again (the client's machine answers for the closed connection), or
   after the ``sshd``'s own ``ClientAliveInterval``.
5. The environment. ``dmlc_tracker/ssh.py`` (``get_env``) starts every remote process
   with ``export NAME=VALUE;`` on its ``ssh`` command line, for the tracker's ``DMLC_*``
   variables and for ``OMP_NUM_THREADS``, ``KMP_AFFINITY``, ``LD_LIBRARY_PATH``,
   ``DMLC_INTERFACE``, ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` when they
   are set here: the AWS keys can then be read in the process list of both machines.
   ``launch.py``'s ``--env NAME``, ``--env-worker NAME:VALUE`` and ``--env-server
   NAME:VALUE`` never arrive: ``dmlc_tracker`` ignores ``--env`` except on YARN and
   does not know the other two, which end up in the command itself. Here no variable
   whose name looks like a credential is put on a command line: the AWS variables
   (``AWS_SESSION_TOKEN`` too) and every ``--env*`` variable whose name contains KEY,
   SECRET, TOKEN, PASS, AUTH, PRIVATE, CREDENTIAL or CONNECTION_STRING are dropped,
   with a warning that names them and says how to pass them instead; the other
   ``--env*`` variables reach the servers and workers (with ``--launcher local`` or
   ``ssh``). The filter goes by name only: with ``ssh`` the values of the variables
   that pass are on the ``ssh`` command line, so never pass a secret under another
   name.

Usage (the options of ``launch.py`` follow those of this command)::

    python -m mgpu.cluster.mxlaunch --host-ip ADDRESS [--timeout SECONDS] \\
        [--keepalive SECONDS] LAUNCH.PY-OPTIONS COMMAND...
    python -m mgpu.cluster.mxlaunch --host-ip 127.0.0.1 --timeout 600 \\
        -n 2 -s 1 --launcher local python -m mgpu train_demo

``--host-ip`` (required): the address of this machine that every host of the job can
reach; the scheduler listens there. ``--timeout`` (default 3600): end the job with
status 124 after this many seconds. ``--keepalive`` (default 5): seconds between
``ssh``'s keepalives; a host that answers none of 3 is given up after about 4 times
this. Exit status: 0 when every process succeeded, 1 when one failed (the message
names it and, through ``ssh``, its host), 124 after ``--timeout``, 130 on Ctrl-C.
``-h`` first prints this text; ``-h`` after ``--host-ip`` prints ``launch.py``'s.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from mgpu.cluster.processes import free_port, stop_processes

# A command (python -m mgpu.cluster.mxlaunch); ssh_exports is what the book checks.
__all__ = ["ssh_exports"]

#: What ``dmlc_tracker/ssh.py``'s ``get_env`` copies from this environment onto the
#: remote command line, less the AWS keys.
_SSH_PASSED = ("OMP_NUM_THREADS", "KMP_AFFINITY", "LD_LIBRARY_PATH", "DMLC_INTERFACE")
#: Never put on a command line (``get_env`` exports the first two).
_AWS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
_SECRET_WORDS = ("KEY", "SECRET", "TOKEN", "PASS", "AUTH", "PRIVATE", "CREDENTIAL",
                 "CONNECTION_STRING")  # not PAT: it is in PATH
#: ``--keepalive``'s default, ``ssh``'s ``ServerAliveInterval`` (seconds), and its
#: ``ServerAliveCountMax``.
KEEPALIVE = 5.0
KEEPALIVE_COUNT = 3
#: What ``ssh`` says at ``LogLevel INFO`` on every session: not relayed.
_ROUTINE = re.compile(r"Connection to \S+ closed\.|Warning: Permanently added .*")
_INSTEAD = ("give the job what it needs on the machine that runs it instead: in a "
            "file that only your user can read there (chmod 600), such as "
            "~/.aws/credentials, which the AWS tools read themselves, or in the "
            "environment your account sets up on that machine")


def _is_credential(name: str) -> bool:
    """Whether an environment variable's name says that it holds a secret.

    >>> [_is_credential(n) for n in ("AWS_ACCESS_KEY_ID", "HF_TOKEN", "db_password",
    ...                              "PGPASS", "OMP_NUM_THREADS", "LD_LIBRARY_PATH")]
    [True, True, True, True, False, False]
    """
    upper = name.upper()
    return upper in _AWS or any(word in upper for word in _SECRET_WORDS)


def _warn(text: str, kind: str = "warning") -> None:
    print(f"mxlaunch: {kind}: {text}", file=sys.stderr, flush=True)


class _Env:
    """``launch.py``'s ``--env``, ``--env-worker`` and ``--env-server`` variables."""

    def __init__(self) -> None:
        self.roles: dict[str, dict[str, str]] = {"worker": {}, "server": {}}
        self.given = False

    def for_role(self, role: str | None) -> dict[str, str]:
        """The variables for a process of ``role``: ``{}`` for the scheduler."""
        return dict(self.roles.get(role or "", {}))


def _option_name(word: str) -> str | None:
    """The ``--env*`` option that ``word`` (an argument) names, as ``argparse`` reads
    it (abbreviations too), or None.

    >>> [_option_name(w) for w in ("--env", "--env=X", "--env-w", "--environ", "-n")]
    ['--env', '--env', '--env-worker', None, None]
    """
    name = word.partition("=")[0]
    if name == "--env":
        return name
    for full in ("--env-worker", "--env-server"):
        if len(name) > len("--env-") and full.startswith(name):
            return full
    return None


def _env_options(words: list[str], ssh: bool) -> tuple[list[str], _Env]:
    """Take the ``--env*`` options out of ``launch.py``'s ``words``; drop credentials.

    Returns the remaining words and the variables for each role. Like ``launch.py``'s
    parser, it reads the options anywhere before a ``--``.

    >>> rest, env = _env_options(["-n", "1", "--env-worker", "A:1", "--env-server=B:2",
    ...                           "cmd"], ssh=False)
    >>> rest, env.for_role("worker"), env.for_role("server"), env.for_role("scheduler")
    (['-n', '1', 'cmd'], {'A': '1'}, {'B': '2'}, {})
    """
    env, rest, i = _Env(), [], 0
    while i < len(words):
        word = words[i]
        if word == "--":
            rest += words[i:]
            break
        option = _option_name(word)
        if option is None:
            rest.append(word)
            i += 1
            continue
        if "=" in word:
            value, i = word.partition("=")[2], i + 1
        elif i + 1 < len(words):
            value, i = words[i + 1], i + 2
        else:
            raise SystemExit(f"mxlaunch: {option} needs a value")
        env.given = True
        if option == "--env":
            name, given_here = value, False
        else:
            name, sep, value = value.partition(":")
            if not sep:
                raise SystemExit(f"mxlaunch: {option} needs NAME:VALUE, got {name!r}")
            given_here = True
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise SystemExit(f"mxlaunch: {option} {name!r} is not a variable name")
        if _is_credential(name) and option == "--env" and not ssh:
            # --launcher local: dmlc_tracker/local.py (exec_cmd) gives every process a
            # copy of this environment, so nothing needs to be passed.
            _warn(f"--env {name}: with --launcher local every process inherits this "
                  f"environment, {name} included when it is set here, so it is not "
                  "passed on by mxlaunch; no variable goes on a command line", "note")
            continue
        if _is_credential(name):
            here = (" (its value is on this command's own command line too)"
                    if given_here else "")
            _warn(f"{option} {name} was dropped: its name looks like a credential, and "
                  "mxlaunch puts no credential on a command line, where every user of "
                  f"the machine can read it (ps){here}; {_INSTEAD}")
            continue
        if option == "--env":
            if name not in os.environ:
                _warn(f"--env {name}: {name} is not set here, so it is not passed on")
                continue
            value = os.environ[name]
        if ssh and "'" in value:
            raise SystemExit(f"mxlaunch: the value of {option} {name} contains a "
                             "single quote, which launch.py's ssh command line cannot "
                             "carry")
        roles = {"--env": ("worker", "server"), "--env-worker": ("worker",),
                 "--env-server": ("server",)}[option]
        for role in roles:
            env.roles[role][name] = value
    return rest, env


def _remote_word(value: str) -> str:
    """``value`` as one word of the remote shell, inside ``ssh``'s single quotes.

    >>> _remote_word("/usr/lib:/opt/lib"), _remote_word("a b$c")
    ('/usr/lib:/opt/lib', '"a b\\\\$c"')
    """
    if re.fullmatch(r"[\w.,:/@%+=-]*", value):
        return value
    return '"' + re.sub(r'([\\"$`])', r"\\\1", value) + '"'


def ssh_exports(pass_envs: Mapping[str, object],
                role_env: Mapping[str, str] | None = None) -> str:
    """What replaces ``dmlc_tracker.ssh.get_env``: the ``export NAME=VALUE;`` words
    that start a remote command, without any credential.

    ``pass_envs`` are the tracker's variables for the process (``DMLC_ROLE``...),
    ``role_env`` the ``--env*`` variables for its role.

    >>> from unittest import mock
    >>> here = {"AWS_SECRET_ACCESS_KEY": "do-not-show", "OMP_NUM_THREADS": "2"}
    >>> with mock.patch.dict(os.environ, here, clear=True):
    ...     ssh_exports({"DMLC_ROLE": "worker"})
    'export OMP_NUM_THREADS=2; export DMLC_ROLE=worker;'
    """
    values = {k: os.environ[k] for k in _SSH_PASSED if k in os.environ}
    values.update({str(k): str(v) for k, v in pass_envs.items()})
    values.update(role_env or {})
    return " ".join(f"export {k}={_remote_word(v)};" for k, v in values.items()
                    if not _is_credential(k))


def launch_py() -> Path:
    """The path of ``tools/launch.py`` in the installed MXNet package (MXNet is not
    imported).

    >>> launch_py().name
    'launch.py'
    """
    spec = importlib.util.find_spec("mxnet")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("mxlaunch: MXNet is not installed in this Python "
                         f"({sys.executable}): pip install mxnet==1.9.1")
    path = Path(spec.submodule_search_locations[0]) / "tools" / "launch.py"
    if not path.is_file():
        raise SystemExit(f"mxlaunch: {path} does not exist; this MXNet build has no "
                         "launcher")
    return path


class _Processes:
    """Stands in for the ``subprocess`` module inside ``dmlc_tracker``: records every
    process."""

    def __init__(self, ssh_tty: bool, keepalive: float = 5.0):
        self.ssh_tty = ssh_tty
        self.keepalive = keepalive
        self.started: list[tuple[str, subprocess.Popen]] = []
        self.said: dict[int, list[str]] = {}  # an ssh client's last lines on stderr
        self.lock = threading.Lock()
        self.stopping = False

    def __getattr__(self, name):  # anything else: the real module
        return getattr(subprocess, name)

    @staticmethod
    def _label(cmd, env) -> str:
        text = cmd if isinstance(cmd, str) else " ".join(map(str, cmd))
        role = (env or {}).get("DMLC_ROLE")
        if role is not None and role != "scheduler" and "DMLC_TASK_ID" in env:
            role = f"{role} (task {env['DMLC_TASK_ID']})"
        if role is None:
            role = next((r for r in ("scheduler", "server", "worker")
                         if f"DMLC_ROLE={r}" in text), "process")
        # ssh -o StrictHostKeyChecking=no HOST -p PORT '...'
        if text.startswith("ssh "):
            words = text.split()
            host = words[3] if len(words) > 3 else "?"
            return f"{role} on {host} (through ssh)"
        return role

    def _run(self, cmd, **kwargs) -> int:
        label = self._label(cmd, kwargs.get("env"))
        ssh = self.ssh_tty and isinstance(cmd, str) and cmd.startswith("ssh ")
        if ssh:
            cmd = ("ssh -tt -o BatchMode=yes -o ControlMaster=no -o ControlPath=none "
                   f"-o ServerAliveInterval={self.keepalive:g} "
                   f"-o ServerAliveCountMax={KEEPALIVE_COUNT} -o LogLevel=INFO "
                   + cmd[len("ssh "):])
            kwargs["stderr"] = subprocess.PIPE
        with self.lock:
            if self.stopping:
                return 1
            kwargs.setdefault("stdin", subprocess.DEVNULL)
            proc = subprocess.Popen(cmd, start_new_session=True, **kwargs)
            self.started.append((label, proc))
        if ssh:
            self._relay(proc)
        return proc.wait()

    def _relay(self, proc: subprocess.Popen) -> None:
        """Copy what an ``ssh`` client writes on its ``stderr`` (its own messages: with
        ``-tt`` the remote output arrives on its ``stdout``) to this process's, keeping
        the last line for the failure message."""
        said = self.said.setdefault(proc.pid, [])
        for raw in proc.stderr:  # type: ignore[union-attr]
            line = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
            if _ROUTINE.fullmatch(line.strip()):
                continue
            sys.stderr.write(line)
            sys.stderr.flush()
            if line.strip():
                said[:] = [line.strip()]

    def what_ssh_said(self, pid: int) -> str:
        """The last line an ``ssh`` client wrote on its ``stderr`` ('' if none)."""
        with self.lock:
            return " ".join(self.said.get(pid, []))

    def call(self, cmd, **kwargs) -> int:
        return self._run(cmd, **kwargs)

    def check_call(self, cmd, **kwargs) -> int:
        # Failures are reported by the watcher in main(), not by a traceback in a
        # thread.
        self._run(cmd, **kwargs)
        return 0

    def failed(self) -> tuple[str, int, int] | None:
        """The label, exit status and PID of the first process that failed."""
        with self.lock:
            for label, proc in self.started:
                code = proc.poll()
                if code not in (None, 0):
                    return label, code, proc.pid
        return None

    def all_done(self) -> bool:
        with self.lock:
            return bool(self.started) and all(p.poll() is not None
                                              for _, p in self.started)

    def stop(self) -> None:
        """SIGTERM every process group, then SIGKILL what is left; reap them all."""
        with self.lock:
            self.stopping = True
            procs = [p for _, p in self.started]
        stop_processes([p.pid for p in procs])
        for p in procs:
            p.wait()


def _patch(host_ip: str, local: bool, procs: _Processes, env: _Env) -> None:
    """Fix ``dmlc_tracker`` in this process (see the module's docstring)."""
    if not hasattr(threading.Thread, "isAlive"):
        threading.Thread.isAlive = threading.Thread.is_alive  # fix 1
    from dmlc_tracker import local as dmlc_local
    from dmlc_tracker import ssh as dmlc_ssh
    from dmlc_tracker import tracker

    tracker.get_host_ip = lambda hostIP=None: host_ip  # fix 2
    for module in (tracker, dmlc_local, dmlc_ssh):  # fixes 3 and 4
        module.subprocess = procs
    dmlc_ssh.get_env = lambda pass_envs: ssh_exports(  # fix 5
        pass_envs, env.for_role(pass_envs.get("DMLC_ROLE")))
    run_local = dmlc_local.exec_cmd

    def exec_cmd(cmd, num_attempt, role, taskid, pass_env):
        return run_local(cmd, num_attempt, role, taskid,
                         {**pass_env, **env.for_role(role)})

    dmlc_local.exec_cmd = exec_cmd

    class Scheduler(tracker.PSTracker):
        """``PSTracker`` whose port is picked on ``host_ip`` only (not on every
        interface)."""

        def __init__(self, hostIP, cmd, port=None, port_end=None, envs=None):
            self.cmd = cmd
            if cmd is None:
                return
            self.hostIP = hostIP
            self.port = free_port(hostIP)
            env = {**os.environ, "DMLC_ROLE": "scheduler",
                   "DMLC_PS_ROOT_URI": str(hostIP), "DMLC_PS_ROOT_PORT": str(self.port),
                   **{k: str(v) for k, v in (envs or {}).items()}}
            logging.info("mxlaunch: scheduler on %s:%d", hostIP, self.port)
            self.thread = threading.Thread(
                target=lambda: procs.check_call(cmd, env=env, shell=True,
                                                executable="/bin/bash"), daemon=True)
            self.thread.start()

    tracker.PSTracker = Scheduler
    if local:
        os.environ["DMLC_NODE_HOST"] = host_ip
    # dmlc_tracker's local threads raise on a failed process (with its whole environment
    # in the message): main() reports that failure itself, so print only other errors,
    # in one line.
    def excepthook(args) -> None:
        if not str(args.exc_value).startswith("Get nonzero return code"):
            print(f"mxlaunch: {args.exc_type.__name__}: {args.exc_value}",
                  file=sys.stderr)

    threading.excepthook = excepthook


def _seconds(name: str, value: str) -> float:
    """``value`` of option ``name`` as a positive number of seconds.

    >>> _seconds("--keepalive", "2"), _seconds("--timeout", "0.5")
    (2.0, 0.5)
    >>> _seconds("--keepalive", "soon")
    Traceback (most recent call last):
    ...
    SystemExit: mxlaunch: --keepalive needs a positive number of seconds, not 'soon'
    """
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise SystemExit(f"mxlaunch: {name} needs a positive number of seconds, "
                         f"not {value!r}")
    return seconds


def _options(argv: list[str]) -> tuple[str, float, float, list[str]]:
    host_ip, timeout, keepalive, rest = None, 3600.0, KEEPALIVE, list(argv)
    if rest[:1] in (["-h"], ["--help"]):
        print(__doc__)
        raise SystemExit(0)
    while rest and rest[0] in ("--host-ip", "--timeout", "--keepalive"):
        if len(rest) < 2:
            raise SystemExit(f"mxlaunch: {rest[0]} needs a value")
        name, value, rest = rest[0], rest[1], rest[2:]
        if name == "--host-ip":
            host_ip = value
        elif name == "--timeout":
            timeout = _seconds(name, value)
        else:
            keepalive = _seconds(name, value)
            if not keepalive.is_integer():  # ssh's ServerAliveInterval
                raise SystemExit(f"mxlaunch: --keepalive needs a whole number of "
                                 f"seconds, not {value!r}")
    if host_ip is None:
        raise SystemExit(
            "usage: python -m mgpu.cluster.mxlaunch --host-ip ADDRESS "
            "[--timeout SECONDS] [--keepalive SECONDS] LAUNCH.PY-OPTIONS COMMAND...\n"
            "--host-ip is required: "
            "the address of this machine that every host of the job can reach "
            "(the scheduler listens "
            "there); 127.0.0.1 for a job on this machine only")
    return host_ip, timeout, keepalive, rest


def _launcher(words: list[str]) -> str:
    """The value of ``launch.py``'s ``--launcher`` (``ssh`` when not given), as
    ``argparse`` reads it: abbreviations (``--l``, ``--launch``) too.

    >>> _launcher(["-n", "2", "--launcher", "local", "cmd"]), _launcher(["cmd"])
    ('local', 'ssh')
    >>> _launcher(["--launch", "local", "cmd"]), _launcher(["--la=local", "cmd"])
    ('local', 'local')
    """
    found = "ssh"
    for i, word in enumerate(words):
        if word == "--":
            break
        name, sep, value = word.partition("=")
        # --l is unambiguous among launch.py's long options (add_argument in main())
        if len(name) > len("--") and "--launcher".startswith(name):
            if sep:
                found = value
            elif i + 1 < len(words):
                found = words[i + 1]
    return found


def main(argv: list[str] | None = None) -> int:
    """Run MXNet's ``launch.py`` with the fixes above; return the exit status."""
    host_ip, timeout, keepalive, rest = _options(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s",
                        level=logging.INFO)
    spec = importlib.util.spec_from_file_location("mxnet_tools_launch", launch_py())
    launch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launch)  # defines main(); its __main__ block does not run
    launcher = _launcher(rest)
    rest, env = _env_options(rest, ssh=launcher == "ssh")
    if env.given and launcher not in ("local", "ssh"):
        raise SystemExit("mxlaunch: --env, --env-worker and --env-server work with "
                         f"--launcher local or ssh, not {launcher}")
    if launcher == "ssh":
        for name in _AWS:
            if name not in os.environ:
                continue
            if name == "AWS_SESSION_TOKEN":  # get_env does not export it either
                why = "mxlaunch passes no credential to them"
            else:
                why = ("dmlc_tracker would put its value on the ssh command line, "
                       "where every user of both machines can read it (ps)")
            _warn(f"{name} is set here but is not passed to the other machines: "
                  f"{why}; " + _INSTEAD)
    local = launcher == "local"
    procs = _Processes(ssh_tty=not local, keepalive=keepalive)
    _patch(host_ip, local, procs, env)
    outcome: list[BaseException | None] = []

    def run() -> None:
        sys.argv = ["launch.py", *rest]
        try:
            launch.main()
            outcome.append(None)
        except BaseException as err:  # SystemExit from argparse too
            outcome.append(err)

    thread = threading.Thread(target=run, daemon=True)
    start = time.monotonic()
    thread.start()
    try:
        while True:
            failed = procs.failed()
            if failed:
                label, code, pid = failed
                how = (f"was killed by signal {-code}" if code < 0 else
                       f"exited with code {code}")
                how += f" after {time.monotonic() - start:.1f} s"
                said = procs.what_ssh_said(pid)
                if "not responding" in said:
                    how += (f" (ssh said: {said} The host answered none of "
                            f"{KEEPALIVE_COUNT} keepalives sent {keepalive:g} s apart)")
                elif said:
                    how += f" (ssh said: {said})"
                elif code == 255 and "(through ssh)" in label:
                    how += (" (ssh's status when the connection fails or the remote "
                            "command is killed by a signal)")
                print(f"mxlaunch: the {label} {how}; the other processes would "
                      "wait for it forever, so the job was stopped", file=sys.stderr,
                      flush=True)
                procs.stop()
                return 1
            if outcome and outcome[0] is not None:
                err = outcome[0]
                procs.stop()
                if isinstance(err, SystemExit):
                    return err.code if isinstance(err.code, int) else 2
                print(f"mxlaunch: launch.py failed: {err!r}", file=sys.stderr)
                return 1
            if outcome and procs.all_done():
                return 0
            if time.monotonic() - start > timeout:
                print(f"mxlaunch: the job did not finish within {timeout:g} s; all its "
                      "processes were stopped", file=sys.stderr, flush=True)
                procs.stop()
                return 124
            time.sleep(0.05)
    except KeyboardInterrupt:
        procs.stop()
        return 130


if __name__ == "__main__":
    sys.exit(main())
