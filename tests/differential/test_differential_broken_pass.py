"""A deliberately broken pass is caught by ``check_passes``, named, and shrunk to a tiny program.

``dropping-fold`` is a constant simplification gone wrong: ``add(x, c)`` with a constant ``c``
becomes ``x`` whatever ``c`` is (an ``x + 0 -> x`` that forgot to look at the constant), so it
drops a term. It runs ahead of accy-default (never registered: the pipeline is built here).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, find, settings

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.parser import parse_program
from accy.ir.program import Stage
from accy.passes.base import Pass
from accy.passes.rebuild import rebuild
from accy.passes.spec import Pipeline, parse_pipeline
from accy.testing import DifferentialFailure, check_passes, programs_with_inputs


@dataclass(frozen=True)
class DroppingFold(Pass):
    """Broken on purpose: ``add(x, c)`` with a constant ``c`` becomes ``x``."""

    name = "dropping-fold"
    stage = Stage.contract

    def run(self, ctx, product):
        def rewrite(node: Node, srcs: tuple[Node, ...]) -> Node:
            if not srcs:
                return node
            if node.op is Op.ADD and srcs[1].op is Op.CONSTANT and srcs[0].type == node.type:
                return srcs[0]
            return Node(node.op, node.type, srcs, dict(node.attrs))

        return product.replace(program=rebuild(product.program, rewrite))


BROKEN = Pipeline((DroppingFold(), *parse_pipeline("accy-default").passes))


def test_broken_pass_is_named_with_the_program_before_and_after() -> None:
    program = parse_program("""
        func @f(%a: f32[2]) -> (f32[2]) {
          %0 = constant() {value=dense<[2.0]>} : f32[]
          %1 = add(%a, %0) : f32[2]
          return %1
        }""")
    with pytest.raises(DifferentialFailure) as caught:
        check_passes(program, {"f": (np.float32([1, 2]),)}, BROKEN)
    text = str(caught.value)
    assert text.startswith("pass dropping-fold (stage contract) changed the meaning")
    assert "--- program before:" in text and "add(%a, %0)" in text
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
        settings=settings(max_examples=2000, database=None, deadline=None,
                          suppress_health_check=list(HealthCheck)))
    ops = [n for n in program.nodes() if n.srcs]
    assert len(ops) <= 4, program  # the add, and a few ops around it at most
    assert any(n.op is Op.ADD and n.srcs[1].op is Op.CONSTANT for n in ops)
