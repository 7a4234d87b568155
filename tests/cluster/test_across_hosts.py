"""A dist_sync round and a ring allreduce across emulated hosts, at a shaped rate, against the
link-limited model (mgpu.probes.links).

Three hosts: one server and two workers (the book's mxlaunch --launcher ssh), then two
Horovod ranks. ResNet-18's gradients at width 16 (701,178 numbers, 2.8 MB a worker). Each
job first runs a phase on unshaped links, whose fastest round is the model's overhead α (15
to 80 ms on this machine), then a phase at 200 Mbit/s (about 280 ms of transfers for
dist_sync, 120 ms for the ring). The fastest rounds are compared, since a loaded machine
only adds time: fastest shaped round / model (with that α) between 0.75 and 1.4. They still
tell the model from the obvious wrong ones: a server that sent the sums only after every
push had arrived would take the two transfers of 2P one after the other (about 470 ms, 1.4 x
the model or more, checked below), and a round below 0.75 x the model would be faster than
the links allow. Afterwards no process of the jobs is left on any host.
"""

from __future__ import annotations

import pytest

import mgpu
from mgpu.cluster.hosts import Hosts, Link
from mgpu.probes.links import (
    TCP_PAYLOAD,
    push_pull_across_hosts,
    push_pull_seconds,
    ring_across_hosts,
    ring_seconds,
)

RATE = Link(rate="200mbit")
WIDTH = 16
ROUNDS = 5
LOW, HIGH = 0.75, 1.4


@pytest.fixture(scope="module")
def hosts(can_make_hosts):
    with Hosts(3) as made:
        yield made


@pytest.fixture(scope="module")
def sizes():
    return [int(mgpu.mx.nd.zeros(s).size)
            for s in mgpu.gradient_shapes(mgpu.resnet18_28(width=WIDTH))]


def test_a_dist_sync_round_across_hosts_takes_what_the_links_allow(hosts, sizes):
    free, phase = push_pull_across_hosts(hosts, [Link(), RATE], servers=1, workers=2,
                                         rounds=ROUNDS, width=WIDTH, timeout=120)
    assert phase.numbers == sum(sizes)
    alpha = min(free.seconds)  # load only adds time: the fastest rounds are compared
    model = push_pull_seconds(sizes, 2, 1, RATE.bits_per_second, overhead=alpha)
    # The server's link carrying 2P in, then 2P out, one after the other:
    serial = 2 * 2 * 4 * sum(sizes) * 8 / (RATE.bits_per_second * TCP_PAYLOAD) + alpha
    assert serial / model > HIGH, "the bounds must tell the model from push-then-pull"
    assert LOW <= min(phase.seconds) / model <= HIGH, (phase.seconds, alpha, model)
    assert hosts.left(5.0) == {}


def test_a_ring_allreduce_across_hosts_takes_what_the_links_allow(hosts, sizes):
    if not mgpu.horovod_available():
        pytest.skip("horovod.mxnet is not installed")
    free, phase = ring_across_hosts(hosts, [Link(), RATE], workers=2, rounds=ROUNDS,
                                    width=WIDTH, timeout=120)
    alpha = min(free.seconds)  # load only adds time: the fastest rounds are compared
    model = ring_seconds(4 * sum(sizes), 2, RATE.bits_per_second, overhead=alpha)
    assert LOW <= min(phase.seconds) / model <= HIGH, (phase.seconds, alpha, model)
    assert hosts.left(5.0) == {}


def test_the_models_refuse_bad_input():
    with pytest.raises(ValueError, match="rate"):
        push_pull_seconds([10], 2, 1, 0)
    with pytest.raises(ValueError, match="workers"):
        ring_seconds(10, 0, 1e8)
