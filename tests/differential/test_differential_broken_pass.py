"""A deliberately broken pass is caught by ``check_passes``, named, and shrunk to a tiny program.

``dropping-fold`` folds a binary op over constants by keeping its first operand: it drops a
term. It runs ahead of accy-default (never registered: the pipeline is built here).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, find, settings

from accy.ir.node import Node
from accy.ir.ops import Op, OpKind
from accy.ir.parser import parse_program
from accy.ir.program import Stage
from accy.passes.base import Pass
from accy.passes.rebuild import rebuild
from accy.passes.spec import Pipeline, parse_pipeline
from accy.testing import DifferentialFailure, check_passes, programs_with_inputs


@dataclass(frozen=True)
class DroppingFold(Pass):
    """Broken on purpose: ``op(c1, c2)`` over constants becomes ``c1``."""

    name = "dropping-fold"
    stage = Stage.contract

    def run(self, ctx, product):
        def rewrite(node: Node, srcs: tuple[Node, ...]) -> Node:
            if not srcs:
                return node
            if (node.op.kind is OpKind.BINARY and all(s.op is Op.CONSTANT for s in srcs)
                    and srcs[0].type == node.type):
                return srcs[0]
            return Node(node.op, node.type, srcs, dict(node.attrs))

        return product.replace(program=rebuild(product.program, rewrite))


BROKEN = Pipeline((DroppingFold(), *parse_pipeline("accy-default").passes))


def test_broken_pass_is_named_with_the_program_before_and_after() -> None:
    program = parse_program("""
        func @f(%a: f32[2]) -> (f32[2]) {
          %0 = constant() {value=dense<[1.0]>} : f32[]
          %1 = constant() {value=dense<[2.0]>} : f32[]
          %2 = add(%0, %1) : f32[]
          %3 = mul(%a, %2) : f32[2]
          return %3
        }""")
    with pytest.raises(DifferentialFailure) as caught:
        check_passes(program, {"f": (pytest.importorskip("numpy").float32([1, 2]),)}, BROKEN)
    text = str(caught.value)
    assert text.startswith("pass dropping-fold (stage contract) changed the meaning")
    assert "--- program before:" in text and "add(%0, %1)" in text
    assert "--- program after:" in text


def test_hypothesis_finds_and_shrinks_the_broken_pass() -> None:
    def breaks(case) -> bool:
        try:
            check_passes(*case, pipeline=BROKEN)
        except DifferentialFailure as e:
            return "pass dropping-fold" in str(e)
        return False

    program, inputs = find(
        programs_with_inputs(max_nodes=6), breaks, random=random.Random(0),
        settings=settings(max_examples=3000, database=None, deadline=None,
                          suppress_health_check=list(HealthCheck)))
    ops = [n for n in program.nodes() if n.srcs]
    assert len(ops) <= 2, program  # the folded op (and at most one op around it)
    assert all(s.op is Op.CONSTANT for s in ops[0].srcs)
