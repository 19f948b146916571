"""``accy fuzz``: a short campaign runs and summarizes; a failing pipeline's programs are
written shrunk, as IR text with a JSON record."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest

from accy.cli import main
from accy.ir.node import Node
from accy.ir.ops import Op
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

pytestmark = pytest.mark.filterwarnings("ignore::pyopencl.CompilerWarning")


def test_short_campaign_prints_progress_and_a_summary(tmp_path, capsys,
                                                      device_dtypes: list[DType]) -> None:
    code = main(["fuzz", "--minutes", "0.05", "--seed", "3", "--out", str(tmp_path),
                 "--max-nodes", "4"])
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["programs"] > 0 and summary["seed"] == 3 and summary["finished"]
    assert not (tmp_path / "summary.json.tmp").exists()
    assert "/s)  failures" in out and "unsupported" in out and out.rstrip().splitlines()[-1]
    assert code == (1 if summary["failures"] else 0)
    assert len(list(tmp_path.glob("*.accy"))) == len(summary["failures"])


def test_failing_programs_are_written_shrunk(tmp_path, capsys, monkeypatch,
                                             device_dtypes: list[DType]) -> None:
    monkeypatch.setitem(registry.PASSES, OffByOne.name, OffByOne)
    code = main(["fuzz", "--minutes", "0.05", "--seed", "1", "--out", str(tmp_path),
                 "--max-nodes", "4", "--pipeline", "off-by-one,accy-default"])
    assert code == 1
    record = json.loads((tmp_path / "001-passes.json").read_text())
    assert record["check"] == "passes" and "pass off-by-one" in record["error"]
    assert record["seed"] == 1 and record["pipeline"].startswith("off-by-one,constant-fold")
    program = parse_program((tmp_path / record["program"]).read_text())
    assert len([n for n in program.nodes() if n.srcs]) == 1
    assert (tmp_path / record["inputs"]).exists()
    assert "FAILURE 001-passes" in capsys.readouterr().out
