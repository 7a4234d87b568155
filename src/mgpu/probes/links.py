"""The network in the cost model: link-limited times of one gradient exchange, and the
same exchange measured across emulated hosts.

Every process runs on a host of its own whose link is full duplex at ``rate`` bit/s each
way, with a one-way delay ``delay`` (:class:`mgpu.cluster.hosts.Link`). Two models:

- :func:`push_pull_seconds`: one ``dist_sync`` round, every worker pushing its
  gradients and pulling the sums back, with ``servers`` parameter servers.
- :func:`ring_seconds`: one ring allreduce of the same bytes (Horovod with Gloo).

Two measurements, each one job with several *phases*: the links are changed between
phases while the processes wait at a barrier (a directory on the file system, which
emulated hosts share with the launching machine), so one job start serves every link:

- :func:`push_pull_across_hosts`: the book's ``python -m mgpu.cluster.mxlaunch
  --launcher ssh -H hostfile`` runs ``python -m mgpu push_pull_timing``, servers and
  workers each on a host of its own;
- :func:`ring_across_hosts`: :func:`mgpu.cluster.horovodrun.run_horovod` runs
  ``python -m mgpu hvd_allreduce_timing``, one rank per host.
"""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mgpu.cluster.hosts import Host, Hosts, Link
from mgpu.probes.kvstore import BIGARRAY_BOUND, server_shares

__all__ = ["TCP_PAYLOAD", "Phase", "link_terms", "push_pull_across_hosts",
           "push_pull_seconds", "ring_across_hosts", "ring_seconds"]

#: The share of a link's rate that carries data. TCP over Ethernet with an MTU of 1500
#: sends 1448 bytes of data in a frame of 1514 (14 bytes Ethernet, 20 IP, 32 TCP with
#: timestamps), and ``tc`` counts whole frames.
TCP_PAYLOAD = 1448 / 1514


def _positive(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive number, not {value!r}")
    return float(value)


def push_pull_seconds(sizes: Sequence[int], workers: int, servers: int, rate: float,
                      delay: float = 0.0, *, overhead: float = 0.0,
                      bound: int = BIGARRAY_BOUND, bytes_per_number: int = 4) -> float:
    """Link-limited seconds of one ``dist_sync`` round: every worker pushes arrays of
    ``sizes`` numbers and pulls the sums back.

    Every process has its own full-duplex link of ``rate`` bit/s each way and a one-way
    delay of ``delay`` seconds. The servers share the keys as
    :func:`~mgpu.probes.kvstore.server_shares` computes (arrays of ``bound`` numbers or
    more cut into one piece per server), so server ``j`` receives ``workers`` times its
    share and sends it back, and a worker's link carries all of its ``P`` bytes each
    way. What MXNet 1.9.1 does decides how these add up:

    - pushes go out at once, key after key; a server answers the pushes of a key only
      when every worker's has arrived (``ApplyUpdates`` in
      ``src/kvstore/kvstore_dist_server.h``);
    - a worker's pull of a key waits for its push of that key to be answered (both
      use the key's buffer, ``comm_buf_``, in ``src/kvstore/kvstore_dist.h``), not for
      the other keys: pulls of early keys travel while later keys are pushed.

    So a link's two directions work at the same time, one key apart, like a two-stage
    pipeline: the busiest link takes its bytes in one direction plus the largest piece
    it carries once more (the first piece in, or the last out, alone on the link);
    the delay adds four one-way trips (a piece in, the answer, the pull request, the
    piece out). Data moves at :data:`TCP_PAYLOAD` of the rate. ``overhead`` is added
    as it is: the seconds a round takes without the links' limits (to sum, copy,
    schedule and send messages), measured on unshaped links.

    >>> t = push_pull_seconds([3_000_000], workers=2, servers=1, rate=1e8)  # 24 MB, 2x
    >>> round(t * TCP_PAYLOAD, 3)
    3.84
    >>> round(push_pull_seconds([3_000_000], 2, 2, 1e8) * TCP_PAYLOAD, 3)  # cut in two
    1.92
    """
    workers = int(workers)
    servers = int(servers)
    if workers < 1 or servers < 1:
        raise ValueError(f"workers and servers must be at least 1, not {workers} and "
                         f"{servers}")
    rate = _positive("rate (bit/s)", rate)
    if delay < 0:
        raise ValueError(f"delay must be a number of seconds >= 0, not {delay!r}")
    shares = server_shares(list(sizes), servers, bound)
    byte_rate = rate / 8 * TCP_PAYLOAD
    times = []
    for j in range(servers):
        pieces = [row[j] for row in shares if row[j]]
        if pieces:
            times.append(workers * bytes_per_number * (sum(pieces) + max(pieces))
                         / byte_rate)
    worker_bytes = bytes_per_number * sum(sizes)
    largest = bytes_per_number * max(max(row) for row in shares)
    times.append((worker_bytes + largest) / byte_rate)
    return max(times) + 4 * delay + overhead


def ring_seconds(total_bytes: float, workers: int, rate: float, delay: float = 0.0,
                 *, overhead: float = 0.0) -> float:
    """Link-limited seconds of one ring allreduce of ``total_bytes`` on ``workers``
    processes, each on its own full-duplex link of ``rate`` bit/s with a one-way delay
    of ``delay`` seconds.

    A ring sums in ``2(W-1)`` steps (reduce-scatter, then all-gather); at each step
    every process sends ``P/W`` bytes to its neighbour and receives as much, so every
    link carries ``2(W-1)/W * P`` each way, and each step waits one delay for its data.
    Data moves at :data:`TCP_PAYLOAD` of the rate; ``overhead`` is added as in
    :func:`push_pull_seconds`.

    >>> round(ring_seconds(8e6, workers=2, rate=1e8) * TCP_PAYLOAD, 3)  # 8 MB a way
    0.64
    >>> round(ring_seconds(8e6, 4, 1e8 / TCP_PAYLOAD, delay=0.005), 3)  # 6 steps, 5 ms
    0.99
    """
    workers = int(workers)
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    rate = _positive("rate (bit/s)", rate)
    if delay < 0:
        raise ValueError(f"delay must be a number of seconds >= 0, not {delay!r}")
    steps = 2 * (workers - 1)
    data = steps / workers * _positive("total_bytes", total_bytes)
    return data * 8 / (rate * TCP_PAYLOAD) + steps * delay + overhead


@dataclass
class Phase:
    """The rounds measured with one setting of the links."""

    link: Link
    #: seconds of each round, of the slowest process (a round ends when all are done)
    seconds: list[float]
    numbers: int  #: numbers each process exchanged per round

    @property
    def median(self) -> float:
        """The median of :attr:`seconds`."""
        return float(statistics.median(self.seconds))


def link_terms(link: Link) -> tuple[float, float]:
    """``(bit/s, one-way delay in seconds)`` of ``link``, as the models take them; an
    unshaped link has an infinite rate.

    >>> link_terms(Link(rate="100mbit", delay="5ms"))
    (100000000.0, 0.005)
    >>> link_terms(Link())
    (inf, 0.0)
    """
    delay = 0.0
    if link.delay:
        unit = link.delay.lstrip("0123456789.")
        scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0}[unit]
        delay = float(link.delay[:-len(unit)]) * scale
    return (link.bits_per_second or math.inf), delay


