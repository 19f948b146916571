"""Contraction path strategies: registry, optimality, validity, determinism, path forms, errors,
and the opt_einsum bridge."""

from __future__ import annotations

import ast
import doctest
import inspect
import os
import pathlib
import random
import subprocess
import sys

import numpy as np
import opt_einsum
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accy  # noqa: F401  (registers accy-* in opt_einsum)
from accy.contraction import (
    STRATEGIES,
    ContractionError,
    ExactStateLimitError,
    PathOptions,
    find_path,
    get_strategy,
    linear_to_ssa,
    naive_path,
    parse_spec,
    path_cost,
    register_strategy,
    search_path,
    sizes_from_shapes,
    ssa_to_linear,
)
from accy.contraction import cost as cost_module
from accy.contraction import paths as paths_module
from accy.contraction import slicing as slicing_module

NAMES = ("exact", "beam", "greedy", "auto", "hyper")
ROOT = pathlib.Path(__file__).resolve().parents[2]


def letter(i: int) -> str:
    return opt_einsum.get_symbol(i)


def random_network(rng: random.Random, n: int, *, hyper: bool = True, local: bool = False,
                   max_size: int = 6) -> tuple[list[str], str, dict[str, int]]:
    """A connected-ish random network: each letter joins 2 operands (3 when ``hyper``), some
    letters are output letters; with ``local``, some letters live in one operand only."""
    terms: list[list[str]] = [[] for _ in range(n)]
    sizes: dict[str, int] = {}
    output = []
    for i in range(1, n):  # a spanning tree keeps it connected
        c = letter(len(sizes))
        sizes[c] = rng.randint(1, max_size)
        terms[i].append(c)
        terms[rng.randrange(i)].append(c)
    for _ in range(rng.randint(0, n)):
        c = letter(len(sizes))
        sizes[c] = rng.randint(1, max_size)
        holders = rng.sample(range(n), min(n, 3 if hyper and rng.random() < 0.3 else 2))
        for h in holders:
            terms[h].append(c)
    for i in rng.sample(range(n), rng.randint(0, min(n, 3))):
        c = letter(len(sizes))
        sizes[c] = rng.randint(1, max_size)
        terms[i].append(c)
        output.append(c)
    if local:
        for i in rng.sample(range(n), rng.randint(1, n)):
            c = letter(len(sizes))
            sizes[c] = rng.randint(2, max_size)
            terms[i].append(c)
    return ["".join(t) for t in terms], "".join(output), sizes


def cost(inputs, output, sizes, path, objective="flops"):
    return path_cost(inputs, output, sizes, path).key(objective)


def oe_path(method: str, inputs, output, sizes, **kwargs):
    fn = opt_einsum.paths.get_path_fn(method)
    return fn([frozenset(t) for t in inputs], frozenset(output), sizes, **kwargs)


def check_pairwise(path, n: int) -> None:
    assert len(path) == max(n - 1, 1)
    assert all(len(step) == 2 for step in path) or path == [(0,)]
    linear_to_ssa(path, n)  # raises on a malformed path


# ---- registry ---------------------------------------------------------------------------------


def test_registry_holds_the_four_strategies():
    assert set(NAMES) <= set(STRATEGIES)


@pytest.mark.parametrize("name", NAMES)
def test_strategy_conforms(name):
    fn = STRATEGIES[name]
    assert get_strategy(name) is fn and fn.__doc__
    params = list(inspect.signature(fn).parameters)
    assert params == ["inputs", "output", "size_dict", "options"]
    inputs, output, sizes = random_network(random.Random(1), 7)
    path = fn(inputs, output, sizes, PathOptions())
    check_pairwise(path, 7)
    assert fn(inputs, output, sizes) == path  # options default to PathOptions()
    assert fn(["ab"], "ba", {"a": 2, "b": 3}, None) == [(0,)]
    assert opt_einsum.paths.get_path_fn("accy-" + name) is not None


def test_duplicate_and_unknown_strategies():
    with pytest.raises(ValueError, match="already registered"):
        register_strategy("exact", STRATEGIES["greedy"])
    with pytest.raises(ContractionError, match="valid: auto, beam, exact, greedy"):
        get_strategy("dp")


def test_contraction_imports_only_accy_errors():
    bad = []
    for path in (ROOT / "accy" / "contraction").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            bad += [f"{path.name}: {m}" for m in names
                    if (m == "accy" or m.startswith("accy."))
                    and m != "accy.errors" and not m.startswith("accy.contraction")]
    assert not bad


