"""Several hosts on one machine: namespaces on a private bridge, shaped links, sshd.

:class:`Hosts` makes ``n`` hosts, each a Linux network namespace with its own address
on interface ``eth0``, joined by a veth pair to a bridge that the run creates and that
nothing else is attached to: the subnet (a free ``/24``, taken first from
``198.18.0.0/15``, the range reserved for benchmarking (RFC 2544), then from the private
ranges; one that overlaps no address or route of this machine) exists only on that
bridge, and the hosts have no route beyond it. The launching machine reaches the hosts
through the bridge's own address, :attr:`Hosts.host_ip` (give it to a launcher as the
scheduler's address). Once the hosts exist, host1 connects to host2 and to the bridge's
address: if a firewall drops that (``br_netfilter`` with a ``FORWARD`` policy of
``DROP``, as Docker sets), entering the ``with`` block fails and says so.

Each host's link is shaped with ``tc`` in both directions, as a full-duplex link of
``rate`` would be: ``tbf`` on the host's ``eth0`` (what it sends) and on the bridge side
of its veth pair (what it receives). ``delay`` applies to what the host sends (``netem``
on its ``eth0``). ``loss`` drops a random share of the packets the host sends, after
they have left it: at the bridge side's ingress, a classic BPF filter picks them and
``mirred`` redirects them into an ``ifb`` device whose queue holds none. The host's
TCP is told nothing and retransmits them, as after a loss on a cable; what the host
receives is not dropped (give the other hosts a loss for that). Each host runs its own
``sshd`` on port 22 of its address, which accepts a key made for the run;
:meth:`Hosts.env` gives an environment whose ``ssh`` uses that key, so a launcher with
``--launcher ssh -H hostfile`` reaches the hosts as it would real machines.

Everything is removed when the ``with`` block ends, on an exception and on ``SIGINT``,
``SIGTERM`` or ``SIGHUP`` too (in the main thread; a signal that arrives while the hosts
are being removed waits until they are gone): every process in a host or holding one
open (until a look finds none), the namespaces, the veth pairs, the ``ifb`` devices,
the bridge and the run's directory of keys and logs. Outside that directory and its
record in ``/run/mgpu-hosts``, a run writes only each host's
``/etc/netns/NAMESPACE/hosts`` (removed with the host), which ``ip netns exec`` mounts
over ``/etc/hosts`` in the host: there this machine's name resolves to the host's own
address, as a machine's name does on a cluster (Gloo, under Horovod 0.28.1, binds to
that address whatever ``--network-interface`` says). It creates the directories
``/etc/netns`` and, with ``ssh``, ``/run/sshd`` (``sshd``'s privilege separation
directory) where they are missing, and leaves them; it adds no ``authorized_keys``
line (each ``sshd`` reads the run's own file) and changes no other file.
Every name a run makes holds its id (:attr:`Hosts.run`), so runs in several processes
at once do not collide. A run whose process was killed with ``SIGKILL`` leaves its
hosts, directory and record; the next run that starts, or ``python -m
mgpu.cluster.hosts --clean`` (:func:`clean_stale_hosts`), removes those, and never
touches a run whose process is alive.

It needs root (``CAP_NET_ADMIN`` and ``CAP_SYS_ADMIN``), ``ip`` and ``tc`` (Debian's
``iproute2``), a kernel with the ``tbf`` qdisc (for a loss also ``ingress``,
``cls_bpf``, ``act_mirred`` and ``ifb``; for a delay ``netem``: :func:`netem_missing`)
and, for ``ssh=True``, Debian's ``openssh-server``; :func:`hosts_missing` says what is
lacking. Standard library only.

The command runs a command while the hosts exist, with ``MGPU_HOST_IP`` (the bridge's
address) and ``MGPU_HOSTS`` (the hosts' addresses) in its environment and ``ssh`` set
up for them, and exits with the command's status::

    python -m mgpu.cluster.hosts -n 3 --rate 200mbit --hostfile hosts -- \\
        sh -c 'ssh "$(head -1 hosts)" hostname -I'
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import gzip
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
import threading
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from mgpu.cluster.processes import (
    TERM_GRACE,
    descendants,
    processes,
    running,
    stop_processes,
)

__all__ = ["Host", "Hosts", "HostsError", "Link", "clean_stale_hosts", "hosts_missing",
           "netem_missing"]

SSHD = Path("/usr/sbin/sshd")
#: Where each run records its owner (PID and start time) and its directory, so that
#: ``--clean`` can tell dead runs from live ones.
STATE_DIR = Path("/run/mgpu-hosts")
#: ``ip netns exec NS`` mounts the files of ``/etc/netns/NS`` over those of ``/etc``.
NETNS_ETC = Path("/etc/netns")
#: ``ip netns add NS`` binds the namespace to ``/run/netns/NS``.
NETNS_RUN = Path("/run/netns")
_PREFIX = "mgpu"  # of every namespace, bridge and veth name a run makes
_RUN_NAME = re.compile(rf"^{_PREFIX}([0-9a-f]{{5}})(-h\d+|br|v\d+|p\d+|i\d+)$")
_RATE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit)$")
_TIME = re.compile(r"^\d+(\.\d+)?(us|ms|s)$")
_UNITS = {"bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
# The ranges the hosts' /24 is taken from, in this order: the one reserved for
# benchmarking (RFC 2544), which no VPN or container network should use, then the
# private ones (one of those may be reached through a default route, unseen).
_POOLS = ("198.18.0.0/15", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
# Signals that end the process by default: while hosts exist they raise SystemExit
# (SIGINT, when its handler is Python's own, KeyboardInterrupt).
_TRAPPED = (signal.SIGTERM, signal.SIGHUP)
_CAP_NET_ADMIN, _CAP_SYS_ADMIN = 12, 21


class HostsError(RuntimeError):
    """The hosts cannot be made here, or a command inside them failed."""


@dataclass(frozen=True)
class Link:
    """How a host's link is shaped.

    ``rate`` (``tc`` units, e.g. ``"100mbit"``, ``"1gbit"``) limits both directions.
    ``delay`` (e.g. ``"5ms"``) applies to what the host sends, so a message between two
    hosts with ``delay="5ms"`` each takes 5 ms longer and a round trip 10 ms longer.
    ``loss`` (percent) drops that share of the packets the host sends, at random, after
    they have left the host (on the bridge side of its link, where its TCP cannot see
    it): the sender's TCP retransmits them, as after a loss on a real cable. What the
    host receives is not dropped: for a lossy path both ways, give both hosts a loss.
    The default is an unshaped link. A delay needs the kernel's ``netem`` qdisc
    (:func:`netem_missing`; without it a delay is refused, and on a kernel without
    ``netem``, such as the one this book is built on, that path is untested); loss
    does not (it uses ``ifb``, ``cls_bpf`` and ``act_mirred``).

    >>> Link(rate="100mbit").bits_per_second
    100000000.0
    >>> Link(rate="fast")
    Traceback (most recent call last):
    ...
    ValueError: rate must be a tc rate such as '100mbit' or '1gbit', not 'fast'
    >>> Link(loss=100)
    Traceback (most recent call last):
    ...
    ValueError: loss must be a percentage from 0 to below 100, not 100
    """

    rate: str | None = None
    delay: str | None = None
    loss: float = 0.0

    def __post_init__(self) -> None:
        if self.rate is not None and not _RATE.match(str(self.rate)):
            raise ValueError(f"rate must be a tc rate such as '100mbit' or '1gbit', "
                             f"not {self.rate!r}")
        if self.delay is not None and not _TIME.match(str(self.delay)):
            raise ValueError(f"delay must be a tc time such as '5ms' or '200us', "
                             f"not {self.delay!r}")
        if (not isinstance(self.loss, (int, float)) or isinstance(self.loss, bool)
                or not 0 <= self.loss < 100):
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
    """One emulated host: its name, namespace, address and its link's bridge side."""

    name: str       #: ``host1``, ``host2``, ...
    namespace: str  #: the network namespace (``ip netns exec`` runs a command in it)
    address: str    #: its address on ``eth0``
    port: str       #: the bridge side of its veth pair, on the launching machine


