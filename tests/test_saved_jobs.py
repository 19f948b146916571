"""Issue #15: prepared jobs saved to a file and loaded in another process run as the original.

Also the ``accy prepare --save/--load/--build`` flags and the ``--timing`` report's lines
adding up to its total.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import accy
from accy import job as job_module
from accy.cli import main
from accy.passes.instrument import TimingReport

f32 = accy.f32

ADD_MUL = """\
func @add_mul(%a: f32[4], %b: f32[4], %c: f32[4]) -> (f32[4], f32[4]) {
  %0 = add(%a, %b) : f32[4]
  %1 = mul(%0, %c) : f32[4]
  return %0, %1
}
"""


@accy.function
def chain(a: f32[64], b: f32[64]):
    return accy.maximum((a + b) * b - b, b), a * 2.0


def test_a_saved_job_loads_with_its_stamps_sources_and_records(tmp_path: Path) -> None:
    job = accy.prepare(chain)
    path = job.save(tmp_path / "chain.accy")
    assert path == tmp_path / "chain.accy"
    assert (path.stat().st_mode & 0o777) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["chain.accy"]  # no temporary file left
    back = accy.load_job(path)
    assert back.stamps() == job.stamps()
    assert back.records == job.records
    assert back._sources == {i: job.kernel_source(i) for i in range(job.kernel_count)}
    assert accy.PreparedJob.load(path).stamps() == job.stamps()
    partial = accy.prepare(chain, until="dispatch")  # a job stopped early saves too
    partial.save(tmp_path / "partial.accy")
    resumed = accy.prepare(accy.load_job(tmp_path / "partial.accy"))
    assert resumed.stamps() == job.stamps()


def test_a_loaded_job_runs_as_the_saved_one(device, tmp_path: Path) -> None:
    job = accy.prepare(chain)
    job.save(tmp_path / "chain.accy")
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(64).astype(np.float32) for _ in range(2))
    want = job.run(a, b, device=device)
    got = accy.load_job(tmp_path / "chain.accy").run(a, b, device=device)
    for x, y in zip(want, got, strict=True):
        np.testing.assert_array_equal(x, y)


def test_a_job_loads_in_another_process(device, tmp_path: Path) -> None:
    accy.prepare(chain).save(tmp_path / "chain.accy")
    script = (
        "import json, sys, numpy as np, accy\n"
        "job = accy.load_job(sys.argv[1])\n"
        "out = job.run(np.ones(64, np.float32), np.full(64, 2, np.float32))\n"
        "print(json.dumps([job.stamps(), [float(o[0]) for o in out]]))\n")
    env = dict(os.environ, PYTHONPATH=str(Path(accy.__file__).parents[1]))
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "chain.accy")],
                          env=env, check=True, capture_output=True, text=True, timeout=300)
    stamps, firsts = json.loads(done.stdout.strip().splitlines()[-1])
    assert stamps == accy.prepare(chain).stamps()
    assert firsts == [4.0, 2.0]  # max((1+2)*2-2, 2), 1*2


def test_files_that_are_not_this_accys_jobs_are_refused(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = accy.prepare(chain, until="tensor").save(tmp_path / "j.accy")
    data = path.read_bytes()
    (tmp_path / "other").write_bytes(b"not a job")
    with pytest.raises(accy.JobFileError, match="not a saved accy job"):
        accy.load_job(tmp_path / "other")
    (tmp_path / "cut").write_bytes(data[: len(data) - 40])
    with pytest.raises(accy.JobFileError, match="damaged"):
        accy.load_job(tmp_path / "cut")
    monkeypatch.setattr(accy, "__version__", "0.0.0-other")
    with pytest.raises(accy.JobFileError, match=r"saved by accy 0\.1\.0 .* this is accy "
                                                r"0\.0\.0-other .* prepare the program again"):
        accy.load_job(path)
    monkeypatch.undo()
    monkeypatch.setattr(job_module, "JOB_FORMAT", job_module.JOB_FORMAT + 1)
    with pytest.raises(accy.JobFileError, match="job format"):
        accy.load_job(path)


def test_cli_saves_loads_and_builds(device, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    program = tmp_path / "add_mul.accy"
    program.write_text(ADD_MUL)
    saved = tmp_path / "job.accy"
    assert main(["prepare", str(program), "--save", str(saved)]) == 0
    first = capsys.readouterr().out
    assert main(["prepare", "--load", str(saved), "--build", "--emit-source"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:6] == first.splitlines()[:6]  # the saved records
    assert re.search(r"built on .*: \d+ programs compiled", out)
    assert "__kernel void add_kernel(" in out
    assert main(["prepare"]) == 2
    assert main(["prepare", str(program), "--load", str(saved)]) == 2
    assert "not both" in capsys.readouterr().err
    (tmp_path / "bad.accy").write_bytes(b"junk")
    assert main(["prepare", "--load", str(tmp_path / "bad.accy")]) == 2
    assert "not a saved accy job" in capsys.readouterr().err


def _ms(line: str) -> float:
    return float(line.split()[0])


def test_timing_lines_add_up_to_the_total(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    program = tmp_path / "add_mul.accy"
    program.write_text(ADD_MUL)
    assert main(["prepare", str(program), "--timing", "--save", str(tmp_path / "j")]) == 0
    out = capsys.readouterr().out
    report = out[out.index("===- Pass execution timing report"):].splitlines()
    total = float(report[1].split()[1])
    rows = report[3:]
    all_passes = next(i for i, line in enumerate(rows) if line.endswith("all passes"))
    passes = [r for r in rows[:all_passes] if r[22] != " "]  # not the rows of details
    assert len(passes) == len(accy.parse_pipeline("accy-default").passes)
    assert sum(map(_ms, passes)) == pytest.approx(_ms(rows[all_passes]), abs=0.01 * len(passes))
    rest = rows[all_passes + 1:]
    assert rest[-1].split("%", 1)[1].strip().startswith("not attributed")
    assert any("saving the job" in r for r in rest)
    assert _ms(rows[all_passes]) + sum(map(_ms, rest)) == pytest.approx(total, abs=0.01 * 12)
    assert "no egglog run (skipped" in out or "egglog saturation" in out


def test_timing_without_a_measured_total_attributes_everything() -> None:
    timing = TimingReport()
    accy.prepare(chain, instruments=[timing])
    with timing.phase("something else"):
        pass
    report = timing.report()
    assert "not attributed" not in report and "something else" in report


def test_timing_splits_a_pass_by_what_its_statistics_report() -> None:
    timing = TimingReport()
    timing._details(0, {"stop-reason": "saturated", "seconds": 0.5, "setup-seconds": 0.25,
                        "extract-seconds": 0.125, "rule-seconds": {"r": 0.1}}, 1_000_000_000)
    assert timing.details == [(0, "egglog saturation", 500_000_000),
                              (0, "setup-seconds", 250_000_000),
                              (0, "extract-seconds", 125_000_000), (0, "rest", 125_000_000)]
    skipped = TimingReport()
    skipped._details(3, {"rules: stop-reason": "skipped: no rule matches the program"}, 7)
    assert skipped.details == [(3, "no egglog run (skipped: no rule matches the program): "
                                   "loading rules, prefilter", 7)]
