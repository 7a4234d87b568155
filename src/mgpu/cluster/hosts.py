"""Several hosts on one machine: namespaces on a private bridge, shaped links, sshd.

:class:`Hosts` makes ``n`` hosts, each a Linux network namespace with its own address
on interface ``eth0``, joined by a veth pair to a bridge that the run creates and that
nothing else is attached to: the subnet (a free ``/24`` of the private ranges, one that
overlaps no address or route of this machine) exists only on that bridge, and the hosts
have no route beyond it. The launching machine reaches the hosts through the bridge's
own address, :attr:`Hosts.host_ip` (give it to a launcher as the scheduler's address).

Each host's link is shaped with ``tc`` in both directions, as a full-duplex link of
``rate`` would be; ``delay`` and ``loss`` apply to what the host sends (``netem``). Each
host runs its own ``sshd`` on port 22 of its address, which accepts a key made for the
run; :meth:`Hosts.env` gives an environment whose ``ssh`` uses that key, so a launcher
with ``--launcher ssh -H hostfile`` reaches the hosts as it would real machines.

Everything is removed when the ``with`` block ends, on an exception and on ``SIGINT``,
``SIGTERM`` or ``SIGHUP`` too (in the main thread; a signal that arrives while the hosts
are being removed waits until they are gone): the processes in each host (``ip netns
pids``), the namespaces, the veth pairs, the bridge and the run's directory of keys and
logs. The run changes no file outside that directory and its record in
:data:`STATE_DIR` (no ``authorized_keys`` line: each ``sshd`` reads the run's own file)
but each host's ``/etc/netns/NAMESPACE/hosts``, which ``ip netns exec`` mounts over
``/etc/hosts`` in the host: there this machine's name resolves to the host's own
address, as a machine's name does on a cluster (Gloo, under Horovod 0.28.1, binds to
that address whatever ``--network-interface`` says).
Every name a run makes holds its id (:attr:`Hosts.run`), so runs in several processes
at once do not collide. A run whose process was killed with ``SIGKILL`` leaves its
hosts; ``python -m mgpu.cluster.hosts --clean`` (:func:`clean_stale_hosts`) removes
those, and never touches a run whose process is alive.

It needs root (``CAP_NET_ADMIN`` and ``CAP_SYS_ADMIN``), ``ip`` and ``tc`` (Debian's
``iproute2``) and, for ``ssh=True``, Debian's ``openssh-server``; :func:`hosts_missing`
says what is lacking. Standard library only.

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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from mgpu.cluster.processes import TERM_GRACE, descendants, running, stop_processes

__all__ = ["Host", "Hosts", "HostsError", "Link", "clean_stale_hosts", "hosts_missing",
           "netem_missing"]

SSHD = Path("/usr/sbin/sshd")
#: Where each run records its owner (PID and start time) and its directory, so that
#: ``--clean`` can tell dead runs from live ones.
STATE_DIR = Path("/run/mgpu-hosts")
#: ``ip netns exec NS`` mounts the files of ``/etc/netns/NS`` over those of ``/etc``.
NETNS_ETC = Path("/etc/netns")
_PREFIX = "mgpu"  # of every namespace, bridge and veth name a run makes
_RUN_NAME = re.compile(rf"^{_PREFIX}([0-9a-f]{{5}})(-h\d+|br|v\d+|p\d+)$")
_RATE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit)$")
_TIME = re.compile(r"^\d+(\.\d+)?(us|ms|s)$")
_UNITS = {"bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
# The private ranges the hosts' /24 is taken from, in this order.
_POOLS = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
# Signals that end the process by default: while hosts exist they raise SystemExit.
_TRAPPED = (signal.SIGTERM, signal.SIGHUP)
_CAP_NET_ADMIN, _CAP_SYS_ADMIN = 12, 21


class HostsError(RuntimeError):
    """The hosts cannot be made here, or a command inside them failed."""


@dataclass(frozen=True)
class Link:
    """How a host's link is shaped.

    ``rate`` (``tc`` units, e.g. ``"100mbit"``, ``"1gbit"``) limits both directions;
    ``delay`` (e.g. ``"5ms"``) and ``loss`` (percent of packets) apply to what the host
    sends, so a message between two hosts with ``delay="5ms"`` each takes 5 ms longer
    and a round trip 10 ms longer. The default is an unshaped link. A delay needs the
    kernel's ``netem`` qdisc (:func:`netem_missing`); loss does not.

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
    if "qdisc kind is unknown" in message:
        return " (the kernel lacks sch_tbf or sch_netem: modprobe sch_tbf sch_netem)"
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


