"""The engine chapter's measurements: threads and memory of fresh processes (the programs of
mgpu.programs.engine), and its figure."""

from __future__ import annotations

import pytest

import mgpu
from mgpu.book.plot import draw_queue_memory


def test_thread_count_and_memory_of_this_process():
    assert mgpu.thread_count() >= 1
    before = mgpu.resident_mb()
    block = bytearray(50_000_000)  # touched by the zero-fill: resident at once
    assert mgpu.resident_mb() - before > 40
    assert mgpu.resident_peak_mb() >= mgpu.resident_mb()
    del block


def test_thread_census_counts_a_worker_per_device():
    counts = mgpu.thread_census(2)
    assert list(counts) == ["start", "import", "cpu(0)", "cpu(1)"]
    # MXNet 1.9: four priority threads and cpu(0)'s worker start with the first operation.
    assert counts["cpu(0)"] - counts["import"] >= 5
    assert counts["cpu(1)"] - counts["cpu(0)"] >= 1


def test_thread_census_reads_the_environment():
    default = mgpu.thread_census(2)
    two = mgpu.thread_census(2, {"MXNET_CPU_WORKER_NTHREADS": "2"})
    assert two["cpu(1)"] - two["cpu(0)"] >= 2
    assert two["cpu(1)"] > default["cpu(1)"]


def test_queue_memory_bounded_and_unbounded():
    bounded = mgpu.queue_memory(wait=True, steps=8, size=512)
    unbounded = mgpu.queue_memory(wait=False, steps=8, size=512)
    for run in (bounded, unbounded):
        assert run.steps == 8 and run.batch_mb == pytest.approx(512 * 512 * 4 / 1e6)
        assert 0 < run.push_s <= run.finish_s
        assert run.peak_mb >= run.start_mb and run.samples
    assert unbounded.wait is False and bounded.wait is True


@pytest.mark.parametrize("call, error, words", [
    (lambda: mgpu.thread_census(0), ValueError, "devices must be at least 1"),
    (lambda: mgpu.thread_census(2, {"MXNET_CPU_WORKER_NTHREADS": 2}), TypeError, "must be str"),
    (lambda: mgpu.queue_memory("yes"), TypeError, "wait must be True or False"),
    (lambda: mgpu.queue_memory(True, steps=0), ValueError, "steps must be at least 1"),
    (lambda: mgpu.queue_memory(True, size=2), ValueError, "size must be at least 4"),
    (lambda: draw_queue_memory([], lang="fr"), ValueError, "lang must be one of"),
])
def test_bad_input(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_a_failing_fresh_process_says_why():
    with pytest.raises(RuntimeError, match="thread_census in a fresh process failed"):
        mgpu.thread_census(1, {"MXNET_ENGINE_TYPE": "NoSuchEngine"})


def test_the_census_program_counts_before_mxnet_only():
    with pytest.raises(RuntimeError, match="must start before MXNet is imported"):
        mgpu.count_threads(1)  # this process has imported MXNet


def test_a_program_run_by_name_reports_or_says_why():
    (counts,) = mgpu.run_program("thread_census", devices=1)
    assert list(counts) == ["start", "import", "cpu(0)"]
    with pytest.raises(ValueError, match="'nope' is not one of the book's programs"):
        mgpu.run_program("nope")
    with pytest.raises(RuntimeError, match=r"queue_memory in a fresh process failed \(exit code "
                       r"1\): TypeError: .*unexpected keyword argument 'colour'"):
        mgpu.run_program("queue_memory", wait=True, steps=1, size=8, colour=1)


def test_every_program_of_the_registry_is_found():
    for name in mgpu.PROGRAMS:
        assert callable(mgpu.find_program(name)), name


def test_queue_memory_growth_is_the_loops_own():
    """The growth is the peak during the loop, not an earlier one: not even the parent's
    (``ru_maxrss`` of a child started with vfork/exec counts the parent's peak)."""
    block = bytearray(300_000_000)  # a 300 MB peak of this process, freed again
    del block
    run = mgpu.queue_memory(wait=True, steps=8, size=1024)
    highest = max(mb for _, mb in run.samples) - run.start_mb
    assert run.growth_mb < 4 * run.batch_mb
    # The figure draws the samples: its curve reaches the growth within one input.
    assert abs(run.growth_mb - highest) <= run.batch_mb