def _drive(hosts: Hosts, used: Sequence[Host], links: Sequence[Link], n: int,
           meet: Path, alive, timeout: float) -> None:
    """Drive a job's phases: before phase ``i``, wait until ``n`` ranks have signed in
    as ready (:func:`mgpu.programs.ps.wait_to_go`), give every used host ``links[i]``,
    then say go. Returns early when the job ends (``alive()`` false); on an error (a
    link that cannot be made, say) kills the job's processes on the hosts, so that
    the job ends at once, and raises."""
    deadline = time.monotonic() + timeout
    try:
        for i, link in enumerate(links):
            while len(list(meet.glob(f"ready{i}.*"))) < n:
                if not alive() or time.monotonic() > deadline:
                    return
                time.sleep(0.02)
            for host in used:
                hosts.shape(host, link)
            (meet / f"go{i}").touch()
    except BaseException:
        for host in used:
            hosts.kill(host)
        raise


def _phases_from(reports: list[dict], links: Sequence[Link]) -> list[Phase]:
    """One :class:`Phase` per link: per round, the slowest process's seconds."""
    phases = []
    for i, link in enumerate(links):
        mine = [r["ms"] for r in reports if r.get("phase") == i]
        if not mine:
            raise RuntimeError(f"no process reported phase {i} ({link})")
        slowest = [max(ms) / 1e3 for ms in zip(*mine)]
        numbers = next(r["numbers"] for r in reports if r.get("phase") == i)
        phases.append(Phase(link, slowest, int(numbers)))
    return phases


def _loopback(links: Sequence[Link]) -> None:
    """Without hosts, only unshaped links can be had (every process on loopback)."""
    shaped = [link for link in links if link != Link()]
    if shaped:
        raise ValueError(f"without hosts (hosts=None: every process on this machine's "
                         f"loopback) links cannot be shaped; got {shaped}: give "
                         "links=[mgpu.Link()] or make hosts with mgpu.Hosts")


