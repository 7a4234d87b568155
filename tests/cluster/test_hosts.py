"""The hosts harness (mgpu.cluster.hosts), used as a reader would, and what it leaves behind.

Every test that makes hosts counts, for its own run, the namespaces, bridges and veths on this
machine, the processes in the hosts (each host's sshd, and a sleeping process started in a host),
the run's record in /run/mgpu-hosts and its temporary directory, while the hosts exist and after
they are gone; and it checks that /root/.ssh/authorized_keys did not change. The counts are taken
per run (every name a run makes holds its id): other runs may exist on this machine at the same
time, which is allowed, and they must not be touched.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from helpers.book_commands import book_commands, run_book_command
from mgpu.cluster import hosts as hosts_module
from mgpu.cluster.hosts import STATE_DIR, Hosts, HostsError, Link
from mgpu.cluster.processes import running

KEYS = Path("/root/.ssh/authorized_keys")
HOSTS = [sys.executable, "-m", "mgpu.cluster.hosts"]


def key_lines() -> list[str]:
    return KEYS.read_text().splitlines() if KEYS.is_file() else []


def ip_json(*args: str) -> list[dict]:
    return json.loads(subprocess.run(["ip", "-j", *args], capture_output=True, text=True,
                                     check=True).stdout or "[]")


def snapshot(run: str) -> dict[str, list]:
    """What run ``run`` has on this machine now."""
    mine = f"mgpu{run}"
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    namespaces = sorted(line.split()[0] for line in netns.splitlines()
                        if line.startswith(mine))
    return {
        "namespaces": namespaces,
        "bridges": sorted(link["ifname"] for link in ip_json("link", "show", "type", "bridge")
                          if link["ifname"].startswith(mine)),
        "veths": sorted(link["ifname"] for link in ip_json("link", "show", "type", "veth")
                        if link["ifname"].startswith(mine)),
        "processes": sorted(int(pid) for ns in namespaces for pid in subprocess.run(
            ["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()),
        "records": sorted(p.name for p in STATE_DIR.glob(f"{run}.*")),
        "directories": sorted(p.name for p in
                              Path(tempfile.gettempdir()).glob(f"mgpu-hosts-{run}-*")),
        "etc": sorted(p.name for p in Path("/etc/netns").glob(f"{mine}-*")),
    }


def assert_made(seen: dict[str, list], n: int) -> None:
    """The run's counts while its ``n`` hosts exist: this is what the counts after must lose."""
    assert (len(seen["namespaces"]), len(seen["bridges"]), len(seen["veths"])) == (n, 1, n)
    assert len(seen["processes"]) >= n + 1  # an sshd in each host, and the sleeping process
    assert len(seen["records"]) == 1 and len(seen["directories"]) == 1


def assert_gone(run: str, seen: dict[str, list], keys: list[str]) -> None:
    """Nothing of run ``run`` is left (``seen``: its counts while it existed)."""
    assert snapshot(run) == {name: [] for name in seen}
    assert running(seen["processes"]) == []
    assert key_lines() == keys


