"""Issue #17, contraction paths at scale: no false "no path" under a memory limit, the budgeted
``hyper`` strategy, chains solved exactly at 100 operands, slicing, >52 indices."""

from __future__ import annotations

import itertools
import random

import numpy as np
import opt_einsum
import pytest

import accy  # noqa: F401  (registers accy-* in opt_einsum)
from accy.contraction import (
    STRATEGIES,
    ContractionError,
    NoPathError,
    PathOptions,
    find_path,
    parse_spec,
    path_cost,
    search_path,
    sizes_from_shapes,
    slice_path,
    sliced_cost,
)
from accy.contraction.chain import chain_order
from accy.contraction.cost import linear_to_ssa, network
from accy.contraction.opt_einsum_bridge import AccyOptimizer
from accy.contraction.slicing import _choose, sliced_cost_mask
from accy.experiments.networks import chain_problem, graph_problem, regular_edges

NAMES = ("exact", "beam", "greedy", "auto", "hyper")

# einsum_benchmark.generators.random.regular(14, 3, d_min=2, d_max=4, seed=1), stored as data
# so the test needs no einsum_benchmark: accy-auto's unconstrained path has largest
# intermediate 108, and with memory_limit=108 accy-auto used to raise "no pairwise path".
REGULAR_14 = ("abc,bde,fgh,ijk,elm,fkn,jop,cqr,ans,hst,lpu,dor,qtu,gim->",
              [(2, 4, 2), (4, 3, 2), (3, 3, 3), (4, 3, 2), (2, 2, 3), (3, 2, 2), (3, 3, 3),
               (2, 4, 2), (2, 2, 4), (3, 4, 3), (2, 3, 3), (3, 3, 2), (4, 3, 3), (3, 4, 3)])


def problem(spec: str, shapes: list[tuple[int, ...]]) -> tuple[list[str], str, dict[str, int]]:
    terms, out = parse_spec(spec)
    return terms, out, sizes_from_shapes(terms, shapes)


# ---- 1. no false failures -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["auto", "beam", "greedy", "hyper"])
def test_own_largest_intermediate_is_a_feasible_limit(name):
    inputs, out, sizes = problem(*REGULAR_14)
    free = STRATEGIES["auto"](inputs, out, sizes)
    limit = path_cost(inputs, out, sizes, free).size
    assert limit == 108
    path = STRATEGIES[name](inputs, out, sizes, PathOptions(memory_limit=limit))
    assert path_cost(inputs, out, sizes, path).size <= limit


def test_exact_falls_back_under_a_memory_limit_too():
    inputs, out, sizes = problem(*REGULAR_14)
    opts = PathOptions(memory_limit=108, exact_state_limit=1 << 20)
    assert path_cost(inputs, out, sizes, STRATEGIES["exact"](inputs, out, sizes, opts)).size <= 108


@pytest.mark.parametrize("seed", range(12))
def test_limits_from_own_paths_never_fail(seed):
    """The sweep of issue #17: a strategy's own unconstrained largest intermediate is a limit
    every strategy meets (10-30 operands)."""
    rng = random.Random(1700 + seed)
    n = rng.choice([10, 14, 18, 22, 26, 30])
    inputs, out, sizes = graph_problem(n, regular_edges(n, 3, rng), rng, open_legs=0.0)
    for name in ("auto", "beam", "greedy"):
        limit = path_cost(inputs, out, sizes, STRATEGIES[name](inputs, out, sizes)).size
        for other in ("auto", "beam", "greedy"):
            path = STRATEGIES[other](inputs, out, sizes, PathOptions(memory_limit=limit))
            assert path_cost(inputs, out, sizes, path).size <= limit


@pytest.mark.parametrize("n, degree, seed", [(14, 3, 1), (22, 4, 1), (30, 3, 2), (30, 3, 3)])
def test_einsum_benchmark_instances_that_failed(n, degree, seed):
    """Instances of the issue's 96-instance sweep that raised "no pairwise path" (the last
    three still did before strategies fell back to their own unconstrained path)."""
    generators = pytest.importorskip("einsum_benchmark.generators.random")
    try:
        spec, shapes = generators.regular(n, degree, d_min=2, d_max=4, seed=seed)
    except ImportError:  # einsum_benchmark without its [generators] extra
        pytest.skip("einsum_benchmark[generators] is not installed")
    inputs, out, sizes = problem(spec, shapes)
    for name in ("auto", "beam", "greedy", "hyper"):
        limit = path_cost(inputs, out, sizes, STRATEGIES[name](inputs, out, sizes)).size
        path = STRATEGIES[name](inputs, out, sizes, PathOptions(memory_limit=limit))
        assert path_cost(inputs, out, sizes, path).size <= limit