def _lossy_htb(dev: str, link: Link) -> list[list[str]]:
    """``tc`` steps that drop a random ``link.loss`` percent of what ``dev`` sends, at
    ``link.rate``, without ``netem``: class 1:10 of an ``htb`` carries the packets;
    a classic BPF filter sends the others into class 1:20, whose queue holds none.

    >>> _lossy_htb("eth0", Link(rate="100mbit", loss=5))[-1][-1]
    '4,32 0 0 4294963256,53 0 1 4080218931,6 0 0 65568,6 0 0 0'
    """
    rate = link.rate or "100gbit"
    # ld rand (SKF_AD_RANDOM); jge threshold; ret class 1:20; ret 0 (the default, 1:10)
    threshold = min(2**32 - 1, round((1 - link.loss / 100) * 2**32))
    program = (f"4,32 0 0 {2**32 - 0x1000 + 56},53 0 1 {threshold},"
               f"6 0 0 {0x10020},6 0 0 0")
    return [
        ["qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10"],
        ["class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb",
         "rate", rate, "burst", "256kb", "cburst", "256kb"],
        ["class", "add", "dev", dev, "parent", "1:", "classid", "1:20", "htb",
         "rate", "8bit"],
        ["qdisc", "add", "dev", dev, "parent", "1:20", "handle", "20:", "pfifo",
         "limit", "0"],
        ["filter", "add", "dev", dev, "parent", "1:", "bpf", "bytecode", program],
    ]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``ip ARGS``; a failure raises :class:`HostsError` with ``ip``'s message."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        error = done.stderr.strip()
        raise HostsError(f"ip {' '.join(args)} failed: {error}{_hint(error)}")
    return done


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


