"""Contraction trees by recursive partitioning of the operand hypergraph (``hyper``'s second
driver; cotengra's ``kahypar`` driver, Gray & Kourtis, Quantum 5, 410).

The operands are split into ``parts`` groups cutting few, small letters (a letter is a
hyperedge over its holders, weighted by ``log2`` of its size), each group is split again until
it has at most ``cutoff`` operands, which greedy contracts; the tree is built top-down, the
parts of one split joined by greedy over their open letters. The imbalance allowed, the cutoff
and the number of parts are drawn per trial. The splits use KaHyPar when it is installed (an
optional dependency: ``pip install kahypar``), with the ``cut_kKaHyPar_sea20`` profile cotengra
uses; otherwise a built-in bisection: spectral (the Fiedler vector of the weighted graph, by
numpy, split at the drawn balance) or a seeded BFS growth, refined by Fiduccia-Mattheyses
single-operand moves.
"""

from __future__ import annotations

import atexit
import functools
import math
import os
import random
import tempfile
import time
from collections import deque

from accy.contraction.cost import Network, tree_to_ssa
from accy.contraction.search import PathOptions, Ssa
from accy.contraction.trials import Graph, greedy_core, tree_of

_PASSES = 4
SPECTRAL_MIN_N = 24  # below it the BFS growth alone is as good
_KAHYPAR_SETTINGS = (  # KaHyPar's cut_kKaHyPar_sea20 profile (the one cotengra uses)
    "mode=direct", "objective=cut", "seed=-1", "cmaxnet=1000", "vcycles=0",
    "p-use-sparsifier=true", "p-sparsifier-min-median-he-size=28",
    "p-sparsifier-max-hyperedge-size=1200", "p-sparsifier-max-cluster-size=10",
    "p-sparsifier-min-cluster-size=2", "p-sparsifier-num-hash-func=5",
    "p-sparsifier-combined-num-hash-func=100", "p-detect-communities=true",
    "p-detect-communities-in-ip=true", "p-reuse-communities=false",
    "p-max-louvain-pass-iterations=100", "p-min-eps-improvement=0.0001",
    "p-louvain-edge-weight=hybrid", "c-type=ml_style", "c-s=1", "c-t=160",
    "c-rating-score=heavy_edge", "c-rating-use-communities=true",
    "c-rating-heavy_node_penalty=no_penalty",
    "c-rating-acceptance-criterion=best_prefer_unmatched",
    "c-fixed-vertex-acceptance-criterion=fixed_vertex_allowed", "i-mode=recursive",
    "i-technique=multi", "i-c-type=ml_style", "i-c-s=1", "i-c-t=150",
    "i-c-rating-score=heavy_edge", "i-c-rating-use-communities=true",
    "i-c-rating-heavy_node_penalty=no_penalty",
    "i-c-rating-acceptance-criterion=best_prefer_unmatched",
    "i-c-fixed-vertex-acceptance-criterion=fixed_vertex_allowed", "i-algo=pool", "i-runs=20",
    "i-bp-algorithm=worst_fit", "i-bp-heuristic-prepacking=false", "i-bp-early-restart=true",
    "i-bp-late-restart=true", "i-r-type=twoway_fm", "i-r-runs=-1", "i-r-fm-stop=simple",
    "i-r-fm-stop-i=50", "r-type=kway_fm_hyperflow_cutter", "r-runs=-1", "r-fm-stop=adaptive_opt",
    "r-fm-stop-alpha=1", "r-fm-stop-i=350", "r-flow-execution-policy=exponential",
    "r-hfc-size-constraint=mf-style", "r-hfc-scaling=16", "r-hfc-distance-based-piercing=true",
    "r-hfc-mbc=true",
)


@functools.cache
def kahypar_module() -> object | None:
    """The ``kahypar`` module, or None where it is not installed."""
    try:
        import kahypar
    except ImportError:
        return None
    return kahypar


@functools.cache
def _profile_path() -> str:
    fd, path = tempfile.mkstemp(prefix="accy-kahypar-", suffix=".ini")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(_KAHYPAR_SETTINGS) + "\n")
    atexit.register(os.remove, path)
    return path