@pytest.mark.parametrize("module", [cost_module, paths_module, slicing_module])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


# ---- quality ----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(24))
def test_exact_matches_opt_einsum_optimal(seed):
    rng = random.Random(seed)
    inputs, output, sizes = random_network(rng, rng.randint(3, 6))
    ours = STRATEGIES["exact"](inputs, output, sizes)
    best = oe_path("optimal", inputs, output, sizes)
    assert cost(inputs, output, sizes, ours) == cost(inputs, output, sizes, best)


@pytest.mark.parametrize("seed", range(12))
def test_exact_matches_opt_einsum_dp(seed):
    # no hyperedges and no local letters: dp's objective is then accy's FLOPs halved
    rng = random.Random(100 + seed)
    inputs, output, sizes = random_network(rng, rng.randint(11, 13), hyper=False)
    ours = STRATEGIES["exact"](inputs, output, sizes, PathOptions(exact_state_limit=10**5))
    dp = oe_path("dp", inputs, output, sizes)
    assert cost(inputs, output, sizes, ours)[0] == cost(inputs, output, sizes, dp)[0]


@pytest.mark.parametrize("seed", range(12))
def test_exact_with_local_letters_is_never_worse_than_dp(seed):
    rng = random.Random(200 + seed)
    inputs, output, sizes = random_network(rng, rng.randint(4, 11), local=True)
    ours = STRATEGIES["exact"](inputs, output, sizes, PathOptions(exact_state_limit=10**5))
    for method in ("dp", "greedy"):
        theirs = oe_path(method, inputs, output, sizes)
        assert cost(inputs, output, sizes, ours) <= cost(inputs, output, sizes, theirs)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.integers(2, 14), st.booleans())
def test_heuristics_are_valid_and_never_worse_than_naive(seed, n, local):
    inputs, output, sizes = random_network(random.Random(seed), n, local=local)
    naive, found = cost(inputs, output, sizes, naive_path(n)), {}
    for name in NAMES:
        path = STRATEGIES[name](inputs, output, sizes, PathOptions(exact_state_limit=1 << n))
        check_pairwise(path, n)
        found[name] = cost(inputs, output, sizes, path)
        assert found[name] <= naive, name
    assert found["auto"] <= found["exact"] <= found["greedy"]
    beam = cost(inputs, output, sizes, STRATEGIES["beam"](inputs, output, sizes))
    assert beam <= cost(inputs, output, sizes, STRATEGIES["greedy"](inputs, output, sizes))


@pytest.mark.parametrize("seed", range(6))
def test_beam_and_auto_on_larger_networks(seed):
    rng = random.Random(300 + seed)
    inputs, output, sizes = random_network(rng, 20, hyper=False)
    greedy = cost(inputs, output, sizes, oe_path("greedy", inputs, output, sizes))
    for name in ("beam", "auto"):
        path = STRATEGIES[name](inputs, output, sizes)
        check_pairwise(path, 20)
        assert cost(inputs, output, sizes, path) <= greedy


def test_matrix_chain_is_solved_exactly():
    dims = [30, 35, 15, 5, 10, 20, 25]  # CLRS: 15125 scalar multiplications
    inputs = [letter(i) + letter(i + 1) for i in range(6)]
    sizes = {letter(i): d for i, d in enumerate(dims)}
    for name in ("exact", "beam", "auto"):
        path = STRATEGIES[name](inputs, letter(0) + letter(6), sizes)
        assert path_cost(inputs, letter(0) + letter(6), sizes, path).flops == 2 * 15125


@pytest.mark.parametrize("objective", ["size", "write"])
def test_objectives(objective):
    rng = random.Random(7)
    for _ in range(5):
        inputs, output, sizes = random_network(rng, 7)
        opts = PathOptions(objective=objective)
        best = cost(inputs, output, sizes, STRATEGIES["exact"](inputs, output, sizes, opts),
                    objective)
        for name in NAMES:
            path = STRATEGIES[name](inputs, output, sizes, PathOptions())
            assert best <= cost(inputs, output, sizes, path, objective)


def test_memory_limit_is_kept_or_reported():
    inputs, output, sizes = ["ab", "bc", "cd"], "ad", {"a": 10, "b": 2, "c": 10, "d": 2}
    for name in NAMES:
        path = STRATEGIES[name](inputs, output, sizes, PathOptions(memory_limit=20))
        assert path_cost(inputs, output, sizes, path).size <= 20
        with pytest.raises(ContractionError, match="memory_limit=19"):
            STRATEGIES[name](inputs, output, sizes, PathOptions(memory_limit=19))
        with pytest.raises(ContractionError, match="the output alone"):
            STRATEGIES[name](inputs, output, sizes, PathOptions(memory_limit=3))


