"""``accy fuzz``: a short campaign runs and summarizes; a failing pipeline's programs are
written shrunk, as IR text with a JSON record; rounds run in recycled worker processes, and a
worker that dies or hangs is recorded as a crash or timeout while the campaign goes on.

Campaigns here are bounded by ``--rounds``, never by ``--minutes``: how many rounds fit in a
time depends on the machine's load."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from accy.cli import main
from accy.fuzz import run_round
from accy.ir.node import Node
from accy.ir.ops import Op, OpKind
from accy.ir.parser import parse_program
from accy.ir.program import Function, Program, Stage
from accy.ir.types import DType, TensorType
from accy.passes import registry
from accy.passes.base import Pass


@dataclass(frozen=True)
class OffByOne(Pass):
    """Broken on purpose: every result ``r`` becomes ``r - 1`` (``not r`` for bools)."""

    name = "off-by-one"
    stage = Stage.contract

    def run(self, ctx, product):
        def off(r: Node) -> Node:
            if r.type.dtype is DType.bool:
                return Node(Op.NOT, r.type, (r,))
            one = np.ones((), r.type.dtype.numpy).tobytes()
            c = Node(Op.CONSTANT, TensorType((), r.type.dtype), (), {"value": one})
            return Node(Op.SUB, r.type, (r, c))

        return product.replace(program=Program(tuple(
            Function(f.name, f.params, f.param_names, tuple(off(r) for r in f.results))
            for f in product.program.functions)))


@dataclass(frozen=True)
class RecordPid(Pass):
    """Changes nothing; touches ``$ACCY_TEST_PID_DIR/<pid>`` (which processes ran it)."""

    name = "test-record-pid"
    stage = Stage.contract

    def run(self, ctx, product):
        (Path(os.environ["ACCY_TEST_PID_DIR"]) / str(os.getpid())).touch()
        return product


@dataclass(frozen=True)
class Crash(Pass):
    """Kills the process running it, like a segfault in a driver would."""

    name = "test-crash"
    stage = Stage.contract

    def run(self, ctx, product):
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True)
class Hang(Pass):
    """Never finishes (within a test)."""

    name = "test-hang"
    stage = Stage.contract

    def run(self, ctx, product):
        time.sleep(60)
        return product


@dataclass(frozen=True)
class Hog(Pass):
    """Asks for 4 GiB of address space (``np.empty``: pages never touched, so without a limit
    it costs nothing), as a program whose buffers would take the machine's memory does."""

    name = "test-hog"
    stage = Stage.contract

    def run(self, ctx, product):
        np.empty(4 << 30, np.uint8)
        return product


pytestmark = pytest.mark.filterwarnings("ignore::pyopencl.CompilerWarning")


def test_short_campaign_prints_progress_and_a_summary(tmp_path, capsys,
                                                      device_dtypes: list[DType]) -> None:
    code = main(["fuzz", "--rounds", "1", "--seed", "3", "--out", str(tmp_path),
                 "--max-nodes", "4"])
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["programs"] > 0 and summary["seed"] == 3 and summary["finished"]
    assert summary["rounds"] == 1
    assert summary["worker_memory_gib"] > 0  # half the machine's memory by default
    assert not (tmp_path / "summary.json.tmp").exists()
    assert "/s)  failures" in out and "unsupported" in out and out.rstrip().splitlines()[-1]
    assert code == (1 if summary["failures"] else 0)
    assert len(list(tmp_path.glob("*.accy"))) == len(summary["failures"])


def test_failing_programs_are_written_shrunk(tmp_path, capsys, monkeypatch,
                                             device_dtypes: list[DType]) -> None:
    monkeypatch.setitem(registry.PASSES, OffByOne.name, OffByOne)
    code = main(["fuzz", "--rounds", "1", "--seed", "1", "--out", str(tmp_path),
                 "--max-nodes", "4", "--max-dim", "6", "--ops", "unary,binary,einsum",
                 "--device-type", "gpu", "--pipeline", "off-by-one,accy-default"])
    assert code == 1
    record = json.loads((tmp_path / "001-passes.json").read_text())
    assert record["check"] == "passes" and "pass off-by-one" in record["error"]
    # what a replay needs
    assert (record["max_nodes"], record["max_dim"], record["ops"], record["device_type"]) == (
        4, 6, ["unary", "binary", "einsum"], "gpu")
    assert record["seed"] == 1 and record["pipeline"].startswith("off-by-one,constant-fold")
    program = parse_program((tmp_path / record["program"]).read_text())
    assert len([n for n in program.nodes() if n.srcs]) == 1
    assert (tmp_path / record["inputs"]).exists()
    assert "FAILURE 001-passes" in capsys.readouterr().out


def test_workers_are_recycled(tmp_path, monkeypatch, device_dtypes: list[DType]) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv("ACCY_TEST_PID_DIR", str(pids))
    monkeypatch.setitem(registry.PASSES, RecordPid.name, RecordPid)
    main(["fuzz", "--rounds", "2", "--seed", "2", "--out", str(tmp_path / "out"),
          "--max-nodes", "4", "--pipeline", "test-record-pid,accy-default",
          "--rounds-per-worker", "1"])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["rounds"] == 2 and summary["workers"] == 2
    # one process per round, none of them this one
    ran = {int(p.name) for p in pids.iterdir()}
    assert len(ran) == 2 and os.getpid() not in ran


@pytest.mark.parametrize(("bad_pass", "check", "options"), [
    (Crash, "crash", []), (Hang, "timeout", ["--round-timeout", "0.5"])])