def _hyperedges(graph: Graph, nodes: list[int], log_weights: bool
                ) -> tuple[list[list[int]], list[int]]:
    """The letters joining two or more of ``nodes`` (as local ids) and their weights."""
    index = {v: i for i, v in enumerate(nodes)}
    letters: set[int] = set()
    for v in nodes:
        letters |= graph.legs[v]
    edges, weights = [], []
    for x in sorted(letters):
        held = [index[h] for h in graph.holders[x] if h in index]
        if len(held) >= 2:
            edges.append(held)
            weights.append(1 + int(graph.logsize[x] / math.log(2)) if log_weights else 1)
    return edges, weights


def kahypar_split(graph: Graph, nodes: list[int], parts: int, imbalance: float, seed: int,
                  log_weights: bool = True) -> list[int]:
    """KaHyPar's block (``0..parts-1``) for each of ``nodes``."""
    kahypar = kahypar_module()
    edges, weights = _hyperedges(graph, nodes, log_weights)
    if not edges:  # nothing joins them (KaHyPar would fail): round robin
        return [i % parts for i in range(len(nodes))]
    index, flat = [0], []
    for e in edges:
        flat += e
        index.append(len(flat))
    hg = kahypar.Hypergraph(len(nodes), len(edges), index, flat, parts,  # type: ignore
                            weights, [1] * len(nodes))
    ctx = kahypar.Context()  # type: ignore[attr-defined]
    ctx.loadINIconfiguration(_profile_path())
    ctx.setK(parts)
    ctx.setSeed(seed)
    ctx.suppressOutput(True)
    ctx.setEpsilon(imbalance * parts)
    kahypar.partition(hg, ctx)  # type: ignore[attr-defined]
    return [hg.blockID(i) for i in range(len(nodes))]


def _fiedler_order(graph: Graph, nodes: list[int], rng: random.Random) -> list[int] | None:
    """``nodes`` sorted along the Fiedler vector of their weighted graph (None without numpy
    or on failure)."""
    try:
        import numpy as np
    except ImportError:
        return None
    edges, weights = _hyperedges(graph, nodes, True)
    k = len(nodes)
    lap = np.zeros((k, k))
    for e, w in zip(edges, weights, strict=True):
        share = w / (len(e) - 1)
        for a in e:
            for b in e:
                if a != b:
                    lap[a, b] -= share
    lap[np.diag_indices(k)] = -lap.sum(axis=1)
    lap += np.diag([rng.uniform(0, 1e-6) for _ in range(k)])  # seeded tie-breaking
    try:
        _, vecs = np.linalg.eigh(lap)
    except np.linalg.LinAlgError:
        return None
    vec = vecs[:, 1] if k > 1 else vecs[:, 0]
    return [nodes[i] for i in np.argsort(vec, kind="stable")]


def bisect(graph: Graph, nodes: list[int], rng: random.Random, imbalance: float,
           spectral: bool = True) -> tuple[set[int], set[int]]:
    """Split ``nodes`` in two parts of sizes within ``imbalance`` of half, cutting little
    weight: a spectral (or BFS) start, then Fiduccia-Mattheyses moves."""
    inside = set(nodes)
    weight = [ls / math.log(2) for ls in graph.logsize]
    members = graph.holders
    target = len(nodes) * rng.uniform(0.5 - imbalance, 0.5 + imbalance)
    target = min(max(1, round(target)), len(nodes) - 1)
    order = _fiedler_order(graph, nodes, rng) if spectral and len(nodes) >= SPECTRAL_MIN_N \
        else None
    if order is not None:
        part = set(order[:target] if rng.random() < 0.5 else order[-target:])
    else:
        start = rng.choice(nodes)
        part, queue = {start}, deque([start])
        while len(part) < target:
            if not queue:  # another component: start a new BFS there
                nxt = rng.choice([v for v in nodes if v not in part])
                part.add(nxt)
                queue.append(nxt)
                continue
            v = queue.popleft()
            around = sorted({u for ltr in graph.legs[v] for u in members[ltr] if u in inside
                             and u not in part})
            rng.shuffle(around)
            for u in around:
                if len(part) >= target:
                    break
                part.add(u)
                queue.append(u)
    low = max(1, math.floor(len(nodes) * (0.5 - imbalance)))
    high = min(len(nodes) - 1, math.ceil(len(nodes) * (0.5 + imbalance)))

    def gain(v: int) -> float:  # cut weight saved by moving v to the other side
        here = v in part
        g = 0.0
        for ltr in graph.legs[v]:
            held = [u for u in members[ltr] if u in inside]
            same = sum(1 for u in held if (u in part) == here)
            other = len(held) - same
            if same == 1 and other:
                g += weight[ltr]  # the letter stops being cut
            elif other == 0 and same > 1:
                g -= weight[ltr]  # the letter starts being cut
        return g

    for _ in range(_PASSES):
        moved = False
        for v in sorted(nodes, key=lambda v: -gain(v)):
            g = gain(v)
            if g <= 0:
                break
            size = len(part) + (-1 if v in part else 1)
            if low <= size <= high:
                part.symmetric_difference_update({v})
                moved = True
        if not moved:
            break
    return part, inside - part