def push_pull_across_hosts(hosts: Hosts | None, links: Sequence[Link], *,
                           workers: int = 2,
                           servers: int = 1, rounds: int = 3, width: int = 16,
                           threshold: float | None = None,
                           timeout: float = 300.0) -> list[Phase]:
    """Time ``dist_sync`` rounds across ``hosts``, one phase per link of ``links``.

    The book's command ``python -m mgpu.cluster.mxlaunch --launcher ssh -H hostfile``
    starts ``servers`` servers on the first hosts and ``workers`` workers on the next
    ones (``dmlc_tracker`` gives the host file's lines to the servers first), the
    scheduler on the launching machine (:attr:`~mgpu.cluster.hosts.Hosts.host_ip`).
    Every worker runs ``python -m mgpu push_pull_timing`` with ResNet-18's gradients at
    ``width`` (2-bit compressed with ``threshold``): per phase one warm-up round and
    ``rounds`` timed ones. Before each phase every used host gets that phase's link.
    With ``hosts=None`` every process runs on this machine's loopback
    (:func:`mgpu.cluster.local.run_local_cluster`), where links cannot be shaped.
    """
    from mgpu.programs.report import read_reports

    if hosts is None:
        from functools import partial

        from mgpu.cluster.local import run_local_cluster
        from mgpu.programs.ps import push_pull_timing

        _loopback(links)
        job = partial(push_pull_timing, rounds=rounds, width=width, phases=len(links),
                      threshold=threshold)
        result = run_local_cluster(job, workers, servers, timeout=timeout)
        return _phases_from(result.reports(), links)
    used = list(hosts)[:servers + workers]
    if len(used) < servers + workers:
        raise ValueError(f"{servers} server(s) and {workers} worker(s), each on a host "
                         f"of its own, need {servers + workers} hosts; hosts has "
                         f"{len(used)}: make more")
    with tempfile.TemporaryDirectory(prefix="mgpu-links-") as tmp:
        meet = Path(tmp)
        hostfile = hosts.hostfile(meet / "hosts", hosts=used)
        program = [sys.executable, "-m", "mgpu", "push_pull_timing", "--rounds",
                   str(rounds), "--width", str(width), "--phases", str(len(links)),
                   "--meet", str(meet)]
        if threshold is not None:
            program += ["--threshold", repr(float(threshold))]
        argv = [sys.executable, "-m", "mgpu.cluster.mxlaunch", "--host-ip",
                hosts.host_ip, "--timeout", str(int(timeout)), "-n", str(workers), "-s",
                str(servers), "-H", str(hostfile), "--launcher", "ssh", *program]
        with open(meet / "out", "w+") as out, open(meet / "err", "w+") as err:
            proc = subprocess.Popen(argv, env=hosts.env(), stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, cwd=tmp)
            try:
                _drive(hosts, used, links, workers, meet, lambda: proc.poll() is None,
                       timeout)
            finally:
                proc.wait()
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        tail = " / ".join(stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"mxlaunch exited with code {proc.returncode}: {tail}")
    return _phases_from(read_reports(stdout), links)


def ring_across_hosts(hosts: Hosts | None, links: Sequence[Link], *, workers: int = 2,
                      rounds: int = 3, width: int = 16,
                      timeout: float = 300.0) -> list[Phase]:
    """Time Horovod's ring allreduce across ``hosts``, one phase per link of ``links``.

    :func:`mgpu.cluster.horovodrun.run_horovod` runs ``python -m mgpu
    hvd_allreduce_timing``
    with one rank on each of the first ``workers`` hosts (``--network-interface
    eth0``), each rank allreducing ResNet-18's gradients at ``width``: per phase one
    warm-up round and ``rounds`` timed ones. Before each phase every used host gets
    that phase's link. With ``hosts=None`` every rank runs on this machine's
    loopback, links unshaped.
    """
    from mgpu.cluster.horovodrun import run_horovod

    if hosts is None:
        _loopback(links)
        result = run_horovod([sys.executable, "-m", "mgpu", "hvd_allreduce_timing",
                              "--rounds", str(rounds), "--width", str(width),
                              "--phases", str(len(links))], np=workers, timeout=timeout)
        return _phases_from(result.reports(), links)

    used = list(hosts)[:workers]
    if len(used) < workers:
        raise ValueError(f"{workers} ranks, each on a host of its own, need {workers} "
                         f"hosts; hosts has {len(used)}: make more")
    with tempfile.TemporaryDirectory(prefix="mgpu-links-") as tmp:
        meet = Path(tmp)
        program = [sys.executable, "-m", "mgpu", "hvd_allreduce_timing", "--rounds",
                   str(rounds), "--width", str(width), "--phases", str(len(links)),
                   "--meet", str(meet)]
        outcome: dict = {}

        def job() -> None:
            try:
                outcome["result"] = run_horovod(program, np=workers, emulated=hosts,
                                                timeout=timeout, cwd=tmp)
            except BaseException as err:  # raised again below, in this thread
                outcome["error"] = err

        runner = threading.Thread(target=job, daemon=True)
        runner.start()
        try:
            _drive(hosts, used, links, workers, meet, runner.is_alive, timeout)
        finally:
            runner.join()
    if "error" in outcome:
        raise outcome["error"]
    result = outcome["result"]
    return _phases_from(result.reports(), links)