def test_a_dead_or_hung_worker_is_recorded_and_the_campaign_goes_on(
        tmp_path, capsys, monkeypatch, bad_pass, check, options,
        device_dtypes: list[DType]) -> None:
    monkeypatch.setitem(registry.PASSES, bad_pass.name, bad_pass)
    code = main(["fuzz", "--rounds", "2", "--seed", "4", "--out", str(tmp_path),
                 "--max-nodes", "4", "--pipeline", f"{bad_pass.name},accy-default", *options])
    assert code == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["finished"] and summary["failures"] == [f"001-{check}.json"]
    # every round is lost; the second is a repeat of the first
    assert summary["rounds"] == summary["crashes" if check == "crash" else "timeouts"] == 2
    assert summary["repeats"] == 1 and summary["workers"] == 2
    assert summary["programs"] == 0
    record = json.loads((tmp_path / f"001-{check}.json").read_text())
    assert record["check"] == check and record["program"] is None and record["inputs"] is None
    assert record["round_seed"] == 4 * 1_000_003 and not record["allow_nan"]
    assert ("SIGKILL" if check == "crash" else "0.5 s") in record["error"]
    assert not list(tmp_path.glob("*.accy"))
    assert f"FAILURE 001-{check}" in capsys.readouterr().out


def test_a_worker_past_its_memory_fails_the_program_with_a_record(
        tmp_path, monkeypatch, device_dtypes: list[DType]) -> None:
    """Under --worker-memory a program that asks for more fails in the worker with a
    MemoryError, recorded with its program, where without a limit it would go on (and a
    larger one meet the OOM killer: a crash with no program)."""
    monkeypatch.setitem(registry.PASSES, Hog.name, Hog)
    code = main(["fuzz", "--rounds", "1", "--seed", "5", "--out", str(tmp_path),
                 "--max-nodes", "2", "--pipeline", "test-hog,accy-default",
                 "--worker-memory", "3"])
    assert code == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["worker_memory_gib"] == 3.0 and summary["crashes"] == 0
    record = json.loads((tmp_path / "001-passes.json").read_text())
    assert "MemoryError" in record["error"] and record["program"] is not None
    # no limit (0): the same round passes
    main(["fuzz", "--rounds", "1", "--seed", "5", "--out", str(tmp_path / "free"),
          "--max-nodes", "2", "--pipeline", "test-hog,accy-default", "--worker-memory", "0"])
    summary = json.loads((tmp_path / "free" / "summary.json").read_text())
    assert summary["worker_memory_gib"] is None and not summary["failures"]


@pytest.mark.parametrize("option", [
    ["--rounds-per-worker", "0"], ["--rounds-per-worker", "2.5"], ["--round-timeout", "0"],
    ["--round-timeout", "-3"], ["--round-timeout", "soon"], ["--rounds", "0"],
    ["--worker-memory", "-1"], ["--worker-memory", "nan"], ["--worker-memory", "lots"]])
def test_bad_worker_options_are_usage_errors(tmp_path, capsys, option) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["fuzz", "--rounds", "1", "--out", str(tmp_path), *option])
    assert exit_.value.code == 2
    assert option[0] in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_pass_workers_cannot_import_is_an_error(tmp_path, capsys, monkeypatch) -> None:
    @dataclass(frozen=True)
    class Local(Pass):
        name = "test-local"
        stage = Stage.contract

        def run(self, ctx, product):
            return product

    monkeypatch.setitem(registry.PASSES, Local.name, Local)
    code = main(["fuzz", "--rounds", "1", "--out", str(tmp_path / "out"),
                 "--pipeline", "test-local,accy-default"])
    assert code == 2 and "cannot be sent to the fuzz worker" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_rounds_draw_programs_of_max_dim_and_ops(monkeypatch, device_dtypes: list[DType]
                                                 ) -> None:
    """``--max-dim`` and ``--ops`` reach the programs' strategy."""
    import accy.testing

    asked = {}

    def strategy(**options):
        asked.update(options)
        raise LookupError("enough")

    monkeypatch.setattr(accy.testing, "programs_with_inputs", strategy)
    with pytest.raises(LookupError, match="enough"):
        run_round(7, allow_nan=False, max_nodes=4, dtypes=[d.value for d in device_dtypes],
                  pipeline="accy-default", device=None, max_dim=40, ops=["einsum", "unary"])
    assert (asked["max_nodes"], asked["max_dim"]) == (4, 40)
    assert asked["ops"] == [Op.EINSUM, OpKind.UNARY]  # "einsum" names the op (and its kind)


def test_rounds_check_kernels_of_the_device_type_asked(monkeypatch,
                                                       device_dtypes: list[DType]) -> None:
    """``--device-type gpu`` prepares for the device's profile typed a GPU: PoCL then runs
    the GPU kernels (tiles, prefetches, work-group reductions)."""
    import accy.differential

    targets = []
    real = accy.differential.prepare

    def prepare(program, pipeline, target=None, **options):
        if target is not None:  # end to end, on the device's profile
            targets.append(target)
        return real(program, pipeline, target=target, **options)

    monkeypatch.setattr(accy.differential, "prepare", prepare)
    result = run_round(5, allow_nan=False, max_nodes=3, dtypes=["f32"], pipeline="accy-default",
                       device=None, ops=["einsum"], device_type="gpu")
    assert result.failure is None and result.programs > 0
    assert targets and {t.device_type for t in targets} == {"gpu"}


def test_an_unknown_device_type_is_refused_naming_the_known_ones() -> None:
    from accy.differential import typed_as
    from accy.target import TargetProfile

    with pytest.raises(ValueError, match="device type 'tpu': one of cpu, gpu, accelerator"):
        typed_as(TargetProfile(device_type="cpu"), "tpu")
    assert typed_as(TargetProfile(device_type="cpu"), "gpu").device_type == "gpu"
