"""Issue #17, 80-1,000 tensors: the log-space score greedy, KaHyPar/built-in partitioning,
``hyper``'s effort budget and ``auto`` without beam past 300 operands. Quality is asserted
only at equal effort (fixed seeds and trial counts), never against the clock."""

from __future__ import annotations

import math
import random

import opt_einsum
import pytest

import accy  # noqa: F401
from accy.contraction import STRATEGIES, PathOptions, path_cost
from accy.contraction import partition as part
from accy.contraction.cost import network, ssa_to_linear
from accy.contraction.hyper import hyper_ssa
from accy.contraction.paths import cheap_candidates
from accy.contraction.trials import Graph, greedy_core, log_costs
from accy.experiments.networks import connected_edges, graph_problem, regular_edges


def regular(n: int, seed: int) -> tuple[list[str], str, dict[str, int]]:
    rng = random.Random(seed)
    return graph_problem(n, regular_edges(n, 3, rng), rng, open_legs=0.0)


def connected(n: int, seed: int) -> tuple[list[str], str, dict[str, int]]:
    rng = random.Random(seed)
    return graph_problem(n, connected_edges(n, 0.5, rng), rng, open_legs=0.0)


def flops(p: tuple, path: list) -> int:
    return path_cost(p[0], p[1], p[2], path).flops


def oe_greedy(p: tuple) -> list:
    return opt_einsum.paths.greedy([set(t) for t in p[0]], set(p[1]), p[2])


@pytest.mark.parametrize("make, n, seed", [(regular, 80, 1), (regular, 200, 2), (regular, 400, 3),
                                           (connected, 80, 4), (connected, 200, 5),
                                           (connected, 400, 6)])
def test_greedy_matches_or_beats_opt_einsum_greedy(make, n, seed):
    p = make(n, seed)
    assert flops(p, STRATEGIES["greedy"](*p)) <= flops(p, oe_greedy(p))


def test_einsum_benchmark_greedy_matches_or_beats_opt_einsum_greedy():
    gen = pytest.importorskip("einsum_benchmark.generators.random")
    from accy.contraction import parse_spec, sizes_from_shapes

    for n, seed in [(200, 0), (500, 0)]:
        spec, shapes = gen.regular(n, 3, d_min=2, d_max=4, seed=seed)[:2]
        terms, out = parse_spec(spec)
        p = (terms, out, sizes_from_shapes(terms, shapes))
        assert flops(p, STRATEGIES["greedy"](*p)) <= flops(p, oe_greedy(p))


@pytest.mark.parametrize("costmod, temperature", [(1.0, 0.0), (0.5, 0.1), (3.0, 1.0)])
def test_score_greedy_log_costs_agree_with_exact_costs(costmod, temperature):
    p = regular(300, 7)
    net = network(*p)
    g = Graph(net)
    ssa = greedy_core(g.legs, g.out, g.sizes, g.logsize, costmod, temperature,
                      random.Random(1))
    exact = flops(p, ssa_to_linear(ssa, g.n))
    assert math.isclose(log_costs(g.legs, g.out, g.logsize, ssa)[0], math.log(exact),
                        rel_tol=1e-9)


def test_score_greedy_flops_bound_stops_a_trial():
    p = regular(200, 8)
    g = Graph(network(*p))
    best = log_costs(g.legs, g.out, g.logsize, greedy_core(g.legs, g.out, g.sizes, g.logsize))
    assert greedy_core(g.legs, g.out, g.sizes, g.logsize, log_flops_limit=best[0] / 2) is None


def test_kahypar_partitions_when_installed(monkeypatch):
    pytest.importorskip("kahypar")
    calls = []
    real = part.kahypar_split
    monkeypatch.setattr(part, "kahypar_split", lambda *a, **k: calls.append(1) or real(*a, **k))
    p = regular(120, 9)
    net = network(*p)
    ssa = part.partition_ssa(net, PathOptions(), random.Random(0))
    assert calls and len(ssa) == 119
    flops(p, ssa_to_linear(ssa, 120))  # a valid path


def test_partitioning_without_kahypar_uses_the_builtin_bisection(monkeypatch):
    monkeypatch.setattr(part, "kahypar_module", lambda: None)
    monkeypatch.setattr(part, "kahypar_split", lambda *a, **k: pytest.fail("kahypar used"))
    p = connected(150, 10)
    net = network(*p)
    for seed in range(3):
        ssa = part.partition_ssa(net, PathOptions(), random.Random(seed))
        flops(p, ssa_to_linear(ssa, 150))
    hyper = STRATEGIES["hyper"](*p, PathOptions(max_repeats=6, seed=1))
    assert flops(p, hyper) <= flops(p, STRATEGIES["greedy"](*p))


def test_builtin_bisection_respects_the_balance():
    p = regular(100, 11)
    g = Graph(network(*p))
    left, right = part.bisect(g, list(range(100)), random.Random(0), 0.1)
    assert left | right == set(range(100)) and not left & right
    assert 40 <= len(left) <= 60


def test_hyper_with_partitions_is_reproducible_under_max_repeats():
    p = regular(300, 12)
    opts = PathOptions(max_repeats=4, seed=5)
    path = STRATEGIES["hyper"](*p, opts)
    assert STRATEGIES["hyper"](*p, opts) == path
    assert flops(p, path) <= flops(p, STRATEGIES["greedy"](*p))


def test_auto_at_1000_tensors_returns_a_valid_path_without_beam(monkeypatch):
    import accy.contraction.paths as paths

    monkeypatch.setattr(paths, "beam_ssa", lambda *a, **k: pytest.fail("beam ran"))
    monkeypatch.setattr(paths, "exact_ssa", lambda *a, **k: pytest.fail("exact ran"))
    p = regular(1000, 13)
    path = STRATEGIES["auto"](*p)
    assert len(path) == 999
    assert flops(p, path) <= flops(p, STRATEGIES["greedy"](*p))


def test_auto_up_to_120_is_never_worse_than_todays_candidate():
    for n, seed in [(40, 14), (90, 15)]:
        p = regular(n, seed)
        net = network(*p)
        (today,) = cheap_candidates(net, PathOptions())
        assert flops(p, STRATEGIES["auto"](*p)) <= flops(p, ssa_to_linear(today, n))


def test_hyper_budgeted_reconfiguration_polishes_the_best_tree():
    p = regular(400, 16)
    net = network(*p)
    opts = PathOptions(max_repeats=2, seed=0)
    polished = hyper_ssa(net, opts, reconfigure_budget=50)
    rough = hyper_ssa(net, opts, reconfigure_budget=0)
    assert flops(p, ssa_to_linear(polished, 400)) <= flops(p, ssa_to_linear(rough, 400))
