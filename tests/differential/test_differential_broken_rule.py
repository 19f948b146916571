"""A deliberately broken rewrite rule is caught by ``check_rule``, named, and shrunk to a tiny
program.

``drop-add-operand`` rewrites ``add(x, y)`` to ``x`` whatever ``y`` is (an ``x + 0 -> x`` that
forgot to look at its operand), so it drops a term. It lives in a scratch rule set defined at
run time, as a research script would (:class:`rewrites.Theme`), for one test at a time:
:func:`scratch_rule` removes it afterwards with :func:`rewrites.unregister`, and
``test_the_scratch_rule_leaves_no_trace`` checks that nothing of it is left, and that the set
defined again under the same names runs its new rules.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import HealthCheck, find, settings

import rewrites
from accy.egraph import driver
from accy.egraph.rules import RULES, RULESETS
from accy.egraph.sorts import Tensor, tensors, types
from accy.ir.ops import Op
from accy.ir.parser import parse_program
from accy.testing import DifferentialFailure, check_rule, programs_with, programs_with_inputs

SET, RULE = "scratch", "drop-add-operand"


@contextmanager
def scratch_rule(broken: bool = True) -> Iterator[None]:
    """Define ``drop-add-operand`` in the rule set ``scratch`` (an ``exact`` rule, so
    ``saturate`` needs no policy flag for it) while the block runs, then unregister the set.
    ``broken=False`` defines a correct rule under the same names (``add(x, y) -> add(y, x)``)."""
    rewrites.load()  # every theme first: only the scratch entries are new below
    theme = rewrites.Theme(SET, "broken rules for tests")
    try:
        (x, y), (t,) = tensors("x y"), types("t")
        rhs = x if broken else Tensor.add(y, x, t)
        theme.rewrite(RULE, Tensor.add(x, y, t), rhs, rewrites.has_type(x, t),
                      policy="exact", doc="broken on purpose: add(x, y) -> x")
        yield
    finally:
        rewrites.unregister(SET)


@pytest.fixture
def broken_rule() -> Iterator[str]:
    """The broken rule's name, registered for the test."""
    with scratch_rule():
        yield RULE


def test_broken_rule_is_named_with_the_program_before_and_after(broken_rule: str) -> None:
    program = parse_program("""
        func @f(%a: f32[2], %b: f32[2]) -> (f32[2]) {
          %0 = add(%a, %b) : f32[2]
          return %0
        }""")
    with pytest.raises(DifferentialFailure) as caught:
        check_rule(program, {"f": (np.float32([1, 2]), np.float32([3, 4]))}, broken_rule)
    text = str(caught.value)
    assert text.startswith(f"rule {RULE} (exact, rule set {SET}): pass saturate{{rulesets="
                           f"{SET} rules={RULE}}} (stage tensor) changed the meaning")
    assert "--- program before:" in text and "add(%a, %b)" in text
    after = text.split("--- program after:")[1]
    assert "add(" not in after and "return %a" in after


def test_hypothesis_finds_and_shrinks_the_broken_rule(broken_rule: str) -> None:
    def breaks(case) -> bool:
        try:
            check_rule(*case, broken_rule)
        except DifferentialFailure as e:
            return str(e).startswith(f"rule {RULE} ")
        return False

    program, inputs = find(
        programs_with_inputs(programs_with(Op.ADD, max_nodes=6)), breaks,
        random=random.Random(0),
        settings=settings(max_examples=500, database=None, deadline=None,
                          suppress_health_check=list(HealthCheck)))
    ops = [n for n in program.nodes() if n.srcs]
    assert len(ops) <= 4, program  # the add, and a few ops around it at most
    assert any(n.op is Op.ADD and n.srcs[0].type == n.type for n in ops)
    with pytest.raises(DifferentialFailure, match=f"^rule {RULE} "):
        check_rule(program, inputs, broken_rule)


def test_the_scratch_rule_leaves_no_trace() -> None:
    rewrites.load()
    sizes = {name: len(d) for name, d in (("themes", rewrites.THEMES), ("sets", RULESETS),
                                          ("rules", RULES))}
    program = parse_program("""
        func @f(%a: i32[3], %b: i32[3]) -> (i32[3]) {
          %0 = add(%a, %b) : i32[3]
          return %0
        }""")
    inputs = [np.int32([1, 2, 3]), np.int32([4, 5, 6])]
    with scratch_rule():
        assert rewrites.rule_info(RULE).ruleset == SET
        with pytest.raises(DifferentialFailure):  # it ran: warm e-graph and caches filled
            check_rule(program, inputs, RULE)
    assert RULE not in RULES
    assert SET not in RULESETS and SET not in rewrites.THEMES
    assert all(r.name != RULE for rs in RULESETS.values() for r in rs.rules)
    assert all(r.name != RULE for rules, _ in driver._EGG_RULESETS.values() for r in rules)
    assert sizes == {name: len(d) for name, d in (
        ("themes", rewrites.THEMES), ("sets", RULESETS), ("rules", RULES))}
    with pytest.raises(KeyError, match="unknown rule"):
        check_rule(program, inputs, RULE)
    with scratch_rule(broken=False):  # the same names, a correct rule: no stale e-graph
        outcome = check_rule(program, inputs, RULE)
        assert outcome.status == "ok"


def test_built_in_rule_sets_cannot_be_unregistered() -> None:
    rewrites.load()
    with pytest.raises(ValueError, match="built in"):
        rewrites.unregister("algebra")
    with pytest.raises(KeyError, match="unknown rule set"):
        rewrites.unregister("no-such-set")
    assert "algebra" in RULESETS