@pytest.mark.parametrize("name", NAMES)
def test_an_impossible_limit_reports_the_smallest_found(name):
    inputs, out, sizes = problem(*REGULAR_14)
    opts = PathOptions(memory_limit=40, exact_state_limit=1 << 20)
    with pytest.raises(NoPathError, match="memory_limit=40.*smallest largest intermediate found "
                                          "is 108 elements") as info:
        STRATEGIES[name](inputs, out, sizes, opts)
    assert info.value.smallest == 108


# ---- 2. budgeted search -------------------------------------------------------------------


def network_of(n: int, seed: int) -> tuple[list[str], str, dict[str, int]]:
    rng = random.Random(seed)
    return graph_problem(n, regular_edges(n, 3, rng), rng, open_legs=0.0)


def test_hyper_on_100_operands_is_effort_bounded_and_reproducible():
    inputs, out, sizes = network_of(100, 17)
    opts = PathOptions(max_repeats=6, seed=3)
    path = STRATEGIES["hyper"](inputs, out, sizes, opts)
    assert STRATEGIES["hyper"](inputs, out, sizes, opts) == path  # effort budget: same result
    assert len(path) == 99
    hyper = path_cost(inputs, out, sizes, path).flops
    assert hyper <= path_cost(inputs, out, sizes, STRATEGIES["greedy"](inputs, out, sizes)).flops
    auto = path_cost(inputs, out, sizes, STRATEGIES["auto"](inputs, out, sizes)).flops
    assert hyper <= auto  # it starts from auto's path up to 120 operands


def test_hyper_time_budget_returns_a_valid_path():
    inputs, out, sizes = network_of(60, 5)
    path = STRATEGIES["hyper"](inputs, out, sizes, PathOptions(max_time=0.2))
    assert len(path) == 59  # its quality depends on the machine's speed: not asserted


def test_auto_is_never_worse_than_its_beam_candidate():
    inputs, out, sizes = network_of(40, 8)
    auto = path_cost(inputs, out, sizes, STRATEGIES["auto"](inputs, out, sizes)).flops
    beam = path_cost(inputs, out, sizes, STRATEGIES["beam"](inputs, out, sizes)).flops
    assert auto <= beam


def test_budget_options_are_checked():
    for bad in (dict(max_time=0), dict(max_time=float("inf")), dict(max_repeats=0),
                dict(seed=1.5)):
        with pytest.raises(ContractionError):
            PathOptions(**bad)
    assert PathOptions(exact_state_limit=10, max_time=1.0).state_limit() > 10


def test_opt_einsum_registration_and_optimizer_object():
    inputs, out, sizes = network_of(30, 2)
    arrays = [np.full([sizes[c] for c in t], 0.5) for t in inputs]
    spec = ",".join(inputs) + "->" + out
    optimizer = AccyOptimizer("hyper", max_repeats=3)
    path, _ = opt_einsum.contract_path(spec, *arrays, optimize=optimizer)
    assert [tuple(p) for p in path] == STRATEGIES["hyper"](inputs, out, sizes,
                                                           PathOptions(max_repeats=3))
    with pytest.raises(ContractionError):
        AccyOptimizer("hyper", max_repeats=0)
    assert "accy-hyper" in opt_einsum.paths._PATH_OPTIONS


# ---- 3. exact search that scales ----------------------------------------------------------


def shuffled_chain(n: int, seed: int) -> tuple[list[str], str, dict[str, int]]:
    rng = random.Random(seed)
    inputs, out, sizes = chain_problem(n, rng)
    rng.shuffle(inputs)
    return inputs, out, sizes


def test_shuffled_chain_of_100_matrices_is_solved_exactly():
    inputs, out, sizes = shuffled_chain(100, 0)
    assert chain_order(network(inputs, out, sizes)) is not None
    dp = opt_einsum.paths.dynamic_programming([set(t) for t in inputs], set(out), sizes)
    best = path_cost(inputs, out, sizes, dp).flops
    for name in ("exact", "auto"):
        assert path_cost(inputs, out, sizes, STRATEGIES[name](inputs, out, sizes)).flops == best


@pytest.mark.parametrize("seed", range(10))
def test_small_chains_match_opt_einsum_optimal(seed):
    inputs, out, sizes = shuffled_chain(random.Random(seed).randint(3, 9), 50 + seed)
    optimal = opt_einsum.paths.optimal([set(t) for t in inputs], set(out), sizes)
    path = STRATEGIES["exact"](inputs, out, sizes, PathOptions(exact_outer_limit=0))
    assert path_cost(inputs, out, sizes, path).flops == path_cost(inputs, out, sizes,
                                                                  optimal).flops


def test_chain_detection_rejects_rings_and_hyperedges():
    assert chain_order(network(["ab", "bc", "ca"], "", dict.fromkeys("abc", 2))) is None
    assert chain_order(network(["ab", "ab", "ab"], "", dict.fromkeys("ab", 2))) is None
    assert chain_order(network(["xa", "ab", "b"], "x", dict.fromkeys("xab", 2))) == [0, 1, 2]


