"""bench/run.py's --update: one part measured again, the others' figures kept."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: package bench
from bench import run  # noqa: E402


def test_merge_replaces_only_the_parts_measured_and_records_the_update():
    earlier = {"meta": {"mode": "full", "parts": ["data", "docs_build"], "date": "d0"},
               "data": {"s": 1}, "docs_build": {"cold_s": 900}, "targets": []}
    new = {"meta": {"mode": "full", "parts": ["docs_build"], "date": "d1"},
           "docs_build": {"cold_s": 500}}
    merged = run.merge(earlier, new)
    assert merged["data"] == {"s": 1} and merged["docs_build"] == {"cold_s": 500}
    assert merged["meta"]["date"] == "d0" and merged["meta"]["parts"] == ["data", "docs_build"]
    assert [u["date"] for u in merged["meta"]["updates"]] == ["d1"]
    again = run.merge(merged, {**new, "meta": {**new["meta"], "date": "d2"}})
    assert [u["date"] for u in again["meta"]["updates"]] == ["d1", "d2"]
    assert earlier["meta"].get("updates") is None  # the input is not changed


def test_update_without_results_says_to_run_without_it(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        run.main(["--quick", "--only", "data", "--update", "--out-dir", str(tmp_path)])
    assert stop.value.code == 2
    assert "there is no" in capsys.readouterr().err


def test_update_refuses_a_run_of_the_other_mode(tmp_path, capsys):
    (tmp_path / "results.json").write_text(json.dumps({"meta": {"mode": "full", "parts": []}}))
    with pytest.raises(SystemExit):
        run.main(["--quick", "--only", "data", "--update", "--out-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert "'full' run" in err and "'quick' one" in err and "without --quick" in err


def test_update_keeps_the_other_parts_of_a_real_run(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps(
        {"meta": {"mode": "quick", "parts": ["data", "scaling"], "date": "d0"},
         "scaling": {"kept": True}}))
    assert run.main(["--quick", "--only", "data", "--update", "--out-dir", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["scaling"] == {"kept": True} and res["data"]["setup"]["train_images"] == 60_000
    assert res["meta"]["date"] == "d0" and res["meta"]["updates"][0]["parts"] == ["data"]


def test_allreduce_prices_operations_with_the_books_op_overhead(monkeypatch):
    """bench/allreduce.py measures mgpu.op_overhead() itself, once per round, in µs."""
    from bench import allreduce

    calls = []

    def fake_op_overhead():
        calls.append(1)
        return 7e-6

    monkeypatch.setattr(allreduce.mgpu, "op_overhead", fake_op_overhead)
    res = allreduce.on_devices(2, [(4, 3), (5,)], rounds=2)
    figure = res["op_overhead_us"]
    assert len(calls) == 2 and figure["samples"] == pytest.approx([7.0, 7.0])
    assert figure["unit"] == "microseconds per operation"
    assert "mgpu.op_overhead()" in figure["what"] and "push" in figure["what"]
    assert "op_overhead" not in res["algorithms"]
