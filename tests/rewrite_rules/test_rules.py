"""Every named rule, alone: it proves its example's equivalence, the prefilter sees that it
can fire, and neither its right-hand side nor the program extracted after saturating with it
changes what ``interpret`` computes (bit for bit for ``exact`` rules on elementwise
programs, within accy's error bounds otherwise)."""

from __future__ import annotations

import numpy as np
import pytest
from rule_cases import BY_NAME, CASES, Case, inputs

import rewrites
from accy.egraph.convert import extract, term, to_egraph
from accy.egraph.driver import equivalent, saturate
from accy.egraph.rules import RULES
from accy.ir.interpret import interpret
from accy.ir.ops import Op
from accy.ir.program import Program
from accy.passes import prefilter
from accy.testing import assert_close

rewrites.load()
IDS = [cs.name for cs in CASES]


def _bitwise(case: Case, program: Program) -> bool:
    """Exact rules on programs without sums compare bit for bit (sums: in any order)."""
    sums = {Op.EINSUM, Op.REDUCE_SUM, Op.REDUCE_MEAN, Op.SOFTMAX, Op.LOG_SOFTMAX,
            Op.CROSS_ENTROPY}
    return (rewrites.rule_info(case.name).policy == "exact"
            and not any(n.op in sums for n in program.nodes()))


def _agree(case: Case, lhs: Program, other: Program) -> None:
    for seed in range(3):
        args = inputs(case, lhs, seed)
        want, got = interpret(lhs, args), interpret(other, args)
        if _bitwise(case, lhs):
            for w, g in zip(want, got, strict=True):
                np.testing.assert_array_equal(g, w)
        else:
            assert_close(got, want, lhs, args)


def test_every_rule_has_a_case():
    assert sorted(BY_NAME) == sorted(RULES)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_rule_alone_proves_its_example(case: Case):
    info = rewrites.rule_info(case.name)
    lhs, rhs = case.program("lhs"), case.program("rhs")
    # a multi-pattern rule feeds on its own results (merged contractions merge again): run it
    # as saturate runs it by default, in the first 2 iterations only
    budget = {"iterations": 2} if info.multi else {}
    proved, report = equivalent(term(lhs.function().results[0]),
                                term(rhs.function().results[0]), info.ruleset,
                                rules=[case.name], **budget)
    assert proved, report.format()
    assert report.matches()[case.name] >= 1


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_rule_keeps_the_meaning(case: Case):
    info = rewrites.rule_info(case.name)
    lhs, rhs = case.program("lhs"), case.program("rhs")
    _agree(case, lhs, rhs)
    peg = to_egraph(lhs)
    saturate(peg, info.ruleset, rules=[case.name])
    _agree(case, lhs, extract(peg).program)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_prefilter_sees_the_rule_can_fire(case: Case):
    assert prefilter.could_fire(case.program("lhs"), [case.name]) or (
        rewrites.rule_info(case.name).permutes)


EXACT = [cs for cs in CASES if rewrites.rule_info(cs.name).policy == "exact"]


@pytest.mark.parametrize("case", EXACT, ids=[cs.name for cs in EXACT])
def test_exact_rules_are_exact_on_nan_infinity_and_signed_zeros(case: Case):
    lhs, rhs = case.program("lhs"), case.program("rhs")
    if not _bitwise(case, lhs):
        pytest.skip("sums: exact up to the order of their terms")
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.5, -2.0, 3.0e38])
    rng = np.random.default_rng(7)
    for _ in range(4):
        args = []
        for a in inputs(case, lhs, int(rng.integers(100))):
            if a.dtype.kind == "f":
                a = rng.choice(specials, a.shape).astype(a.dtype)
            args.append(a)
        for w, g in zip(interpret(lhs, args), interpret(rhs, args), strict=True):
            np.testing.assert_array_equal(g, w)  # NaN matches NaN (its payload aside)
            if w.dtype.kind == "f":
                numbers = ~np.isnan(w)
                np.testing.assert_array_equal(np.signbit(g)[numbers], np.signbit(w)[numbers])


@pytest.mark.parametrize("name,special", [
    ("add-zero", -0.0), ("mul-zero", np.inf), ("sub-self", np.inf)])
def test_finite_math_rules_differ_only_on_specials(name: str, special: float):
    case = BY_NAME[name]
    lhs, rhs = case.program("lhs"), case.program("rhs")
    finite = [np.array([1.5, 2.0, 0.25, 3.0], np.float32)]
    np.testing.assert_array_equal(interpret(lhs, finite)[0], interpret(rhs, finite)[0])
    odd = [np.full(4, special, np.float32)]
    want, got = interpret(lhs, odd)[0], interpret(rhs, odd)[0]
    assert want.tobytes() != got.tobytes()
