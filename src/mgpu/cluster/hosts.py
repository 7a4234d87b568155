"""Several hosts on one machine: network namespaces on a private bridge, shaped links, sshd.

:class:`Hosts` makes ``n`` hosts, each a Linux network namespace with its own address
on interface ``eth0``, joined by a veth pair to a bridge that the run creates and that
nothing else is attached to: the subnet exists only on that bridge, and nothing is
routed beyond it. The launching machine reaches the hosts through the bridge's own
address, :attr:`Hosts.host_ip` (give it to a launcher as the scheduler's address).

Each host's link is shaped with ``tc`` in both directions, as a full-duplex link of
``rate`` would be; ``delay`` and ``loss`` apply to what the host sends (``netem``). Each
host runs its own ``sshd`` on port 22 of its address, which accepts a key made for the
run; :meth:`Hosts.env` gives an environment whose ``ssh`` uses that key, so a launcher
with ``--launcher ssh -H hostfile`` reaches the hosts as it would real machines.

Everything is removed when the ``with`` block ends, on an exception and on ``SIGTERM``
too: the processes in each host (``ip netns pids``), the namespaces, the veth pairs, the
bridge and the run's key files. The run changes no file outside its own temporary
directory (no ``authorized_keys`` line: each ``sshd`` reads the run's own file). A run
that was killed with ``SIGKILL`` leaves its namespaces; ``python -m mgpu.cluster.hosts
--clean`` removes those of runs whose process is gone.

It needs root (``CAP_NET_ADMIN`` and ``CAP_SYS_ADMIN``), ``ip`` and ``tc`` (iproute2)
and, for ``ssh=True``, Debian's ``openssh-server``; :func:`hosts_missing` says what is
lacking. Standard library only.

The command runs a command while the hosts exist, with ``MGPU_HOST_IP`` (the bridge's
address) and ``MGPU_HOSTS`` (the hosts' addresses) in its environment and ``ssh`` set
up for them::

    python -m mgpu.cluster.hosts -n 3 --rate 200mbit --hostfile hosts -- \\
        bash -c 'ssh "$(head -1 hosts)" hostname -I'
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from mgpu.cluster.processes import TERM_GRACE, running, stop_processes

__all__ = ["Host", "Hosts", "HostsError", "Link", "clean_stale_hosts", "hosts_missing"]

SSHD = Path("/usr/sbin/sshd")
#: Where each run records its owner's PID, so that ``--clean`` can find dead runs.
STATE_DIR = Path("/run/mgpu-hosts")
_PREFIX = "mgpu"  # of every namespace, bridge and veth name a run makes
_RATE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit)$")
_TIME = re.compile(r"^\d+(\.\d+)?(us|ms|s)$")
_UNITS = {"bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


class HostsError(RuntimeError):
    """The hosts cannot be made here, or a command inside them failed."""


@dataclass(frozen=True)
class Link:
    """How a host's link is shaped.

    ``rate`` (``tc`` units, e.g. ``"100mbit"``, ``"1gbit"``) limits both directions;
    ``delay`` (e.g. ``"5ms"``) and ``loss`` (percent of packets) apply to what the host
    sends, so a message between two hosts with ``delay="5ms"`` each takes 5 ms longer
    and a round trip 10 ms longer. The default is an unshaped link.

    >>> Link(rate="100mbit").bits_per_second
    100000000.0
    >>> Link(rate="fast")
    Traceback (most recent call last):
    ...
    ValueError: rate must be a tc rate such as '100mbit' or '1gbit', not 'fast'
    """

    rate: str | None = None
    delay: str | None = None
    loss: float = 0.0

    def __post_init__(self) -> None:
        if self.rate is not None and not _RATE.match(self.rate):
            raise ValueError(f"rate must be a tc rate such as '100mbit' or '1gbit', "
                             f"not {self.rate!r}")
        if self.delay is not None and not _TIME.match(self.delay):
            raise ValueError(f"delay must be a tc time such as '5ms' or '200us', "
                             f"not {self.delay!r}")
        if not 0 <= self.loss < 100:
            raise ValueError(f"loss must be a percentage from 0 to below 100, "
                             f"not {self.loss!r}")

    @property
    def bits_per_second(self) -> float | None:
        """The rate in bit/s (``None`` when the link is not limited)."""
        if self.rate is None:
            return None
        number, unit = re.match(r"^([\d.]+)(\w+)$", self.rate).groups()  # type: ignore[union-attr]
        return float(number) * _UNITS[unit]


@dataclass(frozen=True)
class Host:
    """One emulated host: its name, namespace, address and the bridge side of its link."""

    name: str       #: ``host1``, ``host2``, ...
    namespace: str  #: the network namespace (``ip netns exec`` runs a command in it)
    address: str    #: its address on ``eth0``
    port: str       #: the bridge side of its veth pair, on the launching machine


def hosts_missing(ssh: bool = True) -> list[str]:
    """What this machine lacks to make hosts (empty when nothing is missing).

    >>> isinstance(hosts_missing(), list)
    True
    """
    lacks = []
    if os.geteuid() != 0:
        lacks.append("root (network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN: "
                     "run as root, e.g. with sudo)")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            lacks.append(f"the {tool!r} command (apt-get install iproute2)")
    if ssh and (not SSHD.is_file() or shutil.which("ssh") is None
                or shutil.which("ssh-keygen") is None):
        lacks.append(f"{SSHD}, ssh and ssh-keygen (apt-get install openssh-server "
                     "openssh-client)")
    if not Path("/proc/self/ns/net").exists():
        lacks.append("network namespaces (a Linux kernel with CONFIG_NET_NS)")
    return lacks


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``ip ARGS``; a failure raises :class:`HostsError` with ``ip``'s message."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise HostsError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done


def _used_networks() -> list[ipaddress.IPv4Network]:
    """The IPv4 networks of this machine's addresses and routes."""
    nets = []
    for what in (["-4", "-j", "addr"], ["-4", "-j", "route"]):
        for entry in json.loads(_ip(*what).stdout or "[]"):
            for info in entry.get("addr_info", [entry]):
                dst = info.get("local") or info.get("dst")
                if not dst or dst == "default":
                    continue
                plen = info.get("prefixlen", 32 if "/" not in dst else None)
                net = dst if plen is None else f"{dst}/{plen}"
                nets.append(ipaddress.ip_network(net, strict=False))
    return nets