def _remove_run(run: str, directory: str | os.PathLike[str] | None = None) -> list[str]:
    """Stop the processes of run ``run``'s hosts, delete its namespaces, veths, bridge,
    directory and record; return what is still there afterwards."""
    namespaces = [n for n in _names()[0] if _run_of(n) == run]
    pids = sorted({int(p) for ns in namespaces
                   for p in _ip("netns", "pids", ns, check=False).stdout.split()})
    if pids:
        stop_processes(pids, grace=TERM_GRACE)
    for ns in namespaces:
        _ip("netns", "del", ns, check=False)
    for etc in NETNS_ETC.glob(f"{_PREFIX}{run}-h*"):
        shutil.rmtree(etc, ignore_errors=True)
    with contextlib.suppress(OSError):
        NETNS_ETC.rmdir()  # only if no other namespace has files there
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
    still = running(pids)
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
    """Act on the first signal held by :func:`_signals_held`, as its handler would."""
    if not got:
        return
    handler = signal.getsignal(got[0])
    if callable(handler):
        handler(got[0], None)
    elif handler == signal.SIG_DFL:
        raise SystemExit(128 + got[0])


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
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
        _deliver(got)
        if left and exc[0] is None:
            raise HostsError("could not remove " + ", ".join(left))

    def _trap(self) -> None:
        """Turn ``SIGTERM`` and ``SIGHUP`` into :class:`SystemExit` while the hosts
        exist, so that the ``with`` block's cleanup runs (where their handlers are the
        default ones, and only in the main thread)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in _TRAPPED:
            if signal.getsignal(sig) == signal.SIG_DFL:
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
            self._dir = Path(tempfile.mkdtemp(prefix=f"mgpu-hosts-{run}-"))
            record = {"pid": os.getpid(), "start": _start_time(os.getpid()),
                      "dir": str(self._dir)}
            (STATE_DIR / f"{run}.json").write_text(json.dumps(record))
            self.run = run

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
            self.shape(host, self.links.get(i, self.link))
        if self.ssh:
            self._start_sshd()

    def _require_made(self) -> None:
        if not self.run:
            raise HostsError("the hosts do not exist: use them inside "
                             "'with Hosts(...)'")

    # -- links -------------------------------------------------------------------------

    def shape(self, host: Host, link: Link) -> None:
        """Give ``host`` the link ``link`` (replacing its current shaping).

        ``delay`` needs the kernel's ``netem`` qdisc; without it (see
        :func:`netem_missing`) a delay raises :class:`HostsError`, and ``loss`` is made
        by a classic BPF filter that sends a random ``loss`` percent of the packets into
        an ``htb`` class whose queue holds none. With ``loss`` the host sends one packet
        at a time (``gso_max_segs 1``, for connections opened from then on), so that
        what is lost is packets, not 64 KB bursts; that costs CPU (unshaped, about
        half the throughput), so only lossy links do it."""
        if link.delay and netem_missing():
            raise HostsError(f"delay={link.delay!r} needs the kernel's netem qdisc: "
                             f"{netem_missing()}")
        _ip("-n", host.namespace, "link", "set", "eth0", "gso_max_segs",
            "1" if link.loss else "65535")
        sides = ((host.namespace, "eth0", True), (None, host.port, False))
        for namespace, dev, own in sides:
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
            if netem and netem_missing():  # loss only: a delay was refused above
                steps = _lossy_htb(dev, link)
            elif netem:
                steps.append(["qdisc", "add", "dev", dev, "root", "handle", "1:",
                              "netem", *netem, "limit", "100000"])
                if tbf:
                    steps.append(["qdisc", "add", "dev", dev, "parent", "1:1",
                                  "handle", "10:", *tbf])
            elif tbf:
                steps.append(["qdisc", "add", "dev", dev, "root", "handle", "10:",
                              *tbf])
            for step in steps:
                done = subprocess.run([*prefix, "tc", *step],
                                      capture_output=True, text=True)
                if done.returncode != 0:
                    error = done.stderr.strip()
                    raise HostsError(f"tc {' '.join(step)} failed: "
                                     f"{error}{_hint(error)}")

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
        receiver listens on a port the system picks, so calls may run in parallel."""
        self._require_made()
        if not megabytes > 0:
            raise ValueError(f"megabytes must be above 0, not {megabytes!r}")
        server = subprocess.Popen(
            self.command(receiver, [sys.executable, "-c", _RECEIVER, receiver.address]),
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        try:
            assert server.stdout is not None
            ready = server.stdout.readline().split()  # "listening PORT"
            if ready[:1] != ["listening"]:
                raise HostsError(f"the receiver on {receiver.name} did not start")
            sent = subprocess.run(
                self.command(sender, [sys.executable, "-c", _SENDER, receiver.address,
                                      ready[1], str(int(megabytes * 1e6))]),
                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
            if sent.returncode != 0:
                raise HostsError(f"sending from {sender.name} to {receiver.name} "
                                 f"failed: {sent.stderr.strip()[-500:]}")
            out, _ = server.communicate(timeout=60)
            return float(out)
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
import socket, sys, time
s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen(1)
print("listening", s.getsockname()[1], flush=True)
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
    parser.add_argument("--delay", help="delay added to what each host sends, e.g. 5ms")
    parser.add_argument("--loss", type=float, default=0.0,
                        help="percent of each host's packets dropped")
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
