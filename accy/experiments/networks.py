"""Random tensor networks for the contraction experiments (seeded, machine-independent).

Families: random regular graphs of degree 3 and 4, rings, 2-D lattices and random trees (one
operand per node, one summed letter of size 2..8 per edge, a few open legs), and matrix
chains with random sizes 2..64. ``experiments/bench_paths.py`` draws its instances from here.

:data:`SCALE_FAMILIES` are the large-network families of ``experiments/bench_paths_scale.py``
(issue #17): random 3-regular graphs with bonds of size 2..4 and no open legs (as
einsum_benchmark's ``regular``), random connected graphs of mean degree ~3 (a spanning tree
plus random edges), and matrix chains with their operands shuffled.
"""

from __future__ import annotations

import math
import random
from typing import Any

from opt_einsum.parser import get_symbol

__all__ = ["FAMILIES", "SCALE_FAMILIES", "Problem", "family_sizes", "instances",
           "make_problem", "scale_problem"]

Problem = tuple[list[str], str, dict[str, int]]
FAMILIES = ("regular3", "regular4", "ring", "lattice", "tree", "chain")
SCALE_FAMILIES = ("regular", "connected", "shuffled-chain")


def regular_edges(n: int, degree: int, rng: random.Random) -> list[tuple[int, int]]:
    """A random simple ``degree``-regular graph on ``n`` nodes (configuration model)."""
    if n * degree % 2 or degree >= n:
        raise ValueError(f"no simple {degree}-regular graph on {n} nodes")
    for _ in range(10_000):
        stubs = [i for i in range(n) for _ in range(degree)]
        rng.shuffle(stubs)
        edges = {(min(a, b), max(a, b)) for a, b in zip(stubs[::2], stubs[1::2], strict=True)}
        if len(edges) == len(stubs) // 2 and all(a != b for a, b in edges):
            return sorted(edges)
    raise RuntimeError(f"could not draw a {degree}-regular graph on {n} nodes")


def ring_edges(n: int) -> list[tuple[int, int]]:
    return [(i, (i + 1) % n) for i in range(n)]


def lattice_edges(n: int) -> list[tuple[int, int]]:
    """A rows x cols grid with rows * cols == n, as square as possible."""
    rows = max(r for r in range(1, math.isqrt(n) + 1) if n % r == 0)
    cols = n // rows
    edges = []
    for r in range(rows):
        for c in range(cols):
            i = r * cols + c
            if c + 1 < cols:
                edges.append((i, i + 1))
            if r + 1 < rows:
                edges.append((i, i + cols))
    return edges


def tree_edges(n: int, rng: random.Random) -> list[tuple[int, int]]:
    return [(rng.randrange(i), i) for i in range(1, n)]


def graph_problem(n: int, edges: list[tuple[int, int]], rng: random.Random,
                  open_legs: float = 0.1) -> Problem:
    """One operand per node, one summed letter per edge (size 2..8), open legs in the output."""
    terms: list[list[str]] = [[] for _ in range(n)]
    sizes: dict[str, int] = {}
    output = []
    for a, b in edges:
        c = get_symbol(len(sizes))
        sizes[c] = rng.randint(2, 8)
        terms[a].append(c)
        terms[b].append(c)
    for i in range(n):
        if rng.random() < open_legs:
            c = get_symbol(len(sizes))
            sizes[c] = rng.randint(2, 8)
            terms[i].append(c)
            output.append(c)
    return ["".join(t) for t in terms], "".join(output), sizes


def chain_problem(n: int, rng: random.Random) -> Problem:
    """A product of ``n`` matrices with random sizes 2..64."""
    letters = [get_symbol(i) for i in range(n + 1)]
    sizes = {c: rng.randint(2, 64) for c in letters}
    return [letters[i] + letters[i + 1] for i in range(n)], letters[0] + letters[n], sizes


def make_problem(family: str, n: int, rng: random.Random) -> Problem:
    if family == "regular3":
        return graph_problem(n, regular_edges(n, 3, rng), rng)
    if family == "regular4":
        return graph_problem(n, regular_edges(n, 4, rng), rng)
    if family == "ring":
        return graph_problem(n, ring_edges(n), rng, open_legs=0.5)
    if family == "lattice":
        return graph_problem(n, lattice_edges(n), rng)
    if family == "tree":
        return graph_problem(n, tree_edges(n, rng), rng, open_legs=0.3)
    if family == "chain":
        return chain_problem(n, rng)
    raise ValueError(f"unknown family {family!r}; valid: {', '.join(FAMILIES)}")


def connected_edges(n: int, extra: float, rng: random.Random) -> list[tuple[int, int]]:
    """A random spanning tree plus ``extra * n`` random edges (no repeats, no loops)."""
    edges = {(rng.randrange(i), i) for i in range(1, n)}
    while len(edges) < n - 1 + int(extra * n):
        a, b = rng.sample(range(n), 2)
        edges.add((min(a, b), max(a, b)))
    return sorted(edges)


def scale_problem(family: str, n: int, rng: random.Random) -> Problem:
    """A large network of :data:`SCALE_FAMILIES` (bond sizes 2..4: the widths of 100-1,000
    operand graphs stay representable)."""
    if family == "regular":
        inputs, out, sizes = graph_problem(n + n % 2, regular_edges(n + n % 2, 3, rng), rng,
                                           open_legs=0.0)
    elif family == "connected":
        inputs, out, sizes = graph_problem(n, connected_edges(n, 0.5, rng), rng, open_legs=0.02)
    elif family == "shuffled-chain":
        inputs, out, sizes = chain_problem(n, rng)
        rng.shuffle(inputs)
        return inputs, out, sizes
    else:
        raise ValueError(f"unknown family {family!r}; valid: {', '.join(SCALE_FAMILIES)}")
    return inputs, out, {c: 2 + d % 3 for c, d in sizes.items()}


def family_sizes(family: str, sizes: list[int]) -> list[int]:
    """The operand counts a family is drawn at (chains 4..20, odd n skipped for degree 3,
    degree 4 from 6 operands)."""
    if family == "chain":
        return [n for n in sizes if n <= 20]
    if family == "regular3":
        return [n for n in sizes if n % 2 == 0 and n >= 4]
    if family == "regular4":
        return [n for n in sizes if n >= 6]
    return sizes


def instances(sizes: list[int], repeats: int, seed: int, families: tuple[str, ...]
              ) -> list[dict[str, Any]]:
    """Every (family, n, repeat) instance, each drawn from its own seeded generator."""
    out = []
    for family in families:
        for n in family_sizes(family, sizes):
            for rep in range(repeats):
                rng = random.Random(f"{seed}-{family}-{n}-{rep}")
                inputs, output, size_dict = make_problem(family, n, rng)
                out.append({"family": family, "n": n, "repeat": rep, "inputs": inputs,
                            "output": output, "sizes": size_dict})
    return out
