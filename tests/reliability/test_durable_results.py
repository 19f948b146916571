"""Results survive: a write killed or failing half-way leaves the earlier result intact; a
second run into the same --out is refused without --force; a killed sweep resumed with
--resume does not redo its finished tasks; ``accy report`` names a damaged file; fuzz records
are never overwritten; a local Dask cluster listens on loopback only.

Nothing here waits a fixed time for something to happen: progress is detected by polling
files (a marker, the task journal), with a generous guard against a hang."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from accy.cli import main
from accy.experiments import records
from accy.experiments.journal import entries_by_key, journal_path
from accy.ir.program import Stage
from accy.passes import registry
from accy.passes.base import Pass

REPO = Path(__file__).resolve().parents[2]
GUARD_S = 600  # only against a hang: the polls below end as soon as their file appears


def _wait_for(predicate, proc: subprocess.Popen | None = None) -> None:
    """Poll ``predicate`` until it holds (or ``proc`` exits); fail after GUARD_S."""
    end = time.monotonic() + GUARD_S
    while not predicate():
        if proc is not None and proc.poll() is not None:
            return
        assert time.monotonic() < end, "gave up waiting (the machine is stuck?)"
        time.sleep(0.05)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _result(n: int) -> dict:
    return {"experiment": "ablation", "rows": [{"program": f"p{i}", "cost": i}
                                               for i in range(n)], "failed": [], "summary": {}}


# ---- atomic writes ------------------------------------------------------------------------------

_KILLED_MID_WRITE = """
import os, sys, time
from pathlib import Path
from accy.experiments import records

out = Path(sys.argv[1])

def stall(fd):  # every byte is written, the rename not done yet: kill -9 lands here
    (out / "writing").touch()
    time.sleep(3600)

os.fsync = stall
rows = [{"program": "p%d" % i, "cost": i, "pad": "x" * 100} for i in range(100000)]
records.write_results({"experiment": "ablation", "rows": rows, "failed": [], "summary": {}},
                      out)
