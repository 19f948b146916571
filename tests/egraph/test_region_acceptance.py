"""Acceptance by region is bounded: incremental pricing, a deadline that holds, never dearer
than the input (``accy.egraph.regions``)."""

from __future__ import annotations

import time

import pytest
from egraph_support import F32, T, func, mk, prog
from hypothesis import HealthCheck, given, settings

import rewrites
from accy.egraph import regions
from accy.egraph.convert import extract, to_egraph
from accy.egraph.cost import program_cost
from accy.egraph.driver import saturate
from accy.ir.ops import Op
from accy.passes import rewriting
from accy.testing import programs

M = T(F32, 64, 64)
SATURATE = ("canonical", "fold", "algebra", "einsum", "activation", "layout")


def saturated(p, rulesets=SATURATE):
    rewrites.load(rulesets)
    peg = to_egraph(p)
    saturate(peg, rulesets, rules=rewriting.select(rulesets))
    return peg


def wins_beside_a_trap():
    """Two independent wins (-(-c), log(softmax(x))) beside a shared matmul whose whole
    extraction is dearer."""
    def body(a, b, c, x):
        m = mk(Op.EINSUM, a, b, spec="ij,jk->ik")
        trap = mk(Op.ADD, m, mk(Op.TRANSPOSE, m, perm=(1, 0)))
        return (mk(Op.ADD, trap, mk(Op.NEG, mk(Op.NEG, c))),
                mk(Op.LOG, mk(Op.SOFTMAX, x, axis=1)))
    return prog(func("f", [M, M, M, T(F32, 32, 100)], body))


def test_a_deadline_in_the_past_tries_nothing_and_is_never_dearer():
    p = wins_beside_a_trap()
    peg = saturated(p)
    out = extract(peg, deadline=time.perf_counter() - 1.0)
    assert out.regions is not None and out.regions.tried == 0
    assert out.regions.skipped == out.regions.differing > 0
    assert out.cost == program_cost(out.program) <= program_cost(p)
    full = extract(peg)  # without a deadline the wins are kept
    assert full.cost < program_cost(p) and full.regions.kept >= 1
    assert not any(n.op is Op.NEG for n in full.program.nodes())


def test_work_cap_bounds_acceptance_like_the_deadline(monkeypatch):
    p = wins_beside_a_trap()
    peg = saturated(p)
    monkeypatch.setattr(regions, "MAX_VISITS", -1)
    out = extract(peg)
    assert out.regions.tried == 0 and out.cost <= program_cost(p)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(max_nodes=12, functions=(1, 2)))
def test_incremental_price_is_the_walked_price(p):
    # every kept switch: the reference-counted total equals a full walk of the selection
    checked = []
    commit = regions._Live.commit

    def checked_commit(self):
        assert self.selection.total == self.sel.cost(self.switched)
        checked.append(self.selection.total)
        commit(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(regions._Live, "commit", checked_commit)
        peg = saturated(p, ("canonical", "algebra", "activation", "layout"))
        out = extract(peg)
    assert out.cost == program_cost(out.program) <= program_cost(p)
