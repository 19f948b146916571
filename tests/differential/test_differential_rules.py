"""Per rule: every named rule of ``rewrites``, applied alone (``accy.testing.check_rule``),
keeps what ``interpret`` computes on random programs that contain its pattern.

The pattern of a rule is its example's left-hand side from ``tests/rewrite_rules/rule_cases.py``
(the operand types of the example; operands it wants positive are guarded as ``abs(x) + 1``),
embedded by ``programs_with`` among random ops whose results depend on it: its operands are
parameters, earlier values or unary ops of them. Each rule gets a few examples; the rule must
match in at least one of them, or the test would check nothing. Rules that only reorder operands
(``permutes``) never run alone (the pass's prefilter skips them: they cannot lower a cost), so
for them the test checks that the program stays as it is.

``saturate`` keeps its extraction only when it is cheaper, and some rules never pay off alone
under the default cost model (a transpose moved through a unary op, ``x / 4 -> x * 0.25``): the
program would not change and the check would see nothing of the rule's right-hand side. Where
the rule matched but the program stayed, the example is checked again under other cost models
until one extracts what the rule built: :class:`Novelty` (registered for that check only:
terms the program does not have are cheaper than those it has), then ``flops`` and ``nodes``.
Rules whose right-hand side no cost model of these prefers (re-association, distributing,
moving a transpose or reshape through a binary op) stay checked only where they pay off.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from diff_support import record
from hypothesis import given, settings

import rewrites
from accy.builder import Builder, FunctionBuilder, Value
from accy.egraph import rules as registry
from accy.egraph.cost import COST_MODELS
from accy.egraph.sorts import parse_type
from accy.ir.ops import Op
from accy.ir.program import Program
from accy.ir.types import TensorType
from accy.testing import CheckResult, check_rule, programs_with, programs_with_inputs

sys.path.insert(0, str(Path(__file__).parents[1] / "rewrite_rules"))
from rule_cases import BY_NAME, Case  # noqa: E402

rewrites.load()
RULES = sorted(registry.RULES)
MAX_NODES = 4  # random ops around the pattern: enough context, cheap to saturate


def rule_examples() -> settings:
    """A few examples per rule: a tenth of the profile's count (ci 10, dev 3), at least 3."""
    return settings(max_examples=max(3, settings.default.max_examples // 10))


def operand_types(case: Case) -> list[TensorType]:
    """The types of the rule example's parameters."""
    return [parse_type(p.lstrip("+")) for p in case.params]


def pattern(case: Case):
    """``case.lhs`` as a ``programs_with`` pattern: a callback over traced operand values."""
    positive = [p.startswith("+") for p in case.params]

    def build(*values: Value) -> Value:
        f = values[0].fb if values else FunctionBuilder(Builder(), "pattern", [], None, None)
        args = [f.op(Op.ADD, f.op(Op.ABS, v), f.constant(np.ones((), v.dtype.numpy), v.dtype))
                if pos else v for v, pos in zip(values, positive, strict=True)]
        return case.lhs(f, *args)

    return build


def _key(op: Op, type: TensorType, operands: tuple[TensorType, ...],
         attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    return op, type, operands, tuple(sorted(attrs.items()))


@dataclass(frozen=True)
class Novelty:
    """A cost model preferring new terms: a node alike (op, types, attributes) to one of the
    program's costs 3, any other 2, so a rewrite that swaps nodes for new ones is extracted."""

    name: str
    seen: frozenset[tuple[Any, ...]]
    description: str = "test only: nodes the program does not have are cheaper"

    @classmethod
    def of(cls, program: Program) -> Novelty:
        seen = frozenset(_key(n.op, n.type, tuple(s.type for s in n.srcs), dict(n.attrs))
                         for n in program.nodes())
        return cls(f"novelty-{program.fingerprint()[:16]}", seen)

    def node_cost(self, op: Op, type: TensorType, operands: tuple[TensorType, ...],
                  attrs: Mapping[str, Any]) -> int:
        return 3 if _key(op, type, operands, attrs) in self.seen else 2


def check_preferring_new_terms(program: Program, inputs, name: str) -> CheckResult:
    """``check_rule`` with the program's own :class:`Novelty` model, registered meanwhile."""
    model = Novelty.of(program)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(COST_MODELS, model.name, model)
        return check_rule(program, inputs, name, cost=model.name)


def check_under_other_costs(program: Program, inputs, name: str) -> CheckResult:
    """``check_rule`` under :class:`Novelty`, then ``flops``, then ``nodes``, up to the first
    cost model under which the program changes (the last result when none does)."""
    result = check_preferring_new_terms(program, inputs, name)
    for cost in ("flops", "nodes"):
        if result.passes_changed:
            break
        result = check_rule(program, inputs, name, cost=cost)
    return result


def test_novelty_extracts_what_the_default_cost_model_does_not() -> None:
    case = BY_NAME["transpose-through-neg"]
    program = case.program("lhs")
    inputs = [np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)]
    assert not check_rule(program, inputs, case.name).passes_changed
    result = check_preferring_new_terms(program, inputs, case.name)
    assert result.passes_changed and result.compared == 12
    assert not any(k.startswith("novelty-") for k in COST_MODELS)


def test_every_rule_has_a_pattern() -> None:
    assert sorted(BY_NAME) == RULES


@pytest.mark.parametrize("name", RULES)
def test_rule_alone_keeps_the_meaning_of_random_programs(name: str, request) -> None:
    case, info = BY_NAME[name], rewrites.rule_info(name)
    seen: Counter[str] = Counter()
    cases = programs_with_inputs(programs_with(pattern(case), operand_types=operand_types(case),
                                               max_nodes=MAX_NODES))

    @rule_examples()
    @given(cases)
    def check(example) -> None:
        result = check_rule(*example, name)
        record("rule alone (check_rule)", result)
        if result.matches and not result.passes_changed:
            result = check_under_other_costs(*example, name)
            record("rule alone (check_rule), other cost models", result)
        seen["fired"] += result.matches > 0
        if info.permutes:
            assert not result.passes_changed, "a rule that only reorders changed the program"

    # one example database entry per rule, as hypothesis's pytest plugin keys parametrized tests
    check.hypothesis.inner_test._hypothesis_internal_add_digest = request.node.nodeid.encode()
    check()
    if not info.permutes:
        assert seen["fired"] >= 1, f"{name} never matched its pattern: the test checked nothing"