"""


def test_kill_9_during_a_result_write_leaves_the_earlier_result_intact(tmp_path: Path) -> None:
    records.write_results(_result(3), tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_MID_WRITE, str(tmp_path)],
                            env=_env())
    try:
        _wait_for((tmp_path / "writing").exists, proc)
        assert proc.poll() is None, "the writer ended before it was killed"
        temps = list(tmp_path.glob(".ablation.json.*.tmp"))
        assert temps and temps[0].stat().st_size > 10_000_000  # the large result, written
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    # the earlier result, byte for byte; the temporary file is hidden, never a result
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name in before} == before
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["ablation.json"]
    assert records.read_results(tmp_path / "ablation.json")["rows"] == _result(3)["rows"]


def test_a_write_failing_half_way_leaves_the_earlier_files_and_no_temp(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import csv

    records.write_results(_result(3), tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def full_disk(self, rows):
        self.writerow(next(iter(rows)))  # some bytes out, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(csv.DictWriter, "writerows", full_disk)
    with pytest.raises(OSError, match="No space left"):
        records.write_results(_result(5), tmp_path)
    # the JSON was replaced whole (a new, complete result) or not at all; the CSV not at all
    assert (tmp_path / "ablation.csv").read_bytes() == before["ablation.csv"]
    assert len(records.read_results(tmp_path / "ablation.json")["rows"]) in (3, 5)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before)  # no temp left

    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(28, "full")))
    with pytest.raises(OSError):
        records.atomic_write(tmp_path / "ablation.json", "{trunc")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before)
    records.read_results(tmp_path / "ablation.json")  # still whole


# ---- refusing to overwrite, resuming ------------------------------------------------------------


@pytest.mark.parametrize("existing", ["ablation.json", "ablation.csv", "ablation.journal.jsonl"])
def test_a_second_run_into_the_same_out_is_refused_without_force(
        tmp_path: Path, capsys: pytest.CaptureFixture, existing: str) -> None:
    (tmp_path / existing).write_text("earlier results\n")
    code = main(["experiment", "ablation", "--out", str(tmp_path), "--no-run"])
    err = capsys.readouterr().err
    assert code == 2 and str(tmp_path / existing) in err and "--force" in err
    assert len(err.strip().splitlines()) == 1
    assert (tmp_path / existing).read_text() == "earlier results\n"  # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == [existing]


SWEEP = ["experiment", "ablation", "--suite", "ci", "--programs", "attention,embedding",
         "--seeds", "0,1", "--rulesets", "einsum", "--no-per-rule", "--no-run",
         "--workers", "1", "--no-report", "--no-progress"]
TASKS = 2 * 2 * 4  # programs x seeds x (all, none, -einsum, only:einsum)


def _ok_lines(path: Path) -> dict[tuple, int]:
    return {k: sum(e["status"] == "ok" for e in v) for k, v in entries_by_key(path).items()}


def test_a_killed_sweep_resumes_without_redoing_finished_tasks(tmp_path: Path) -> None:
    out = tmp_path / "out"
    journal = journal_path(out, "ablation")
    proc = subprocess.Popen([sys.executable, "-m", "accy.cli", *SWEEP, "--out", str(out)],
                            env=_env(), cwd=REPO, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # kill the sweep (and its workers) as soon as some task is journaled
        _wait_for(lambda: bool(_ok_lines(journal)), proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finished = _ok_lines(journal)
    assert finished and not (out / "ablation.json").exists()

    assert main([*SWEEP, "--out", str(out), "--resume"]) == 0
    after = _ok_lines(journal)
    # every task ran exactly once, over both runs: the finished ones were not redone
    assert len(after) == TASKS and set(after.values()) == {1}
    assert set(finished) <= set(after)
    result = records.read_results(out / "ablation.json")
    assert len(result["rows"]) == TASKS and result["failed"] == []
    # a third run without --resume or --force is refused
    assert main([*SWEEP, "--out", str(out)]) == 2


# ---- damaged results ----------------------------------------------------------------------------


def test_report_names_a_truncated_result_file(tmp_path: Path, capsys) -> None:
    json_path, _ = records.write_results(_result(4), tmp_path)
    text = json_path.read_text()
    json_path.write_text(text[: len(text) // 2])  # what a kill without atomic writes left
    code = main(["report", str(json_path), "--out", str(tmp_path / "rep")])
    err = capsys.readouterr().err
    assert code == 2 and str(json_path) in err and "not valid JSON" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    (tmp_path / "other.json").write_text("[1, 2]")
    assert main(["report", str(tmp_path / "other.json"), "--out", str(tmp_path / "r")]) == 2
    assert "not an accy result" in capsys.readouterr().err


# ---- fuzz records -------------------------------------------------------------------------------


@dataclass(frozen=True)
class KillWorker(Pass):
    """Kills the process running it: every round is a (quick) crash finding."""

    name = "test-kill-worker"
    stage = Stage.contract

    def run(self, ctx, product):
        os.kill(os.getpid(), signal.SIGKILL)


def test_fuzz_records_are_never_overwritten(tmp_path: Path, capsys, monkeypatch,
                                            device) -> None:
    from accy.passes.spec import parse_pipeline

    monkeypatch.setitem(registry.PASSES, KillWorker.name, KillWorker)
    pipeline = parse_pipeline(f"{KillWorker.name},accy-default").text()
    earlier = {"001-passes.json": json.dumps({"signature": "passes | X | y | add"}),
               "001-passes.accy": "earlier program\n", "007-timeout.json": json.dumps(
                   {"signature": "timeout | TimeoutError | round timeout"})}
    for name, text in earlier.items():
        (tmp_path / name).write_text(text)
    args = ["fuzz", "--rounds", "1", "--seed", "5", "--out", str(tmp_path), "--max-nodes", "2",
            "--pipeline", f"{KillWorker.name},accy-default"]
    assert main(args) == 2  # a used folder, no --force or --resume
    err = capsys.readouterr().err
    assert "--resume" in err and "--force" in err and str(tmp_path) in err

    assert main([*args, "--force"]) == 1
    assert sorted(tmp_path.glob("*-crash.json")) == [tmp_path / "008-crash.json"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["failures"] == ["008-crash.json"] and summary["rounds"] == 1

    # --resume continues that campaign: its counts, its round numbers, its signatures
    assert main([*args, "--resume"]) == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rounds"] == 2 and summary["crashes"] == 2 and summary["repeats"] == 1
    assert summary["pipeline"] == pipeline and summary["failures"] == ["008-crash.json"]
    for name, text in earlier.items():  # nothing earlier was touched
        assert (tmp_path / name).read_text() == text
    bad_seed = [a if a != "5" else "6" for a in args]
    assert main([*bad_seed, "--resume"]) == 2
    assert "--seed 5" in capsys.readouterr().err


# ---- loopback ----------------------------------------------------------------------------------


def test_a_local_dask_cluster_listens_on_loopback_only() -> None:
    pytest.importorskip("distributed")
    import ipaddress

    import psutil

    from accy.experiments.dask_executor import DaskExecutor

    ex = DaskExecutor(None, workers=1, retries=0)
    try:
        info = ex.client.scheduler_info()
        addresses = [info["address"], *info["workers"]]
        addresses += [w["nanny"] for w in info["workers"].values() if w.get("nanny")]
        hosts = [a.split("://", 1)[1].rsplit(":", 1)[0].strip("[]") for a in addresses]
        assert hosts and all(ipaddress.ip_address(h).is_loopback for h in hosts), hosts
        # every socket this process and its children (nannies, workers) listen on,
        # the dashboard included
        procs = [psutil.Process(), *psutil.Process().children(recursive=True)]
        listening = [c.laddr.ip for p in procs for c in p.net_connections("inet")
                     if c.status == psutil.CONN_LISTEN]
        assert listening and all(ipaddress.ip_address(ip).is_loopback for ip in listening), \
            listening
        assert "127.0.0.1" in ex._cluster.dashboard_link
    finally:
        ex.close()