def test_disconnected_parts_and_scalars():
    inputs, output, sizes = ["", "ab", "bc", "de", "ef", "g"], "acg", dict.fromkeys("abcdefg", 3)
    for name in NAMES:
        path = STRATEGIES[name](inputs, output, sizes)
        check_pairwise(path, 6)
        result = opt_einsum.contract(",ab,bc,de,ef,g->acg",
                                     *[np.ones((3,) * len(t)) for t in inputs], optimize=path)
        assert np.allclose(result, 81.0)


# ---- determinism ------------------------------------------------------------------------------


def test_equal_inputs_give_equal_paths():
    inputs, output, sizes = random_network(random.Random(11), 16)
    as_sets, opts = [frozenset(t) for t in inputs], PathOptions(exact_state_limit=1 << 16)
    for name in NAMES:
        first = STRATEGIES[name](inputs, output, sizes, opts)
        assert STRATEGIES[name](inputs, output, sizes, opts) == first
        assert STRATEGIES[name](as_sets, frozenset(output), dict(sizes), opts) == first


def test_paths_do_not_depend_on_hash_seed():
    here = str(pathlib.Path(__file__).parent)
    script = (
        f"import random, sys; sys.path.insert(0, {here!r})\n"
        "from test_paths import random_network\n"
        "from accy.contraction import STRATEGIES, PathOptions\n"
        "i, o, s = random_network(random.Random(5), 14)\n"
        "i, p = [frozenset(t) for t in i], PathOptions(exact_state_limit=1 << 14)\n"
        f"print([STRATEGIES[n](i, frozenset(o), s, p) for n in {NAMES!r}])\n"
    )
    outs = set()
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True, check=True, timeout=120)
        outs.add(done.stdout)
    assert len(outs) == 1


# ---- path forms -------------------------------------------------------------------------------


@st.composite
def ssa_paths(draw):
    n = draw(st.integers(1, 12))
    live, path = list(range(n)), []
    for j in range(n - 1):
        a, b = sorted(draw(st.permutations(live))[:2])
        path.append((a, b))
        live = [x for x in live if x not in (a, b)] + [n + j]
    return n, path


@settings(max_examples=60, deadline=None)
@given(ssa_paths())
def test_ssa_linear_round_trip(case):
    n, ssa = case
    linear = ssa_to_linear(ssa, n)
    assert linear_to_ssa(linear, n) == ssa
    assert ssa_to_linear(linear_to_ssa(linear)) == linear
    assert linear == [tuple(s) for s in opt_einsum.paths.ssa_to_linear(ssa)]
    assert ssa == [tuple(s) for s in opt_einsum.paths.linear_to_ssa(linear)]


def test_naive_path_goes_left_to_right():
    assert naive_path(1) == [(0,)]
    assert linear_to_ssa(naive_path(4), 4) == [(0, 1), (4, 2), (5, 3)]


def test_path_cost_units():
    sizes = {"i": 2, "j": 3, "k": 4}
    assert path_cost(["ij", "jk"], "ik", sizes, [(0, 1)]).flops == 2 * 2 * 3 * 4
    assert path_cost(["ij", "jk"], "ijk", sizes, [(0, 1)]).flops == 2 * 3 * 4  # nothing summed
    # the local letter j of 'ij' is summed first (6 FLOPs), then an outer product (8)
    assert path_cost(["ij", "k"], "ik", sizes, [(0, 1)]) == cost_module.PathCost(14, 8, 10)
    assert path_cost(["ij", "jk"], "ik", sizes, [(0, 1)], form="ssa").size == 8
    many = path_cost(["ij", "jk", "k"], "i", sizes, [(0, 1, 2)])  # opt_einsum's 3-way step
    assert many.flops == (2 + 1) * 2 * 3 * 4


