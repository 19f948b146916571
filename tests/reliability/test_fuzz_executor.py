"""``accy fuzz`` on the executor interface: a campaign on a (local) Dask cluster recycles its
worker every --rounds-per-worker rounds, and records a hung round as a timeout finding."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from accy.cli import main
from accy.ir.program import Stage
from accy.passes import registry
from accy.passes.base import Pass

pytestmark = pytest.mark.filterwarnings("ignore::pyopencl.CompilerWarning")


@dataclass(frozen=True)
class PidOrHang(Pass):
    """Touches ``$ACCY_TEST_PID_DIR/<pid>``; hangs when ``$ACCY_TEST_HANG`` is set."""

    name = "test-pid-or-hang"
    stage = Stage.contract

    def run(self, ctx, product):
        (Path(os.environ["ACCY_TEST_PID_DIR"]) / str(os.getpid())).touch()
        if os.environ.get("ACCY_TEST_HANG"):
            time.sleep(3600)
        return product


@pytest.mark.parametrize("hang", [False, True])
def test_a_campaign_runs_on_a_dask_cluster(tmp_path: Path, monkeypatch, device,
                                           hang: bool) -> None:
    pytest.importorskip("distributed")
    pids = tmp_path / "pids"
    pids.mkdir()
    # the local cluster's workers are started from this process: they inherit its environment
    monkeypatch.setenv("ACCY_TEST_PID_DIR", str(pids))
    if hang:
        monkeypatch.setenv("ACCY_TEST_HANG", "1")
    monkeypatch.setitem(registry.PASSES, PidOrHang.name, PidOrHang)
    code = main(["fuzz", "--rounds", "2", "--seed", "2", "--out", str(tmp_path / "out"),
                 "--max-nodes", "3", "--pipeline", f"{PidOrHang.name},accy-default",
                 "--rounds-per-worker", "1", "--executor", "dask",
                 *(["--round-timeout", "4"] if hang else [])])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["executor"] == "dask" and summary["rounds"] == 2 and summary["finished"]
    assert summary["worker_memory_gib"] is None  # the cluster's workers keep their own limits
    ran = {int(p.name) for p in pids.iterdir()}
    # a fresh worker process per round (restarted through its nanny), never this one
    assert len(ran) == 2 and os.getpid() not in ran
    if hang:
        assert code == 1 and summary["timeouts"] == 2 and summary["repeats"] == 1
        record = json.loads((tmp_path / "out" / "001-timeout.json").read_text())
        assert record["check"] == "timeout" and "4 s" in record["error"]
    else:
        assert summary["programs"] > 0 and summary["timeouts"] == summary["crashes"] == 0