def _free_subnet(rng: random.Random) -> ipaddress.IPv4Network:
    """A /24 in 10.0.0.0/8 that overlaps no address or route of this machine."""
    used = _used_networks()
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{rng.randrange(100, 250)}.{rng.randrange(256)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise HostsError("found no free /24 in 10.0.0.0/8 for the hosts' bridge")


def _owned_runs() -> dict[str, int]:
    """The runs recorded in :data:`STATE_DIR`, with their owners' PIDs."""
    runs = {}
    for path in STATE_DIR.glob("*.pid") if STATE_DIR.is_dir() else ():
        try:
            runs[path.stem] = int(path.read_text())
        except (OSError, ValueError):
            runs[path.stem] = -1
    return runs


def _interfaces(run: str) -> list[str]:
    """The network interfaces of run ``run`` on the launching machine."""
    return [link["ifname"] for link in json.loads(_ip("-j", "link").stdout or "[]")
            if link.get("ifname", "").startswith(f"{_PREFIX}{run}")]


def _remove_run(run: str) -> list[str]:
    """Stop the processes of run ``run``'s hosts and delete its namespaces, veths and
    bridge; return what could not be removed."""
    left = []
    names = [n.split()[0] for n in _ip("netns", "list").stdout.splitlines() if n.strip()]
    mine = [n for n in names if n.startswith(f"{_PREFIX}{run}-")]
    pids = [int(p) for ns in mine
            for p in _ip("netns", "pids", ns, check=False).stdout.split()]
    still = stop_processes(pids, grace=TERM_GRACE) if pids else []
    if still:
        left.append(f"processes {still}")
    for ns in mine:
        if _ip("netns", "del", ns, check=False).returncode != 0:
            left.append(f"namespace {ns}")
    # A namespace's veth ends vanish with it, a moment later; the bridge stays.
    for _ in range(100):
        ours = _interfaces(run)
        for name in ours:
            _ip("link", "del", name, check=False)
        if not ours:
            break
        time.sleep(0.05)
    left += [f"interface {name}" for name in _interfaces(run)]
    (STATE_DIR / f"{run}.pid").unlink(missing_ok=True)
    return left


def clean_stale_hosts() -> list[str]:
    """Remove the hosts of earlier runs whose process is gone (killed with ``SIGKILL``,
    say); return the runs removed. Runs whose process is alive are left alone."""
    if hosts_missing(ssh=False):
        return []
    stale = [run for run, pid in _owned_runs().items() if pid <= 0 or not running([pid])]
    for run in stale:
        _remove_run(run)
    return stale


@dataclass
class Hosts:
    """``n`` emulated hosts, as a context manager (see the module's documentation).

    ``link`` shapes every host's link; ``links`` maps a host's index (0 for ``host1``)
    to a link of its own. With ``ssh=True`` each host runs an ``sshd``.
    """

    n: int = 2
    link: Link = field(default_factory=Link)
    links: Mapping[int, Link] = field(default_factory=dict)
    ssh: bool = True
    hosts: list[Host] = field(default_factory=list, init=False)
    host_ip: str = field(default="", init=False)  #: the bridge's address
    run: str = field(default="", init=False)      #: this run's id, in every name it makes
    _dir: Path | None = field(default=None, init=False, repr=False)
    _sshd: list[subprocess.Popen] = field(default_factory=list, init=False, repr=False)
    _old_term: object = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or not 1 <= self.n <= 200:
            raise ValueError(f"n must be a number of hosts from 1 to 200, not {self.n!r}")
        bad = [i for i in self.links if not 0 <= i < self.n]
        if bad:
            raise ValueError(f"links has host indices {bad}; with n={self.n} they run "
                             f"from 0 to {self.n - 1}")

    # -- making and removing ---------------------------------------------------------

    def __enter__(self) -> Hosts:
        lacks = hosts_missing(self.ssh)
        if lacks:
            raise HostsError("cannot make hosts here; missing: " + "; ".join(lacks))
        clean_stale_hosts()
        rng = random.Random()
        self.run = f"{rng.randrange(16**5):05x}"
        STATE_DIR.mkdir(mode=0o700, exist_ok=True)
        (STATE_DIR / f"{self.run}.pid").write_text(str(os.getpid()))
        self._trap_term()
        try:
            self._make(rng)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            left = _remove_run(self.run) if self.run else []
            for proc in self._sshd:
                proc.wait(TERM_GRACE)
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
        finally:
            self._untrap_term()
        if left and exc[0] is None:
            raise HostsError("could not remove " + ", ".join(left))

    def _trap_term(self) -> None:
        """Turn ``SIGTERM`` into :class:`SystemExit` while the hosts exist, so that the
        ``with`` block's cleanup runs (only possible in the main thread)."""
        import threading
        if threading.current_thread() is not threading.main_thread():
            return

        def term(signum: int, frame: FrameType | None) -> None:
            raise SystemExit(128 + signum)

        self._old_term = signal.signal(signal.SIGTERM, term)

    def _untrap_term(self) -> None:
        if self._old_term is not None:
            signal.signal(signal.SIGTERM, self._old_term)  # type: ignore[arg-type]
            self._old_term = None

    def _make(self, rng: random.Random) -> None:
        net = _free_subnet(rng)
        addresses = list(net.hosts())
        bridge = f"{_PREFIX}{self.run}br"
        self.host_ip = str(addresses[-1])
        _ip("link", "add", bridge, "type", "bridge")
        _ip("addr", "add", f"{self.host_ip}/{net.prefixlen}", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for i in range(self.n):
            host = Host(name=f"host{i + 1}", namespace=f"{_PREFIX}{self.run}-h{i + 1}",
                        address=str(addresses[i]), port=f"{_PREFIX}{self.run}v{i + 1}")
            peer = f"{_PREFIX}{self.run}p{i + 1}"
            _ip("netns", "add", host.namespace)
            _ip("link", "add", host.port, "type", "veth", "peer", "name", peer)
            _ip("link", "set", host.port, "master", bridge)
            _ip("link", "set", host.port, "up")
            _ip("link", "set", peer, "netns", host.namespace)
            _ip("-n", host.namespace, "link", "set", peer, "name", "eth0")
            _ip("-n", host.namespace, "addr", "add", f"{host.address}/{net.prefixlen}",
                "dev", "eth0")
            _ip("-n", host.namespace, "link", "set", "eth0", "up")
            _ip("-n", host.namespace, "link", "set", "lo", "up")
            self.hosts.append(host)
            self.shape(host, self.links.get(i, self.link))
        if self.ssh:
            self._start_sshd()

    # -- links -------------------------------------------------------------------------

    def shape(self, host: Host, link: Link) -> None:
        """Give ``host`` the link ``link`` (replacing its current shaping)."""
        for namespace, dev, own in ((host.namespace, "eth0", True), (None, host.port, False)):
            prefix = ["ip", "netns", "exec", namespace] if namespace else []
            subprocess.run([*prefix, "tc", "qdisc", "del", "dev", dev, "root"],
                           capture_output=True)
            netem = []
            if own and link.delay:
                netem += ["delay", link.delay]
            if own and link.loss:
                netem += ["loss", f"{link.loss}%"]
            tbf = (["tbf", "rate", link.rate, "burst", "256kb", "latency", "400ms"]
                   if link.rate else [])
            steps = []
            if netem:
                steps.append(["root", "handle", "1:", "netem", *netem, "limit", "100000"])
                if tbf:
                    steps.append(["parent", "1:1", "handle", "10:", *tbf])
            elif tbf:
                steps.append(["root", "handle", "10:", *tbf])
            for step in steps:
                done = subprocess.run([*prefix, "tc", "qdisc", "add", "dev", dev, *step],
                                      capture_output=True, text=True)
                if done.returncode != 0:
                    raise HostsError(f"tc qdisc add dev {dev} {' '.join(step)} failed: "
                                     f"{done.stderr.strip()}")

    def set_link(self, host: Host, up: bool) -> None:
        """Plug ``host``'s cable in (``up=True``) or pull it out: its packets stop, its
        processes go on, and nobody is told (as when a switch port or cable fails)."""
        _ip("link", "set", host.port, "up" if up else "down")

    # -- processes ---------------------------------------------------------------------

    def command(self, host: Host, argv: Sequence[str]) -> list[str]:
        """``argv`` as a command that runs inside ``host``."""
        return ["ip", "netns", "exec", host.namespace, *argv]

    def processes(self, host: Host, *, sshd: bool = False) -> list[int]:
        """The PIDs of the processes in ``host`` (without its ``sshd`` unless ``sshd``)."""
        pids = [int(p) for p in _ip("netns", "pids", host.namespace).stdout.split()]
        if sshd:
            return pids
        own = {p.pid for p in self._sshd}
        return [p for p in pids if p not in own]

    def kill(self, host: Host) -> list[int]:
        """``SIGKILL`` every process in ``host`` but its ``sshd`` (as when a machine's
        jobs are killed); return their PIDs."""
        pids = self.processes(host)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    def throughput(self, sender: Host, receiver: Host, megabytes: float = 20.0) -> float:
        """Bit/s of one TCP connection that sends ``megabytes`` from ``sender`` to
        ``receiver`` (measured at the receiver, from the first byte to the last)."""
        port = 5201
        server = subprocess.Popen(
            self.command(receiver, [sys.executable, "-c", _RECEIVER, receiver.address,
                                    str(port)]), stdout=subprocess.PIPE, text=True)
        assert server.stdout is not None
        server.stdout.readline()  # "listening"
        subprocess.run(self.command(sender, [sys.executable, "-c", _SENDER, receiver.address,
                                             str(port), str(int(megabytes * 1e6))]),
                       check=True, timeout=600)
        out, _ = server.communicate(timeout=60)
        return float(out)

    # -- ssh ---------------------------------------------------------------------------

    def _start_sshd(self) -> None:
        """An ``sshd`` on port 22 of every host, accepting the run's own key."""
        self._dir = Path(tempfile.mkdtemp(prefix=f"mgpu-hosts-{self.run}-"))
        d = self._dir
        for key in ("host_key", "id"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
                            f"mgpu-hosts-{self.run}", "-f", str(d / key)], check=True)
        shutil.copy(d / "id.pub", d / "authorized_keys")
        (d / "ssh_config").write_text(
            f"Host *\n  IdentityFile {d / 'id'}\n  IdentitiesOnly yes\n"
            "  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n  BatchMode yes\n"
            "  ConnectTimeout 10\n  LogLevel ERROR\n")
        (d / "bin").mkdir()
        (d / "bin" / "ssh").write_text(
            f'#!/bin/sh\nexec {shutil.which("ssh")} -F {d / "ssh_config"} "$@"\n')
        (d / "bin" / "ssh").chmod(0o755)
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        for host in self.hosts:
            config = d / f"sshd_{host.name}"
            config.write_text(
                f"ListenAddress {host.address}:22\nHostKey {d / 'host_key'}\n"
                f"AuthorizedKeysFile {d / 'authorized_keys'}\n"
                "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
                f"PidFile {d / f'sshd_{host.name}.pid'}\n")
            log = open(d / f"sshd_{host.name}.log", "wb")  # noqa: SIM115 (kept by sshd)
            self._sshd.append(subprocess.Popen(
                self.command(host, [str(SSHD), "-D", "-e", "-f", str(config)]),
                stdin=subprocess.DEVNULL, stderr=log, start_new_session=True))
            log.close()
        for host, proc in zip(self.hosts, self._sshd):
            self._wait_for_port(host, proc)

    def _wait_for_port(self, host: Host, proc: subprocess.Popen, seconds: float = 10) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with socket.socket() as s:
                s.settimeout(1)
                if s.connect_ex((host.address, 22)) == 0:
                    return
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        log = (self._dir / f"sshd_{host.name}.log").read_text()  # type: ignore[operator]
        raise HostsError(f"sshd did not start on {host.name} ({host.address}): {log}")

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) with the run's ``ssh`` first
        on ``PATH``, ``MGPU_HOST_IP`` and ``MGPU_HOSTS``."""
        env = dict(os.environ if base is None else base)
        if self._dir is not None:
            env["PATH"] = f"{self._dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["MGPU_HOST_IP"] = self.host_ip
        env["MGPU_HOSTS"] = " ".join(h.address for h in self.hosts)
        return env

    def hostfile(self, path: str | os.PathLike[str], hosts: Sequence[Host] | None = None,
                 slots: int | None = None) -> Path:
        """Write a host file of ``hosts`` (default: all), one address a line, as
        ``mxlaunch -H`` reads it; with ``slots``, ``address slots=N`` lines, as
        ``horovodrun --hostfile`` reads them. A file that exists is not overwritten."""
        path = Path(path)
        if path.exists():
            raise FileExistsError(f"{path} exists: remove it or give another path")
        lines = [h.address if slots is None else f"{h.address} slots={slots}"
                 for h in (self.hosts if hosts is None else hosts)]
        path.write_text("".join(f"{line}\n" for line in lines))
        return path

    def __iter__(self) -> Iterator[Host]:
        return iter(self.hosts)

    def __getitem__(self, i: int) -> Host:
        return self.hosts[i]


_RECEIVER = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); print("listening", flush=True)
c, _ = s.accept(); n = 0; start = None
while True:
    b = c.recv(1 << 20)
    if not b: break
    if start is None: start = time.perf_counter()
    n += len(b)
print(8 * n / (time.perf_counter() - start))
"""
_SENDER = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
s.sendall(b"x" * int(sys.argv[3])); s.close()
"""


def main(argv: list[str] | None = None) -> int:
    """``python -m mgpu.cluster.hosts``: run a command while the hosts exist."""
    parser = argparse.ArgumentParser(
        prog="python -m mgpu.cluster.hosts",
        description="Make N hosts (network namespaces on a private bridge, each with sshd), "
                    "run COMMAND with MGPU_HOST_IP, MGPU_HOSTS and ssh set up for them, then "
                    "remove everything. Needs root.")
    parser.add_argument("-n", type=int, default=2, help="number of hosts (default 2)")
    parser.add_argument("--rate", help="each link's rate, e.g. 100mbit, 1gbit")
    parser.add_argument("--delay", help="delay added to what each host sends, e.g. 5ms")
    parser.add_argument("--loss", type=float, default=0.0,
                        help="percent of each host's packets dropped")
    parser.add_argument("--hostfile", help="write the hosts' addresses to this new file")
    parser.add_argument("--clean", action="store_true",
                        help="remove the hosts of runs whose process is gone, then exit")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG ...]")
    args = parser.parse_args(argv)
    if args.clean:
        print("removed runs:", " ".join(clean_stale_hosts()) or "none")
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give a command after --, e.g. -- bash")
    try:
        link = Link(rate=args.rate, delay=args.delay, loss=args.loss)
        with Hosts(args.n, link) as hosts:
            if args.hostfile:
                hosts.hostfile(args.hostfile)
            try:
                return subprocess.run(command, env=hosts.env()).returncode
            finally:
                if args.hostfile:
                    Path(args.hostfile).unlink(missing_ok=True)
    except (HostsError, ValueError, FileExistsError) as err:
        print(f"python -m mgpu.cluster.hosts: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