# -- arguments and errors (no root needed) -----------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"rate": "fast"}, "rate must be a tc rate such as '100mbit' or '1gbit', not 'fast'"),
    ({"rate": "100"}, "rate must be a tc rate"),
    ({"delay": "5"}, "delay must be a tc time such as '5ms' or '200us', not '5'"),
    ({"loss": 100}, "loss must be a percentage from 0 to below 100, not 100"),
    ({"loss": -1}, "loss must be a percentage"),
    ({"loss": "5"}, "loss must be a percentage"),
])
def test_link_arguments(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Link(**kwargs)


@pytest.mark.parametrize("args, kwargs, message", [
    ((0,), {}, "n must be a number of hosts from 1 to 200, not 0"),
    ((201,), {}, "n must be a number of hosts from 1 to 200, not 201"),
    (("3",), {}, "n must be a number of hosts from 1 to 200, not '3'"),
    ((2,), {"links": {2: Link()}}, "links has host indices [2]; with n=2 they run from 0 to 1"),
    ((2,), {"links": {0: "1gbit"}}, "links must map host indices to Link objects"),
    ((2, "100mbit"), {}, "link must be a Link, not '100mbit'"),
])
def test_hosts_arguments(args, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Hosts(*args, **kwargs)


def test_not_root_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert any(lack.startswith("root") for lack in hosts_module.hosts_missing())
    with pytest.raises(HostsError, match=r"cannot make hosts here; missing: root .*sudo"), \
            Hosts(2):
        pass
    assert hosts_module.clean_stale_hosts() == []  # nothing to do, nothing touched


def test_missing_tools_name_their_package(monkeypatch):
    monkeypatch.setattr(hosts_module.shutil, "which", lambda tool: None)
    monkeypatch.setattr(hosts_module, "SSHD", Path("/nowhere/sshd"))
    lacks = hosts_module.hosts_missing()
    assert "the 'ip' command (apt-get install iproute2)" in lacks
    assert "the 'tc' command (apt-get install iproute2)" in lacks
    assert ("/nowhere/sshd, ssh and ssh-keygen (apt-get install openssh-server "
            "openssh-client)") in lacks
    assert not any("ssh" in lack for lack in hosts_module.hosts_missing(ssh=False))


def test_hosts_outside_the_with_block_is_an_error(tmp_path):
    hosts = Hosts(2)
    assert repr(hosts) == ("<Hosts n=2, link=Link(rate=None, delay=None, loss=0.0): "
                           "not made>") and len(hosts) == 0
    with pytest.raises(HostsError, match="inside 'with Hosts"):
        hosts.hostfile(tmp_path / "hosts")
    assert not (tmp_path / "hosts").exists()


def test_the_subnet_overlaps_no_route():
    used = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/13")]
    for seed in range(20):
        net = hosts_module._free_subnet(hosts_module.random.Random(seed), used=used)
        assert net.prefixlen == 24 and not any(net.overlaps(u) for u in used)
    everything = [ipaddress.ip_network("0.0.0.0/1"), ipaddress.ip_network("128.0.0.0/1")]
    with pytest.raises(HostsError, match="found no /24 in 10.0.0.0/8, 172.16.0.0/12"):
        hosts_module._free_subnet(hosts_module.random.Random(0), used=everything)


def test_the_command_needs_a_command():
    done = subprocess.run(HOSTS + ["-n", "2"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "give the command to run after --, e.g. -- bash" in done.stderr


def test_the_command_refuses_an_existing_hostfile(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("192.0.2.7\n")
    done = subprocess.run(HOSTS + ["--hostfile", str(hostfile), "--", "true"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and f"--hostfile {hostfile} exists" in done.stderr
    assert hostfile.read_text() == "192.0.2.7\n"  # nothing written is lost


# -- made, used and removed (root) -------------------------------------------------------------

def test_normal_exit_and_exception_leave_nothing(can_make_hosts):
    keys = key_lines()
    for fail in (False, True):
        expect = pytest.raises(RuntimeError) if fail else contextlib.nullcontext()
        with expect, Hosts(2) as hosts:
            sleeper = subprocess.Popen(hosts.command(hosts[0], ["sleep", "600"]))
            seen = snapshot(hosts.run)
            run = hosts.run
            assert_made(seen, 2)
            assert sleeper.pid in hosts.processes(hosts[0])
            assert len(hosts.processes(hosts[1], sshd=True)) == 1  # its sshd
            if fail:
                raise RuntimeError("in the with block")
        sleeper.wait(5)
        assert_gone(run, seen, keys)
        assert repr(hosts).endswith("not made>")


def test_signals_while_hosts_are_made_or_removed(can_make_hosts, monkeypatch):
    """A SIGTERM while the hosts are being made removes them and ends in SystemExit; a SIGINT
    while they are being removed waits until they are gone."""
    keys, made = key_lines(), {}
    shape = Hosts.shape

    def shape_then_term(self, host, link):
        shape(self, host, link)
        made["run"], made["seen"] = self.run, snapshot(self.run)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(Hosts, "shape", shape_then_term)
    with pytest.raises(SystemExit) as stop, Hosts(2, ssh=False):
        pass
    assert stop.value.code == 128 + signal.SIGTERM
    assert made["seen"]["namespaces"]
    assert_gone(made["run"], made["seen"], keys)
    monkeypatch.undo()

    remove = hosts_module._remove_run

    def interrupted(run, directory):
        os.kill(os.getpid(), signal.SIGINT)
        return remove(run, directory)

    monkeypatch.setattr(hosts_module, "_remove_run", interrupted)
    with pytest.raises(KeyboardInterrupt), Hosts(1, ssh=False) as hosts:
        run, seen = hosts.run, snapshot(hosts.run)
    assert_gone(run, seen, keys)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handlers are restored


CHILD = """
import json, subprocess, time
from mgpu.cluster.hosts import Hosts
with Hosts(2) as hosts:
    subprocess.Popen(hosts.command(hosts[0], ["sleep", "600"]))
    print(json.dumps({"run": hosts.run, "host_ip": hosts.host_ip}), flush=True)
    time.sleep(600)
"""


def start_child() -> tuple[subprocess.Popen, dict]:
    """A Python that holds two hosts until it is stopped, and what it printed."""
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    made = json.loads(child.stdout.readline())
    return child, made


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_process_removes_its_hosts(can_make_hosts, sig):
    keys = key_lines()
    child, made = start_child()
    seen = snapshot(made["run"])
    assert_made(seen, 2)
    child.send_signal(sig)
    code = child.wait(timeout=30)  # cleanup takes well under a second
    child.stdout.close()
    assert code in ((128 + sig, 1) if sig == signal.SIGTERM else (-sig, 1, 128 + sig))
    assert_gone(made["run"], seen, keys)


def test_clean_removes_a_killed_run_and_spares_a_live_one(can_make_hosts):
    keys = key_lines()
    (killed, dead), (live, alive) = start_child(), start_child()
    try:
        assert dead["run"] != alive["run"]  # two runs at once: their own names and subnets
        assert (ipaddress.ip_interface(f"{dead['host_ip']}/24").network
                != ipaddress.ip_interface(f"{alive['host_ip']}/24").network)
        seen_dead, seen_alive = snapshot(dead["run"]), snapshot(alive["run"])
        killed.kill()
        killed.wait()
        assert snapshot(dead["run"]) == seen_dead  # SIGKILL: no cleanup ran
        done = subprocess.run(HOSTS + ["--clean"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and dead["run"] in done.stdout.split()
        assert alive["run"] not in done.stdout.split()
        assert_gone(dead["run"], seen_dead, keys)
        assert snapshot(alive["run"]) == seen_alive  # the live run is untouched
    finally:
        live.terminate()
        live.wait(30)
        killed.stdout.close()
        live.stdout.close()
    assert_gone(alive["run"], seen_alive, keys)


# -- links, ssh and the command (root) ---------------------------------------------------------

CONNECT = """
import socket, sys, time
def connect_ms(address):
    best = 1e9
    for _ in range(5):
        start = time.perf_counter()
        socket.create_connection((address, 22), timeout=5).close()
        best = min(best, 1e3 * (time.perf_counter() - start))
    return best
print(*(connect_ms(address) for address in sys.argv[1:]))
"""


def tc_show(hosts, host, *what):
    return subprocess.run(hosts.command(host, ["tc", *what, "show", "dev", "eth0"]),
                          capture_output=True, text=True, check=True).stdout


def test_links_are_shaped(can_make_hosts):
    """Rate, delay and loss, each measured in the hosts or read back from them."""
    keys = key_lines()
    with Hosts(3, Link(rate="200mbit")) as hosts:
        run, seen = hosts.run, snapshot(hosts.run)
        one, two, three = hosts
        # 10 MB at 200 Mbit/s take 0.4 s; tbf lets its 256 KB burst through at full speed
        # (2.6 % of 10 MB), and the receiver shares 2 cores with other work: within 10 %.
        ratio = hosts.throughput(one, two, megabytes=10) / 200e6
        assert 0.9 <= ratio <= 1.1, f"measured {ratio:.3f} x 200 Mbit/s"
        # Two transfers into the same host at once: each gets its own port.
        rates = []
        senders = [threading.Thread(target=lambda a=a: rates.append(
            hosts.throughput(a, two, megabytes=2))) for a in (one, three)]
        for thread in senders:
            thread.start()
        for thread in senders:
            thread.join(60)
        assert len(rates) == 2 and all(rate > 0 for rate in rates)
        if hosts_module.netem_missing():
            # This kernel has no netem (CONFIG_NET_SCH_NETEM): a delay is refused, clearly.
            with pytest.raises(HostsError, match="delay='20ms' needs the kernel's netem"):
                hosts.shape(three, Link(rate="200mbit", delay="20ms"))
        else:
            # host3 sends with 20 ms of delay: a TCP connect from host1 (SYN there, SYN-ACK
            # back) takes 20 ms longer to host3 than to host2; the best of 5 within 15 ms more.
            hosts.shape(three, Link(rate="200mbit", delay="20ms"))
            out = subprocess.run(hosts.command(one, [sys.executable, "-c", CONNECT,
                                                     two.address, three.address]),
                                 capture_output=True, text=True, check=True).stdout
            to_two, to_three = map(float, out.split())
            assert 19 <= to_three - to_two <= 35, f"connect: {to_two:.1f}, {to_three:.1f} ms"
        # 5 % loss on what host2 sends, set at run time (netem, or without it a BPF filter
        # into a class that holds nothing), the rate kept on both sides. 5 MB are about
        # 3500 packets: 175 lost on average, 13 the standard deviation: 3 % to 7 %.
        hosts.shape(two, Link(rate="200mbit", loss=5))
        hosts.throughput(two, one, megabytes=5)
        stats = tc_show(hosts, two, "-s", "qdisc")
        sent, dropped = map(int, re.search(r"root .*\n Sent \d+ bytes (\d+) pkt "
                                           r"\(dropped (\d+)", stats).groups())
        assert 0.03 <= dropped / (sent + dropped) <= 0.07, stats
        if hosts_module.netem_missing():
            assert "pfifo 20: parent 1:20 limit 0p" in stats, stats
            assert "bpf" in tc_show(hosts, two, "filter")
        else:
            assert re.search(r"netem 1: root .*loss 5%", stats), stats
        bridge_side = subprocess.run(["tc", "qdisc", "show", "dev", two.port],
                                     capture_output=True, text=True, check=True).stdout
        assert "tbf" in bridge_side and "rate 200Mbit" in bridge_side, bridge_side
        # ssh reaches host3 itself, with the run's key.
        answer = subprocess.run(["ssh", three.address, "hostname", "-I"], env=hosts.env(),
                                capture_output=True, text=True, timeout=30)
        assert answer.returncode == 0, answer.stderr
        assert answer.stdout.split() == [three.address]
        seen["processes"] += [p for h in hosts for p in hosts.processes(h, sshd=True)]
    assert_gone(run, seen, keys)


def test_the_command_runs_a_command_across_hosts(can_make_hosts, tmp_path):
    keys = key_lines()
    script = ('echo "$MGPU_HOST_IP|$MGPU_HOSTS"; cat hosts; '
              'ssh "$(head -1 hosts)" hostname -I; exit 7')
    done = subprocess.run(HOSTS + ["-n", "2", "--rate", "100mbit", "--hostfile", "hosts",
                                   "--", "sh", "-c", script],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 7, done.stderr  # the command's own status
    header, *lines = done.stdout.split("\n")
    bridge, addresses = header.split("|")
    assert lines[:2] == addresses.split() and len(addresses.split()) == 2
    assert lines[2].split() == [addresses.split()[0]]  # hostname -I over ssh
    assert ipaddress.ip_address(bridge) in ipaddress.ip_interface(f"{lines[0]}/24").network
    assert not (tmp_path / "hosts").exists()  # removed with the hosts
    assert key_lines() == keys


def test_the_maintainers_command(can_make_hosts, tmp_path):
    """docs/maintainers.md's command, run as printed."""
    [block] = book_commands("maintainers.md", "## Emulated hosts", "mgpu.cluster.hosts")
    done = run_book_command(block, {}, cwd=tmp_path, timeout=60)
    address, bridge = re.search(r"^(\S+) *\nbridge: (\S+)$", done.stdout, re.M).groups()
    assert ipaddress.ip_address(bridge) in ipaddress.ip_interface(f"{address}/24").network
    assert "removed runs:" in done.stdout
