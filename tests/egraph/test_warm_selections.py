"""Issue #15: rule selections within the same rule sets share one warm e-graph, each rule
declared once, and a run gives what it gives on a fresh e-graph."""

from __future__ import annotations

import accy
from accy.passes import prefilter, rewriting
from accy.passes.tensor.saturate import DEFAULT_RULESETS

f32 = accy.f32


@accy.function
def prog(a: f32[8], b: f32[8]):
    na = -a
    return (a * 1.0 + b * 0.0) - (-na) + (b + a) * (a + b)


def run(names: tuple[str, ...]) -> rewriting.Outcome:
    return rewriting.rewrite_program(prog, DEFAULT_RULESETS, names, iterations=8,
                                     node_limit=None, time_limit_s=60.0, cost="flops-bytes",
                                     isolate=False)


def summary(out: rewriting.Outcome) -> tuple:
    r = out.report
    return (out.program.fingerprint(), out.cost_after, r.e_nodes, r.e_classes, r.stop_reason,
            {x.name: x.matches for x in r.rules})


def test_selections_share_one_egraph_and_compute_as_on_a_fresh_one() -> None:
    everything = rewriting.select(DEFAULT_RULESETS)
    fired = [n for n, m in summary(run(everything))[5].items() if m]
    assert fired  # the program gives the rules something to do
    without = tuple(n for n in everything if n != fired[0])
    rewriting._WARM.egraphs.clear()
    fresh = summary(run(without))  # on a new e-graph
    rewriting._WARM.egraphs.clear()
    run(everything)
    (eg_all, declared), = rewriting._WARM.egraphs.values()
    again = summary(run(without))  # on the e-graph that declared every rule already
    (eg_both, declared), = rewriting._WARM.egraphs.values()
    assert eg_both is eg_all and declared == {everything, without}
    assert again == fresh
    assert fired[0] not in again[5]


def test_a_program_asked_for_again_and_again_gets_an_egraph_of_the_rules_it_can_use() -> None:
    # the rules the program can use are a third of the rule sets': asked for often enough,
    # an e-graph declaring only those (egglog copies every declared rule on each push)
    everything = rewriting.select(DEFAULT_RULESETS)
    quiet = prefilter.dormant([prog], everything)
    small = tuple(n for n in everything if n not in quiet)
    assert 2 * len(small) <= len(everything)
    rewriting._WARM.egraphs.clear()
    rewriting._WARM.seen.clear()
    runs = [summary(run(everything)) for _ in range(rewriting._WARM.SEEN_FOR_OWN + 1)]
    slots = {slot: declared for slot, (_, declared) in rewriting._WARM.egraphs.items()}
    key = rewriting._WARM.key(DEFAULT_RULESETS)
    assert slots == {key: {everything}, (key, small): {small}}
    assert all(r == runs[0] for r in runs)  # the same run wherever it is declared
    assert all(runs[0][5][n] == 0 for n in quiet)  # reported, with no matches


def test_warm_runs_step_without_egglog_pythons_run_and_report_the_same(monkeypatch) -> None:
    # once an e-graph has registered a selection's combined rule set, its steps run the
    # converted command directly (accy.egraph.steps); egglog registers an equal copy of a
    # combined rule set, and comparing it by identity alone sent every step the slow way
    from egglog import EGraph

    everything = rewriting.select(DEFAULT_RULESETS)
    rewriting._WARM.egraphs.clear()
    calls: list[object] = []
    slow = EGraph.run
    monkeypatch.setattr(EGraph, "run", lambda self, *a, **k: calls.append(a) or slow(self, *a, **k))
    fresh = summary(run(everything))
    assert calls  # a new e-graph registers the rule sets through EGraph.run
    calls.clear()
    again = summary(run(everything))
    assert calls == []
    assert again == fresh