# ---- 4. slicing ---------------------------------------------------------------------------


def contract_sliced(spec: str, arrays: list[np.ndarray], path, letters: tuple[str, ...]
                    ) -> np.ndarray:
    """Run a sliced contraction with numpy: one contraction along ``path`` per value of the
    sliced letters, results added (summed letters) or written in place (output letters)."""
    terms, out = parse_spec(spec)
    sizes = sizes_from_shapes(terms, [a.shape for a in arrays])
    result = np.zeros([sizes[c] for c in out])
    for values in itertools.product(*(range(sizes[c]) for c in letters)):
        fixed = dict(zip(letters, values, strict=True))
        views = [a[tuple(fixed.get(c, slice(None)) for c in t)] for a, t in zip(arrays, terms,
                                                                                 strict=True)]
        sub = [t.translate({ord(c): None for c in letters}) for t in terms]
        sub_out = out.translate({ord(c): None for c in letters})
        part = opt_einsum.contract(",".join(sub) + "->" + sub_out, *views, optimize=path)
        result[tuple(fixed.get(c, slice(None)) for c in out)] += part
    return result


@pytest.mark.parametrize("seed", range(4))
def test_sliced_contraction_equals_the_unsliced_one(seed):
    rng = random.Random(seed)
    inputs, out, sizes = graph_problem(10, regular_edges(10, 3, rng), rng, open_legs=0.2)
    spec = ",".join(inputs) + "->" + out
    arrays = [np.random.default_rng(seed + i).standard_normal([sizes[c] for c in t])
              for i, t in enumerate(inputs)]
    path = STRATEGIES["auto"](inputs, out, sizes)
    free = path_cost(inputs, out, sizes, path)
    limit = max(free.size // 4, 1)
    for allow_output in (True, False):
        try:
            sliced = slice_path(inputs, out, sizes, path, limit, allow_output)
        except NoPathError:
            assert not allow_output  # only output letters left to slice
            continue
        assert sliced.per_slice.size <= limit and sliced.slices > 1
        assert sliced.total.flops >= free.flops  # slicing repeats work
        assert sliced == sliced_cost(inputs, out, sizes, path, sliced.letters)
        if not allow_output:
            assert not set(sliced.letters) & set(out)
        got = contract_sliced(spec, arrays, path, sliced.letters)
        assert np.allclose(got, opt_einsum.contract(spec, *arrays, optimize=path))


@pytest.mark.parametrize("seed", range(4))
def test_slicing_with_search_fits_computes_the_same_and_beats_total_flops_greedy(seed):
    rng = random.Random(seed)
    inputs, out, sizes = graph_problem(12, regular_edges(12, 3, rng), rng, open_legs=0.2)
    spec = ",".join(inputs) + "->" + out
    arrays = [np.random.default_rng(seed + i).standard_normal([sizes[c] for c in t])
              for i, t in enumerate(inputs)]
    path = STRATEGIES["auto"](inputs, out, sizes)
    net = network(inputs, out, sizes)
    ssa = linear_to_ssa(path, len(inputs))
    for k in (4, 16):
        limit = max(path_cost(inputs, out, sizes, path).size // k, 1)
        fixed = slice_path(inputs, out, sizes, path, limit)
        searched = slice_path(inputs, out, sizes, path, limit, search=True)
        assert searched.per_slice.size <= limit
        assert searched.total.flops <= fixed.total.flops
        by_flops = sliced_cost_mask(net, ssa, _choose(net, ssa, limit, True, by_excess=False))
        assert fixed.total.flops <= by_flops.total.flops  # the rule before is one of the runs
        assert searched == sliced_cost(inputs, out, sizes, searched.path, searched.letters)
        got = contract_sliced(spec, arrays, searched.path, searched.letters)
        assert np.allclose(got, opt_einsum.contract(spec, *arrays, optimize=path))


def test_search_path_slices_when_no_path_fits():
    inputs, out, sizes = problem(*REGULAR_14)
    with pytest.raises(NoPathError):
        search_path(inputs, out, sizes, "auto", PathOptions(memory_limit=40))
    result = search_path(inputs, out, sizes, "auto", PathOptions(memory_limit=40), slicing=True)
    assert result.sliced is not None and result.sliced.per_slice.size <= 40
    assert result.sliced.total.flops > result.cost.flops


# ---- 5. any number of indices --------------------------------------------------------------


def test_more_than_52_indices_in_specs():
    n = 120
    inputs, out, sizes = chain_problem(n, random.Random(1))
    assert len(sizes) > 52
    spec = ",".join(inputs) + "->" + out
    shapes = [tuple(sizes[c] for c in t) for t in inputs]
    assert parse_spec(spec) == (inputs, out)
    result = find_path(spec, shapes)
    assert len(result.path) == n - 1
    with pytest.raises(ContractionError, match="index symbols"):
        parse_spec("a b,b-c->ac".replace(" ", "\t"))