def _capabilities() -> int:
    """This process's effective capabilities (a bit mask), from ``/proc``."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def hosts_missing(ssh: bool = True) -> list[str]:
    """What this machine lacks to make hosts (empty when nothing is missing), each
    with how to get it.

    >>> isinstance(hosts_missing(), list)
    True
    """
    lacks = []
    if os.geteuid() != 0:
        lacks.append("root (network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN: "
                     "run as root, e.g. with sudo)")
    elif ~_capabilities() & (1 << _CAP_NET_ADMIN | 1 << _CAP_SYS_ADMIN):
        lacks.append("CAP_NET_ADMIN and CAP_SYS_ADMIN (this root lacks them: in a "
                     "container, run it with --cap-add NET_ADMIN --cap-add SYS_ADMIN)")
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


def _hint(message: str) -> str:
    """What to do about a failure of ``ip`` or ``tc`` whose error is ``message``."""
    if "Operation not permitted" in message:
        return (" (this process may not change the network: run as root with "
                "CAP_NET_ADMIN and CAP_SYS_ADMIN)")
    if "qdisc kind is unknown" in message or "Unknown device type" in message:
        return (" (the kernel lacks a module: modprobe sch_tbf sch_ingress cls_bpf "
                "act_mirred ifb, and sch_netem for a delay)")
    return ""


@functools.lru_cache(maxsize=1)
def netem_missing() -> str:
    """Why this kernel cannot add ``delay`` to a link (its ``netem`` qdisc is not
    built, says ``/proc/config.gz``), or ``""`` when nothing says so.

    >>> isinstance(netem_missing(), str)
    True
    """
    try:
        with gzip.open("/proc/config.gz", "rt") as config:
            if "# CONFIG_NET_SCH_NETEM is not set\n" in config.read():
                return ("this kernel is built without it (CONFIG_NET_SCH_NETEM): "
                        "use a kernel with sch_netem, or links without delay")
    except OSError:
        pass
    return ""


def _drop_program(loss: float) -> str:
    """A classic BPF program, as ``tc filter ... bpf bytecode`` takes it, that matches a
    random ``loss`` percent of the packets: ``ld rand`` (``SKF_AD_RANDOM``); ``jge
    threshold``; ``ret 1`` (a match); ``ret 0``.

    >>> _drop_program(5)
    '4,32 0 0 4294963256,53 0 1 4080218931,6 0 0 1,6 0 0 0'
    """
    threshold = min(2**32 - 1, round((1 - loss / 100) * 2**32))
    return f"4,32 0 0 {2**32 - 0x1000 + 56},53 0 1 {threshold},6 0 0 1,6 0 0 0"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``ip ARGS``; a failure raises :class:`HostsError` with ``ip``'s message."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        error = done.stderr.strip()
        raise HostsError(f"ip {' '.join(args)} failed: {error}{_hint(error)}")
    return done


def _tc(namespace: str | None, *args: str, check: bool = True) -> None:
    """Run ``tc ARGS`` (in ``namespace`` if given); a failure raises :class:`HostsError`
    with ``tc``'s message."""
    argv = ["tc", *(["-n", namespace] if namespace else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True)
    if check and done.returncode != 0:
        error = done.stderr.strip()
        raise HostsError(f"{' '.join(argv)} failed: {error}{_hint(error)}")


def _used_networks() -> list[ipaddress.IPv4Network]:
    """The IPv4 networks of this machine's addresses and routes (every table)."""
    nets = []
    for what in (["-4", "-j", "addr"], ["-4", "-j", "route", "show", "table", "all"]):
        for entry in json.loads(_ip(*what).stdout or "[]"):
            for info in entry.get("addr_info", [entry]):
                dst = info.get("local") or info.get("dst")
                if not dst or dst == "default":
                    continue
                plen = info.get("prefixlen", 32 if "/" not in dst else None)
                net = dst if plen is None else f"{dst}/{plen}"
                with contextlib.suppress(ValueError):
                    nets.append(ipaddress.ip_network(net, strict=False))
    return nets


def _free_subnet(rng: random.Random,
                 used: Sequence[ipaddress.IPv4Network] | None = None
                 ) -> ipaddress.IPv4Network:
    """A random /24 of the private ranges that overlaps no network in ``used``
    (default: this machine's addresses and routes).

    >>> net = _free_subnet(random.Random(0), used=[ipaddress.ip_network("10.0.0.0/8")])
    >>> net.prefixlen, net.is_private, net.subnet_of(ipaddress.ip_network("10.0.0.0/8"))
    (24, True, False)
    """
    used = _used_networks() if used is None else used
    for pool in map(ipaddress.ip_network, _POOLS):
        subnets = 1 << (24 - pool.prefixlen)
        for _ in range(100):
            net = ipaddress.ip_network(
                (int(pool.network_address) + (rng.randrange(subnets) << 8), 24))
            if not any(net.overlaps(u) for u in used):
                return net
    raise HostsError(f"found no /24 in {', '.join(_POOLS)} that overlaps none of this "
                     "machine's addresses and routes (ip -4 route show table all)")


@contextlib.contextmanager
def _state_lock() -> Iterator[None]:
    """Hold the lock of :data:`STATE_DIR`: one run at a time records itself, picks its
    subnet or removes dead runs."""
    STATE_DIR.mkdir(mode=0o700, exist_ok=True)
    with open(STATE_DIR / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), ``None`` if it is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _records() -> dict[str, dict]:
    """The runs recorded in :data:`STATE_DIR`: ``{run: {"pid", "start", "dir"}}`` (an
    unreadable record has ``pid`` -1)."""
    runs: dict[str, dict] = {}
    for path in sorted(STATE_DIR.glob("*.json")) + sorted(STATE_DIR.glob("*.pid")):
        young = False
        try:
            text = path.read_text()
            record = json.loads(text) if path.suffix == ".json" else {"pid": int(text)}
            if not isinstance(record, dict):
                raise ValueError(f"not a record: {text!r}")
        except (OSError, ValueError):  # being written (by an older version), or broken
            with contextlib.suppress(OSError):
                young = time.time() - path.stat().st_mtime < 10
            record = {"pid": -1, "young": young}
        runs.setdefault(path.stem, {"start": None, "dir": None, **record})
    return runs


def _alive(record: Mapping) -> bool:
    """Whether the process that made a run still runs (the same process: a PID that
    was reused by another process since does not count)."""
    pid = record.get("pid", -1)
    if record.get("young"):
        return True
    if not isinstance(pid, int) or pid <= 0 or not running([pid]):
        return False
    return record.get("start") is None or _start_time(pid) == record["start"]


def _names() -> tuple[list[str], list[str]]:
    """The namespaces and the interfaces (on this machine) that runs made."""
    namespaces = [n.split()[0] for n in _ip("netns", "list").stdout.splitlines()
                  if n.strip() and _RUN_NAME.match(n.split()[0])]
    interfaces = [link.get("ifname", "") for link in
                  json.loads(_ip("-j", "link").stdout or "[]")]
    return namespaces, [i for i in interfaces if _RUN_NAME.match(i)]


def _run_of(name: str) -> str:
    return _RUN_NAME.match(name).group(1)  # type: ignore[union-attr]


def _namespace_users(inodes: Set[int]) -> list[int]:
    """The live processes (this one aside) that hold one of the network namespaces
    ``inodes`` (their nsfs inode numbers) open, or are in one.

    An open namespace is found by an fd that links to ``net:[INODE]`` or to a file of
    ``/run/netns`` (as ``ip netns exec`` holds one between opening it and entering it;
    such a file links to ``/`` once its name is deleted);
    the fds are read before the namespace a process is in, so that one that enters and
    closes meanwhile is seen in one or the other. Not seen: a thread that entered a
    namespace, a socket made in one and kept outside it.

    >>> child = subprocess.Popen(["sleep", "5"])
    >>> inode = os.stat(f"/proc/{child.pid}/ns/net").st_ino  # this one's namespace
    >>> child.pid in _namespace_users({inode}), os.getpid() in _namespace_users({inode})
    (True, False)
    >>> child.kill(); child.wait() and None
    """
    found = []
    for pid, _, _ in processes():
        if pid == os.getpid():
            continue
        proc = Path("/proc", str(pid))
        try:
            with os.scandir(proc / "fd") as fds:
                held = [(fd.path, os.readlink(fd.path)) for fd in fds]
            in_one = os.stat(proc / "ns" / "net").st_ino in inodes
        except OSError:  # gone meanwhile
            continue
        for path, link in held:
            if in_one:
                break
            with contextlib.suppress(OSError, ValueError):
                if link.startswith("net:["):
                    in_one = int(link[5:-1]) in inodes
                elif link == "/" or link.startswith(f"{NETNS_RUN}/"):
                    # (a file of /run/netns reads as "/" once its name is deleted)
                    in_one = os.stat(path).st_ino in inodes
        if in_one:
            found.append(pid)
    return found


def _stop_users(inodes: Set[int], pids: set[int]) -> None:
    """Stop the users of the namespaces ``inodes`` (:func:`_namespace_users`), looking
    again until a look finds none (twenty at most); add their PIDs to ``pids``."""
    for _ in range(20):
        found = _namespace_users(inodes)
        if not found:
            return
        pids.update(found)
        stop_processes(found, grace=TERM_GRACE)


def _remove_run(run: str, directory: str | os.PathLike[str] | None = None) -> list[str]:
    """Stop the processes of run ``run``'s hosts, delete its namespaces, veths, ``ifb``
    devices, bridge, directory and record; return what is still there afterwards.

    :data:`NETNS_ETC` itself stays (another run, or the administrator, may use it)."""
    namespaces = [n for n in _names()[0] if _run_of(n) == run]
    # Each namespace is held open until the end, so that its inode number is not given
    # to another namespace while the processes are looked for.
    nsfs = os.stat("/proc/self/ns/net").st_dev
    pinned: list[int] = []
    for ns in namespaces:
        with contextlib.suppress(OSError):
            fd = os.open(NETNS_RUN / ns, os.O_RDONLY | os.O_CLOEXEC)
            if os.fstat(fd).st_dev == nsfs:  # (not a file left by a failed "netns add")
                pinned.append(fd)
            else:
                os.close(fd)
    pids: set[int] = set()
    try:
        inodes = {os.fstat(fd).st_ino for fd in pinned}
        # Every process in a host, or holding one open, is stopped while the hosts have
        # their names (a removal killed meanwhile leaves them to --clean); then the
        # names go, and a process that entered a host in between is stopped too: one
        # left would keep its namespace alive, unnamed, where nothing would find it.
        _stop_users(inodes, pids)
        for ns in namespaces:
            _ip("netns", "del", ns, check=False)
        _stop_users(inodes, pids)
        late = _namespace_users(inodes)
    finally:
        for fd in pinned:
            os.close(fd)
    for etc in NETNS_ETC.glob(f"{_PREFIX}{run}-h*"):
        shutil.rmtree(etc, ignore_errors=True)
    # A namespace's veth ends vanish with it, a moment later; the bridge stays.
    for _ in range(100):
        ours = [i for i in _names()[1] if _run_of(i) == run]
        for name in ours:
            _ip("link", "del", name, check=False)
        if not ours:
            break
        time.sleep(0.05)
    dirs = ([Path(directory)] if directory else
            list(Path(tempfile.gettempdir()).glob(f"mgpu-hosts-{run}-*")))
    for path in dirs:
        if path.name.startswith(f"mgpu-hosts-{run}-"):
            shutil.rmtree(path, ignore_errors=True)
    namespaces, interfaces = (
        [n for n in names if _run_of(n) == run] for names in _names())
    still = sorted(set(running(sorted(pids))) | set(late))
    left = [f"processes {still}"] if still else []
    left += [f"namespace {ns}" for ns in namespaces]
    left += [f"interface {name}" for name in interfaces]
    left += [f"directory {p}" for p in dirs if p.exists()]
    if not left:
        for suffix in (".json", ".pid"):
            (STATE_DIR / f"{run}{suffix}").unlink(missing_ok=True)
    return left


def _name_resolves_to(namespace: str, address: str) -> None:
    """Inside ``namespace``, this machine's name resolves to ``address``: a copy of
    ``/etc/hosts`` without that name, and the line ``ADDRESS NAME``."""
    name = socket.gethostname()
    lines = []
    for line in Path("/etc/hosts").read_text().splitlines():
        words = line.split("#")[0].split()
        if len(words) > 1 and name in words[1:]:
            words.remove(name)
            if len(words) > 1:
                lines.append(" ".join(words))
        else:
            lines.append(line)
    lines.append(f"{address} {name}")
    (NETNS_ETC / namespace).mkdir(parents=True, exist_ok=True)
    (NETNS_ETC / namespace / "hosts").write_text("".join(f"{ln}\n" for ln in lines))


def clean_stale_hosts() -> list[str]:
    """Remove the hosts of earlier runs whose process is gone (killed with ``SIGKILL``,
    say), and any namespace or interface of a run with no record; return the runs
    removed. A run whose process is alive is left alone. Where hosts cannot be made
    (:func:`hosts_missing`), nothing is done and ``[]`` returned.
    """
    if hosts_missing(ssh=False):
        return []
    removed = []
    with _state_lock():
        # Names first, records second: a run records itself before it makes a name.
        namespaces, interfaces = _names()
        records = _records()
        stale = {run for run, record in records.items() if not _alive(record)}
        orphans = {_run_of(name) for name in namespaces + interfaces} - set(records)
        for run in sorted(stale | orphans):
            _remove_run(run, records.get(run, {}).get("dir"))
            removed.append(run)
    return removed


@contextlib.contextmanager
def _signals_held() -> Iterator[list[int]]:
    """Hold ``SIGINT``, ``SIGTERM`` and ``SIGHUP`` while the block runs (main thread
    only): the list holds those that arrived, for :func:`_deliver` once the block is
    done."""
    got: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield got
        return
    old = {sig: signal.signal(sig, lambda signum, frame: got.append(signum))
           for sig in (signal.SIGINT, *_TRAPPED)}
    try:
        yield got
    finally:
        for sig, handler in old.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def _deliver(got: Sequence[int]) -> None:
    """Act on the first signal held by :func:`_signals_held` or :func:`_exit_on_signal`,
    as its handler would."""
    if not got:
        return
    handler = signal.getsignal(got[0])
    if callable(handler):
        handler(got[0], None)
    elif handler == signal.SIG_DFL:
        raise SystemExit(128 + got[0])


#: Signals that arrived while :meth:`Hosts.__exit__` ran but before it held signals
#: itself: it delivers them once the hosts are gone.
_HELD: list[int] = []


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    """The handler of a trapped signal: raise :class:`SystemExit` (``KeyboardInterrupt``
    for ``SIGINT``), so that the ``with`` block's cleanup runs; but while
    :meth:`Hosts.__exit__` runs (``frame`` is inside it) that is the cleanup, and the
    signal is held in :data:`_HELD` instead."""
    while frame is not None:
        if frame.f_code is Hosts.__exit__.__code__:
            _HELD.append(signum)
            return
        frame = frame.f_back
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


@dataclass(repr=False)
class Hosts:
    """``n`` emulated hosts, as a context manager (see the module's documentation).

    ``link`` shapes every host's link; ``links`` maps a host's index (0 for ``host1``)
    to a link of its own. With ``ssh=True`` each host runs an ``sshd``. The hosts
    exist inside the ``with`` block only (entering needs root, see
    :func:`hosts_missing`); one ``Hosts`` makes one run at a time.

    >>> Hosts(3, Link(rate="100mbit"), links={2: Link(rate="10mbit")})
    <Hosts n=3, link=Link(rate='100mbit', delay=None, loss=0.0), 1 own link: not made>
    >>> Hosts(3, links={3: Link()})
    Traceback (most recent call last):
    ...
    ValueError: links has host indices [3]; with n=3 they run from 0 to 2
    """

    n: int = 2
    link: Link = field(default_factory=Link)
    links: Mapping[int, Link] = field(default_factory=dict)
    ssh: bool = True
    hosts: list[Host] = field(default_factory=list, init=False)
    host_ip: str = field(default="", init=False)  #: the bridge's address
    run: str = field(default="", init=False)  #: this run's id, in every name it makes
    _dir: Path | None = field(default=None, init=False)
    _sshd: list[subprocess.Popen] = field(default_factory=list, init=False)
    _trapped: dict = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        if (not isinstance(self.n, int) or isinstance(self.n, bool)
                or not 1 <= self.n <= 200):
            raise ValueError(f"n must be a number of hosts from 1 to 200, "
                             f"not {self.n!r}")
        if not isinstance(self.link, Link):
            raise ValueError(f"link must be a Link, not {self.link!r}")
        bad = [i for i in self.links if not (isinstance(i, int) and 0 <= i < self.n)]
        if bad:
            raise ValueError(f"links has host indices {bad}; with n={self.n} they run "
                             f"from 0 to {self.n - 1}")
        wrong = [i for i, link in self.links.items() if not isinstance(link, Link)]
        if wrong:
            raise ValueError(f"links must map host indices to Link objects; "
                             f"those of {wrong} are not")

    def __repr__(self) -> str:
        own = f", {len(self.links)} own link{'s' * (len(self.links) != 1)}"
        head = f"<Hosts n={self.n}, link={self.link!r}{own if self.links else ''}"
        if not self.run:
            return head + ": not made>"
        hosts = ", ".join(f"{h.name} {h.address}" for h in self.hosts)
        return f"{head}: run {self.run}, bridge {self.host_ip}, {hosts}>"

    # -- making and removing ---------------------------------------------------------

    def __enter__(self) -> Hosts:
        if self.run:
            raise HostsError(f"these hosts exist already (run {self.run}): a Hosts "
                             "makes one run at a time")
        lacks = hosts_missing(self.ssh)
        if lacks:
            raise HostsError("cannot make hosts here; missing: " + "; ".join(lacks))
        delays = [link.delay for link in map(self._link_of, range(self.n))
                  if link.delay]
        if delays and netem_missing():  # refused before anything is made
            raise HostsError(f"delay={delays[0]!r} needs the kernel's netem qdisc: "
                             f"{netem_missing()}")
        self._trap()
        try:
            clean_stale_hosts()
            rng = random.Random()
            self._record(rng)
            self._make(rng)
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        # A trapped signal that arrives from here on is held (see _exit_on_signal).
        left: list[str] = []
        try:
            with _signals_held() as got:
                try:
                    if self.run:
                        left = _remove_run(self.run, self._dir)
                finally:
                    for proc in self._sshd:
                        with contextlib.suppress(subprocess.TimeoutExpired):
                            proc.wait(TERM_GRACE)
                    self.hosts, self._sshd = [], []
                    self.run, self.host_ip, self._dir = "", "", None
        finally:
            self._untrap()
        held = [*_HELD, *got]
        _HELD.clear()
        _deliver(held)
        if left and exc[0] is None:
            raise HostsError("could not remove " + ", ".join(left) + ": once this "
                             "process has ended, run 'python -m mgpu.cluster.hosts "
                             "--clean' as root to remove them")

    def _trap(self) -> None:
        """Turn ``SIGTERM`` and ``SIGHUP`` into :class:`SystemExit` and ``SIGINT`` into
        ``KeyboardInterrupt`` while the hosts exist, so that the ``with`` block's
        cleanup runs, and hold them while it runs (:func:`_exit_on_signal`; where their
        handlers are the default ones, and only in the main thread)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, *_TRAPPED):
            default = (signal.default_int_handler if sig == signal.SIGINT
                       else signal.SIG_DFL)
            if signal.getsignal(sig) == default:
                self._trapped[sig] = signal.signal(sig, _exit_on_signal)

    def _untrap(self) -> None:
        for sig, handler in self._trapped.items():
            signal.signal(sig, handler)
        self._trapped = {}

    def _record(self, rng: random.Random) -> None:
        """Pick an unused run id, record this process as its owner in
        :data:`STATE_DIR`, and make the run's directory."""
        with _state_lock():
            taken = {_run_of(name) for names in _names() for name in names}
            while True:
                run = f"{rng.randrange(16**5):05x}"
                if (run not in taken and not (STATE_DIR / f"{run}.json").exists()
                        and not (STATE_DIR / f"{run}.pid").exists()):
                    break
            # The id first: from here on __exit__ removes whatever the run made, even
            # if a signal stops the next steps (the directory is found by its name).
            self.run = run
            record = {"pid": os.getpid(), "start": _start_time(os.getpid()),
                      "dir": None}
            (STATE_DIR / f"{run}.json").write_text(json.dumps(record))
            self._dir = Path(tempfile.mkdtemp(prefix=f"mgpu-hosts-{run}-"))
            record["dir"] = str(self._dir)
            (STATE_DIR / f"{run}.json").write_text(json.dumps(record))

    def _make(self, rng: random.Random) -> None:
        bridge = f"{_PREFIX}{self.run}br"
        with _state_lock():  # two runs must not pick the same subnet
            net = _free_subnet(rng)
            addresses = list(net.hosts())
            _ip("link", "add", bridge, "type", "bridge")
            _ip("addr", "add", f"{addresses[-1]}/{net.prefixlen}", "dev", bridge)
        self.host_ip = str(addresses[-1])
        _ip("link", "set", bridge, "up")
        for i in range(self.n):
            host = Host(name=f"host{i + 1}", namespace=f"{_PREFIX}{self.run}-h{i + 1}",
                        address=str(addresses[i]), port=f"{_PREFIX}{self.run}v{i + 1}")
            peer = f"{_PREFIX}{self.run}p{i + 1}"
            _ip("netns", "add", host.namespace)
            _name_resolves_to(host.namespace, host.address)
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
            self.shape(host, self._link_of(i))
        self._check_paths()
        if self.ssh:
            self._start_sshd()

    def _link_of(self, i: int) -> Link:
        """The link host ``i`` (0 for ``host1``) is made with."""
        return self.links.get(i, self.link)

    def _check_paths(self) -> None:
        """Raise :class:`HostsError`, naming the likely cause, unless host1 reaches
        host2 and the bridge's address (a TCP connection answered, or refused)."""
        first, bridge = self.hosts[0], f"{_PREFIX}{self.run}br"
        targets = [self.host_ip, *(h.address for h in self.hosts[1:2])]
        done = subprocess.run(
            self.command(first, [sys.executable, "-I", "-S", "-c", _PROBE,
                                 str(_PROBE_SECONDS), *targets]),
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise HostsError(f"the probe in {first.name} failed: {done.stderr.strip()}")
        failed = dict(line.split(" ", 1) for line in done.stdout.splitlines())
        if self.host_ip in failed:
            raise HostsError(
                f"host1 ({first.address}) cannot reach this machine's address on the "
                f"bridge {bridge} ({self.host_ip}): {failed[self.host_ip]}. A firewall "
                "drops what the hosts send to it (see iptables -S INPUT, nft list "
                "ruleset): allow it, e.g. iptables -I INPUT -i 'mgpu+' -j ACCEPT")
        if failed:
            [(address, error)] = failed.items()
            call = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
            setting = (f"net.bridge.bridge-nf-call-iptables is "
                       f"{call.read_text().strip()}" if call.exists() else
                       "not loaded here")
            raise HostsError(
                f"host1 ({first.address}) cannot reach host2 ({address}) across the "
                f"bridge {bridge}: {error}. Something drops packets between the ports "
                f"of a bridge: most likely br_netfilter ({setting}) with a FORWARD "
                "policy of DROP, as Docker sets (iptables -S FORWARD). Allow the "
                "hosts' bridges, e.g. iptables -I FORWARD -i 'mgpu+' -o 'mgpu+' -j "
                "ACCEPT, or stop passing bridged packets to iptables: sysctl "
                "net.bridge.bridge-nf-call-iptables=0")

    def _require_made(self) -> None:
        if not self.run:
            raise HostsError("the hosts do not exist: use them inside "
                             "'with Hosts(...)'")

    # -- links -------------------------------------------------------------------------

    def shape(self, host: Host, link: Link) -> None:
        """Give ``host`` the link ``link`` (replacing its current shaping).

        The rate is a ``tbf`` on the host's ``eth0`` and one on the bridge side of its
        veth pair; a delay is ``netem`` on ``eth0``: without ``netem`` (see
        :func:`netem_missing`) a delay raises :class:`HostsError` and nothing changes.
        A loss is made where the host's TCP cannot see it: at the ingress of the bridge
        side, a classic BPF filter matches a random ``loss`` percent of the packets the
        host sends, and ``mirred`` redirects those into an ``ifb`` device of the host
        whose ``pfifo`` holds none, so they are dropped (``tc -s qdisc show dev IFB``
        counts them) and the sender retransmits them. With ``loss`` the host sends one
        packet at a time (``gso_max_segs 1``, for connections opened from then on), so
        that what is lost is packets, not 64 KB bursts; that costs CPU (unshaped, about
        half the throughput), so only lossy links do it."""
        self._require_made()
        if not isinstance(link, Link):
            raise ValueError(f"link must be a Link, not {link!r}")
        if link.delay and netem_missing():
            raise HostsError(f"delay={link.delay!r} needs the kernel's netem qdisc: "
                             f"{netem_missing()}")
        ns, port = host.namespace, host.port
        _ip("-n", ns, "link", "set", "eth0", "gso_max_segs",
            "1" if link.loss else "65535")
        tbf = (["tbf", "rate", link.rate, "burst", "256kb", "latency", "400ms"]
               if link.rate else [])
        # What the host sends: its eth0.
        _tc(ns, "qdisc", "del", "dev", "eth0", "root", check=False)
        if link.delay:
            _tc(ns, "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "netem",
                "delay", link.delay, "limit", "100000")
            if tbf:
                _tc(ns, "qdisc", "add", "dev", "eth0", "parent", "1:1", "handle", "10:",
                    *tbf)
        elif tbf:
            _tc(ns, "qdisc", "add", "dev", "eth0", "root", "handle", "10:", *tbf)
        # What it receives: the bridge side's egress.
        _tc(None, "qdisc", "del", "dev", port, "root", check=False)
        if tbf:
            _tc(None, "qdisc", "add", "dev", port, "root", "handle", "10:", *tbf)
        # What it sent, once it has left the host: the bridge side's ingress.
        _tc(None, "qdisc", "del", "dev", port, "ingress", check=False)
        ifb = self._ifb(host)
        made = _ip("link", "show", "dev", ifb, check=False).returncode == 0
        if not link.loss:
            if made:
                _ip("link", "del", ifb, check=False)
            return
        if not made:
            _ip("link", "add", ifb, "type", "ifb")
            _tc(None, "qdisc", "add", "dev", ifb, "root", "handle", "1:", "pfifo",
                "limit", "0")
            _ip("link", "set", ifb, "up")
        _tc(None, "qdisc", "add", "dev", port, "handle", "ffff:", "ingress")
        _tc(None, "filter", "add", "dev", port, "parent", "ffff:", "protocol", "all",
            "prio", "1", "bpf", "bytecode", _drop_program(link.loss),
            "action", "mirred", "egress", "redirect", "dev", ifb)

    def _ifb(self, host: Host) -> str:
        """The name of the ``ifb`` device that drops ``host``'s lost packets."""
        return f"{_PREFIX}{self.run}i{host.port.rsplit('v', 1)[1]}"

    def set_link(self, host: Host, up: bool) -> None:
        """Plug ``host``'s cable in (``up=True``) or pull it out: its packets stop, its
        processes go on, and nobody is told (as when a switch port or cable fails)."""
        _ip("link", "set", host.port, "up" if up else "down")

    # -- processes ---------------------------------------------------------------------

    def command(self, host: Host, argv: Sequence[str]) -> list[str]:
        """``argv`` as a command that runs inside ``host``.

        >>> host = Host("host1", "mgpu1a2b3-h1", "10.1.2.1", "mgpu1a2b3v1")
        >>> Hosts().command(host, ["hostname", "-I"])
        ['ip', 'netns', 'exec', 'mgpu1a2b3-h1', 'hostname', '-I']
        """
        return ["ip", "netns", "exec", host.namespace, *argv]

    def processes(self, host: Host, *, sshd: bool = False) -> list[int]:
        """The PIDs of the processes in ``host`` (without its ``sshd`` unless
        ``sshd``)."""
        pids = [int(p) for p in _ip("netns", "pids", host.namespace).stdout.split()]
        if sshd:
            return pids
        own = {p.pid for p in self._sshd}
        return [p for p in pids if p not in own]

    def left(self, seconds: float = 0.0,
             among: Sequence[Host] | None = None) -> dict[str, list[int]]:
        """The processes (``sshd`` aside) still in the hosts ``among`` (default: all),
        by host name, once they have had up to ``seconds`` to end; ``{}`` when none is
        left. A job's processes should all be gone when it has ended."""
        hosts = self.hosts if among is None else list(among)
        deadline = time.monotonic() + seconds
        while True:
            left = {h.name: pids for h in hosts if (pids := self.processes(h))}
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(0.1)

    def kill(self, host: Host) -> list[int]:
        """``SIGKILL`` every process in ``host`` but its ``sshd`` (as when a machine's
        jobs are killed); return their PIDs."""
        pids = self.processes(host)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pids

    def throughput(self, sender: Host, receiver: Host,
                   megabytes: float = 20.0) -> float:
        """Bit/s of one TCP connection that sends ``megabytes`` from ``sender`` to
        ``receiver`` (measured at the receiver, from the first byte to the last). The
        receiver listens on a port the system picks, so calls may run in parallel. It
        checks what arrived (the count of bytes and their CRC-32): other bytes raise
        :class:`HostsError`."""
        self._require_made()
        if not megabytes > 0:
            raise ValueError(f"megabytes must be above 0, not {megabytes!r}")
        size = max(1, int(megabytes * 1e6))
        server = subprocess.Popen(
            self.command(receiver, [sys.executable, "-c", _RECEIVER, receiver.address]),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            text=True)
        try:
            assert server.stdout is not None
            ready = server.stdout.readline().split()  # "listening PORT"
            if ready[:1] != ["listening"]:
                server.kill()
                _, err = server.communicate()
                raise HostsError(f"the receiver on {receiver.name} did not start: "
                                 f"{err.strip()[-500:] or 'it printed nothing'}")
            sent = subprocess.run(
                self.command(sender, [sys.executable, "-c", _SENDER, receiver.address,
                                      ready[1], str(size)]),
                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
            if sent.returncode != 0:
                raise HostsError(f"sending from {sender.name} to {receiver.name} "
                                 f"failed: {sent.stderr.strip()[-500:]}")
            out, err = server.communicate(timeout=60)
            if server.returncode != 0:
                raise HostsError(f"the receiver on {receiver.name} failed: "
                                 f"{err.strip()[-500:]}")
            rate, got, crc = out.split()
            want = zlib.crc32(_payload(size))
            if (int(got), int(crc)) != (size, want):
                raise HostsError(
                    f"{receiver.name} received {got} bytes (CRC-32 {int(crc):08x}) but "
                    f"{sender.name} sent {size} (CRC-32 {want:08x})")
            return float(rate)
        finally:
            if server.poll() is None:
                server.kill()
            server.wait()

    # -- ssh ---------------------------------------------------------------------------

    def _start_sshd(self) -> None:
        """An ``sshd`` on port 22 of every host, accepting the run's own key."""
        d = self._dir
        assert d is not None
        for key in ("host_key", "id"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
                            f"mgpu-hosts-{self.run}", "-f", str(d / key)], check=True,
                           stdin=subprocess.DEVNULL, capture_output=True)
        shutil.copy(d / "id.pub", d / "authorized_keys")
        (d / "ssh_config").write_text(
            f"Host *\n  IdentityFile {d / 'id'}\n  IdentitiesOnly yes\n"
            "  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n"
            "  BatchMode yes\n  ConnectTimeout 10\n  LogLevel ERROR\n")
        (d / "bin").mkdir()
        (d / "bin" / "ssh").write_text(
            f'#!/bin/sh\nexec "{shutil.which("ssh")}" -F "{d / "ssh_config"}" "$@"\n')
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
            # sshd logs to stderr (-e), into the run's directory; it holds none of this
            # process's descriptors, so a pipe reading this process closes when it ends.
            with open(d / f"sshd_{host.name}.log", "wb") as log:
                self._sshd.append(subprocess.Popen(
                    self.command(host, [str(SSHD), "-D", "-e", "-f", str(config)]),
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    start_new_session=True))
        for host, proc in zip(self.hosts, self._sshd):
            self._wait_for_port(host, proc)

    def _wait_for_port(self, host: Host, proc: subprocess.Popen,
                       seconds: float = 10) -> None:
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
        if self.ssh and self._dir is not None:
            env["PATH"] = f"{self._dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["MGPU_HOST_IP"] = self.host_ip
        env["MGPU_HOSTS"] = " ".join(h.address for h in self.hosts)
        return env

    def hostfile(self, path: str | os.PathLike[str],
                 hosts: Sequence[Host] | None = None,
                 slots: int | None = None) -> Path:
        """Write a host file of ``hosts`` (default: all), one address a line, as
        ``mxlaunch -H`` reads it; with ``slots``, ``address slots=N`` lines, as
        ``horovodrun --hostfile`` reads them. A file that exists is not overwritten."""
        self._require_made()
        path = Path(path)
        lines = [h.address if slots is None else f"{h.address} slots={slots}"
                 for h in (self.hosts if hosts is None else hosts)]
        try:
            with open(path, "x") as out:
                out.write("".join(f"{line}\n" for line in lines))
        except FileExistsError:
            raise FileExistsError(f"{path} exists: remove it or give another path"
                                  ) from None
        return path

    def __iter__(self) -> Iterator[Host]:
        return iter(self.hosts)

    def __getitem__(self, i: int) -> Host:
        return self.hosts[i]

    def __len__(self) -> int:
        return len(self.hosts)


_RECEIVER = """
import socket, sys, time, zlib
s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen(1)
print("listening", s.getsockname()[1], flush=True)
c, _ = s.accept(); n = crc = 0; start = None
while True:
    b = c.recv(1 << 20)
    if not b: break
    if start is None: start = time.perf_counter()
    n += len(b); crc = zlib.crc32(b, crc)
print(8 * n / max(time.perf_counter() - start, 1e-9), n, crc)
"""
# The sender's bytes: _payload(size), written out (the sender imports no mgpu).
_SENDER = """
import random, socket, sys
n = int(sys.argv[3]); block = random.Random(0).randbytes(1 << 20)
data = (block * (n // len(block) + 1))[:n]
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
s.sendall(data); s.close()
"""


def _payload(size: int) -> bytes:
    """The ``size`` bytes that :data:`_SENDER` sends.

    >>> data = _payload(3 << 20)  # a random MiB, three times
    >>> len(data), data[:1 << 20] == data[2 << 20:], len(set(data[:1 << 20])) == 256
    (3145728, True, True)
    """
    block = random.Random(0).randbytes(1 << 20)
    return (block * (size // len(block) + 1))[:size]


# Connects to each address given (port 9, where nothing listens: a refusal is an answer)
# and prints "ADDRESS ERROR" for each that gave none within argv[1] seconds.
_PROBE = """
import socket, sys
for address in sys.argv[2:]:
    try:
        socket.create_connection((address, 9), timeout=float(sys.argv[1])).close()
    except ConnectionRefusedError:
        pass
    except OSError as err:
        print(address, err or type(err).__name__)
"""
_PROBE_SECONDS = 3.0


def _run_command(command: Sequence[str], env: Mapping[str, str]) -> int:
    """Run ``command`` and return its exit status; if this process is interrupted
    meanwhile, stop the command and what it started, then go on being interrupted."""
    child = subprocess.Popen(command, env=env)
    try:
        return child.wait()
    finally:
        if child.poll() is None:
            stop_processes([child.pid, *descendants(child.pid)])
            child.wait()


def main(argv: list[str] | None = None) -> int:
    """``python -m mgpu.cluster.hosts``: run a command while the hosts exist."""
    parser = argparse.ArgumentParser(
        prog="python -m mgpu.cluster.hosts",
        description="Make N hosts (network namespaces on a private bridge, each with "
                    "sshd), run COMMAND with MGPU_HOST_IP, MGPU_HOSTS and ssh set up "
                    "for them, then remove everything and exit with COMMAND's status. "
                    "Needs root.")
    parser.add_argument("-n", type=int, default=2, help="number of hosts (default 2)")
    parser.add_argument("--rate", help="each link's rate, e.g. 100mbit, 1gbit")
    parser.add_argument("--delay", help="delay added to what each host sends, e.g. 5ms "
                        "(needs the kernel's netem qdisc)")
    parser.add_argument("--loss", type=float, default=0.0,
                        help="percent of the packets each host sends that are dropped "
                             "after leaving it (TCP retransmits them), e.g. 1")
    parser.add_argument("--hostfile",
                        help="write the hosts' addresses to this new file (removed "
                             "at the end)")
    parser.add_argument("--clean", action="store_true",
                        help="remove the hosts of runs whose process is gone, "
                             "then exit")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="-- COMMAND [ARG ...]")
    args = parser.parse_args(argv)
    lacks = hosts_missing(ssh=not args.clean)
    if args.clean:
        if lacks:
            parser.exit(2, f"{parser.prog}: cannot clean here; missing: "
                           f"{'; '.join(lacks)}\n")
        print("removed runs:", " ".join(clean_stale_hosts()) or "none")
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --, e.g. -- bash")
    try:
        hosts = Hosts(args.n, Link(rate=args.rate, delay=args.delay, loss=args.loss))
    except ValueError as err:
        parser.error(str(err))
    if args.hostfile and os.path.lexists(args.hostfile):
        parser.error(f"--hostfile {args.hostfile} exists: remove it or give another "
                     "path")
    if lacks:
        parser.exit(2, f"{parser.prog}: cannot make hosts here; missing: "
                       f"{'; '.join(lacks)}\n")
    try:
        with hosts:
            written = hosts.hostfile(args.hostfile) if args.hostfile else None
            try:
                return _run_command(command, hosts.env())
            finally:
                if written is not None:
                    written.unlink(missing_ok=True)
    except (HostsError, FileExistsError, OSError) as err:
        print(f"{parser.prog}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 128 + signal.SIGINT


if __name__ == "__main__":
    sys.exit(main())
