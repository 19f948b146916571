"""Result records: provenance fields, flattening, JSON/CSV files."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

from accy.experiments import records
from accy.experiments.measure import max_rel_error, measure_program


def test_provenance_names_versions_device_commit_and_time() -> None:
    p = records.provenance(None, ("cotengra",), command=["accy", "x"])
    assert set(records.REQUIRED_VERSIONS) <= set(p["versions"])
    assert all(p["versions"][k] for k in records.REQUIRED_VERSIONS)
    assert "cotengra" in p["versions"]
    assert p["git_commit"] and p["timestamp"].endswith("+00:00")
    assert {"processor", "machine", "system", "cpu_count"} <= set(p["machine"])
    assert p["command"] == ["accy", "x"]
    dev = p["device"]
    assert "error" in dev or {"platform", "name", "driver", "opencl"} <= set(dev)
    assert records.provenance(False)["device"] is None


def test_commit_variable_wins_over_a_stale_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tree copied elsewhere may carry an old .git: ACCY_GIT_COMMIT names the real one."""
    records.git_commit.cache_clear()
    monkeypatch.setenv(records.COMMIT_ENV, "0123abc (tree copied to the device)")
    assert records.git_commit() == "0123abc (tree copied to the device)"
    records.git_commit.cache_clear()
    monkeypatch.delenv(records.COMMIT_ENV)
    assert records.git_commit() != "0123abc (tree copied to the device)"
    records.git_commit.cache_clear()


def test_flatten_and_files_round_trip(tmp_path: Path) -> None:
    result = {"experiment": "demo", "rows": [
        {"a": 1, "b": {"c": 2, "d": {"e": "x"}}, "l": [1, 2]},
        {"a": 2, "b": {"c": 3}, "extra": True}]}
    assert records.flatten(result["rows"][0]) == {"a": 1, "b.c": 2, "b.d.e": "x", "l": "[1, 2]"}
    js, cs = records.write_results(result, tmp_path)
    assert records.read_results(js) == json.loads(json.dumps(result))
    assert records.read_results(tmp_path / "demo") == records.read_results(js)
    with cs.open() as fh:
        rows = list(csv.DictReader(fh))
    assert rows[0]["b.d.e"] == "x" and rows[1]["extra"] == "True" and rows[1]["b.d.e"] == ""


def test_measured_row_has_every_required_field(device) -> None:
    row = measure_program("softmax_xent", "ci", 0, "accy-default", repeats=1)
    for key in ("program", "program_fingerprint", "pipeline", "seed", "stages", "cost",
                "kernels", "bytes_moved", "e_nodes", "e_classes", "stop_reason", "rewrites",
                "correct", "measured", "provenance"):
        assert key in row
    assert set(row["stages"]) == {"semantic", "contract", "tensor", "dispatch", "memory",
                                  "kernel", "target"}
    assert row["provenance"]["device"]["driver"]
    assert row["correct"] is True and row["measured"]["max_rel_error"] < 1e-5
    assert row["rewrites"]["saturate"]["stop_reason"] == "saturated"
    off = measure_program("softmax_xent", "ci", 0, "accy-default", run=False)
    assert off["measured"]["kernel_ms"] is None and off["correct"] is None
    assert off["provenance"]["device"] is None
    assert off["target_profile"] == "generic" and row["target_profile"] == "device"
    for key in ("program_fingerprint", "pipeline", "cost", "rewrites"):  # the target differs
        assert off[key] == row[key]


def test_max_rel_error() -> None:
    import numpy as np

    assert max_rel_error([np.float32([1, 2])], [np.float64([1, 2])]) == 0.0
    assert max_rel_error([np.float32([1, 2.5])], [np.float64([1, 2])]) == 0.25
    assert max_rel_error([np.float32([np.nan])], [np.float64([1])]) == float("inf")
    assert max_rel_error([np.zeros(2)], [np.zeros(3)]) == float("inf")


def test_command_line_is_the_shells_or_main_and_its_arguments(monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", ["experiments/bench_gpu.py", "--repeat", "3"])
    assert records.command_line(None) == ["experiments/bench_gpu.py", "--repeat", "3"]
    assert records.command_line(["--out", "x.json"]) == ["main", "--out", "x.json"]