def partition_tree(graph: Graph, rng: random.Random, *, cutoff: int, imbalance: float,
                   parts: int = 2, use_kahypar: bool = True, log_weights: bool = True,
                   log_limit: float | None = None, deadline: float | None = None
                   ) -> object | None:
    """One tree by recursive partitioning (None where greedy breaks ``log_limit``); past
    ``deadline`` (``time.perf_counter()``) the groups left are contracted by greedy."""
    kahypar = use_kahypar and kahypar_module() is not None

    def greedy_tree(items: list[object], legs: list[frozenset[int]],
                    keep: frozenset[int]) -> object | None:
        ssa = greedy_core(legs, keep, graph.sizes, graph.logsize, log_limit=log_limit)
        return None if ssa is None else tree_of(ssa, items)

    def solve(group: list[int]) -> object | None:
        if len(group) == 1:
            return group[0]
        if len(group) <= cutoff or (deadline is not None and time.perf_counter() > deadline):
            return greedy_tree(list(group), [graph.legs[v] for v in group],
                               graph.boundary(group))
        k = min(parts, len(group))
        if kahypar:
            blocks = kahypar_split(graph, group, k, imbalance, rng.randrange(1 << 30),
                                   log_weights)
            split = [[v for v, b in zip(group, blocks, strict=True) if b == i]
                     for i in range(k)]
        else:
            left, right = bisect(graph, group, rng, min(imbalance, 0.45))
            split = [sorted(left), sorted(right)]
        split = [s for s in split if s]
        if len(split) < 2:  # no split found: greedy over the whole group
            return greedy_tree(list(group), [graph.legs[v] for v in group],
                               graph.boundary(group))
        trees = [solve(s) for s in split]
        if any(t is None for t in trees):
            return None
        if len(trees) == 2:
            return (trees[0], trees[1])
        return greedy_tree(trees, [graph.boundary(s) for s in split], graph.boundary(group))

    return solve(list(range(graph.n)))


def draw_params(rng: random.Random, kahypar: bool) -> dict:
    """One trial's parameters (cotengra's ranges, the imbalance capped so no part exceeds
    ~5/8 of its group: looser splits recurse deep and cost KaHyPar calls on large groups)."""
    return {"cutoff": rng.randint(10, 40) if kahypar else rng.randint(4, 16),
            "imbalance": rng.uniform(0.01, 0.125) if kahypar else rng.uniform(0.0, 0.3),
            "parts": rng.choice((2, 2, 2, 3, 4)) if kahypar else 2,
            "log_weights": rng.random() < 0.5}


def perturb_params(params: dict, rng: random.Random, kahypar: bool) -> dict:
    """Parameters near ``params`` (``hyper`` samples near the best trial's half the time)."""
    low, high = (10, 40) if kahypar else (4, 16)
    top = 0.125 if kahypar else 0.3
    return {**params, "cutoff": min(high, max(low, params["cutoff"] + rng.randint(-4, 4))),
            "imbalance": min(top, max(0.01, params["imbalance"] * rng.uniform(0.6, 1.6)))}


def partition_ssa(net: Network, opts: PathOptions, rng: random.Random,
                  graph: Graph | None = None, use_kahypar: bool = True,
                  deadline: float | None = None, params: dict | None = None) -> Ssa | None:
    """One tree by recursive partitioning with ``params`` (default: :func:`draw_params` from
    ``rng``); None where it breaks the memory limit."""
    graph = graph or Graph(net)
    kahypar = use_kahypar and kahypar_module() is not None
    log_limit = None if opts.memory_limit is None else math.log(max(opts.memory_limit, 1))
    params = params if params is not None else draw_params(rng, kahypar)
    tree = partition_tree(graph, rng, use_kahypar=use_kahypar, log_limit=log_limit,
                          deadline=deadline, **params)
    return None if tree is None else tree_to_ssa(tree, graph.n)