# ---- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("call, message", [
    (lambda: sizes_from_shapes(["ij", "jk"], [(2, 3), (4, 5)]),
     "inconsistent sizes for letter 'j': 3 in operand 0 and 4 in operand 1"),
    (lambda: sizes_from_shapes(["ij"], [(2,)]), "has 2 letters but operand 0"),
    (lambda: find_path("ij,jk->il", [(2, 3), (3, 4)]), r"output letters \['l'\] appear in no"),
    (lambda: find_path("ij,jk->ii", [(2, 3), (3, 4)]), "repeats a letter"),
    (lambda: find_path("i...,j", [(2,), (3,)]), "ellipsis"),
    (lambda: find_path("i1,j", [(2,), (3,)]), "not index symbols"),
    (lambda: STRATEGIES["auto"]([], "", {}), "at least one operand"),
    (lambda: STRATEGIES["auto"](["ij"], "i", {"i": 2}), "letter 'j' needs a size"),
    (lambda: STRATEGIES["auto"]("ij", "i", {"i": 2, "j": 2}), "sequence of index terms"),
    (lambda: STRATEGIES["auto"](["ab", "bc"], "ac", dict.fromkeys("abc", 2), {}),
     "options must be PathOptions"),
    (lambda: PathOptions(beam_width=0), "beam_width must be an int >= 1"),
    (lambda: PathOptions(objective="time"), "unknown objective 'time'"),
    (lambda: PathOptions(fallback="dp"), "unknown fallback"),
    (lambda: PathOptions(memory_limit=-1), "memory_limit"),
    (lambda: path_cost(["ij", "jk"], "ik", {"i": 2, "j": 2, "k": 2}, [(0, 2)]),
     r"step 0 \(0, 2\) names position\(s\) \[2\]"),
    (lambda: path_cost(["ij", "jk"], "ik", {"i": 2, "j": 2, "k": 2}, [(0, 0)]), "twice"),
    (lambda: path_cost(["ij", "jk", "k"], "i", dict.fromkeys("ijk", 2), [(0, 1)]),
     "leaves 2 operands"),
    (lambda: ssa_to_linear([(0, 1), (0, 2)], 3), "SSA id 0, already consumed"),
    (lambda: ssa_to_linear([(0, 4), (1, 2)], 3), "SSA id 4, not created yet"),
    (lambda: path_cost(["i"], "i", {"i": 2}, [(0,)], form="tree"), "unknown path form"),
])
def test_errors_are_clear(call, message):
    with pytest.raises(ContractionError, match=message):
        call()


def test_exact_past_its_state_limit():
    inputs, output, sizes = random_network(random.Random(3), 12)
    with pytest.raises(ExactStateLimitError, match="12 operands needs more than "
                                                   "exact_state_limit=64 states"):
        STRATEGIES["exact"](inputs, output, sizes, PathOptions(exact_state_limit=64))
    for fallback in ("beam", "greedy"):
        opts = PathOptions(exact_state_limit=64, fallback=fallback)
        assert STRATEGIES["exact"](inputs, output, sizes, opts) == STRATEGIES[fallback](
            inputs, output, sizes, opts)
    auto = STRATEGIES["auto"](inputs, output, sizes, PathOptions(exact_state_limit=64))
    assert auto == STRATEGIES["beam"](inputs, output, sizes)


# ---- results and opt_einsum -------------------------------------------------------------------


def test_find_path_reports_cost_and_naive_cost():
    result = find_path("bqd,bkd,bkv->bqv", [(2, 16, 8), (2, 12, 8), (2, 12, 4)])
    assert result.path == [(1, 2), (0, 1)] and result.strategy == "auto"
    assert result.cost.flops == 3584 and result.naive_cost.flops == 9216
    assert parse_spec("ba,ac") == (["ba", "ac"], "bc")
    same = search_path(["bqd", "bkd", "bkv"], "bqv", {"b": 2, "q": 16, "k": 12, "d": 8, "v": 4})
    assert same == result


@pytest.mark.parametrize("name", NAMES)
def test_opt_einsum_contract_path_with_accy_strategies(name):
    rng = np.random.default_rng(0)
    spec = "ab,bc,cd,de,ef->af"
    arrays = [rng.standard_normal(s) for s in [(3, 4), (4, 5), (5, 6), (6, 7), (7, 2)]]
    path, info = opt_einsum.contract_path(spec, *arrays, optimize=f"accy-{name}")
    terms, out = parse_spec(spec)
    sizes = sizes_from_shapes(terms, [a.shape for a in arrays])
    assert [tuple(p) for p in path] == STRATEGIES[name](terms, out, sizes)
    expected = np.einsum(spec, *arrays)
    assert np.allclose(opt_einsum.contract(spec, *arrays, optimize=f"accy-{name}"), expected)
    limited, _ = opt_einsum.contract_path(spec, *arrays, optimize=f"accy-{name}",
                                          memory_limit=30)
    assert path_cost(terms, out, sizes, limited).size <= 30
