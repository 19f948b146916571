"""The ``ilp`` extractor: the cheapest DAG exactly, as an integer linear program (HiGHS,
through ``scipy.optimize.milp``), within a time limit.

Variables: ``x_n`` (e-node ``n`` chosen) and ``a_c`` (e-class ``c`` used), binary, and a
level ``t_c`` in ``[0, C]`` per class (C classes). Constraints: a used class chooses exactly
one e-node (``sum x_n = a_c``), a chosen e-node uses its operand classes (``x_n <= a_ch``),
the roots are used, and a chosen e-node's operands sit lower than its class
(``t_ch <= t_c - 1`` when ``x_n = 1``, big-M ``C + 1`` otherwise), which rules out cycles;
an e-node that is its own operand is never chosen. Objective: the own costs of the chosen
e-nodes, each class once: the DAG cost.

Costs are priced as ``greedy-dag`` prices them (an e-node's operand types come from its
e-classes; a variadic op's from the greedy choice of its operand list, whose elements all
classes of the list share). The result is compared with the ``greedy-dag`` one by exact
integer cost and the cheaper kept, so it is never worse; when HiGHS stops at the time limit
without a better solution, the greedy choices are returned and ``options["note"]`` says so
(the pass puts it in its statistics). Deterministic for equal inputs when HiGHS finishes
(HiGHS is deterministic; a stop by time depends on the machine's speed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from accy.egraph.cost import Choice, CostModel, EClassGraph, ENode, _reachable, priced_operands
from accy.egraph.defaults import DEFAULT_EXTRACT_TIME_LIMIT_S

__all__ = ["extract_ilp"]

_MAX_COEFFICIENT = 1e15  # costs above this (barred constants) are clipped in the objective


def extract_ilp(graph: EClassGraph, roots: list[int], model: CostModel,
                options: dict[str, Any],
                greedy: Callable[..., dict[int, Choice]]) -> dict[int, Choice]:
    """The ILP's choices, or ``greedy``'s where the ILP finds nothing cheaper (module doc)."""
    fallback = greedy(graph, roots, model, options)
    classes = _reachable(graph, roots)
    index = {c: i for i, c in enumerate(classes)}
    nodes = [(c, n) for c in classes for n in graph.classes[c]]
    own = [_own(n, fallback, model) for _, n in nodes]
    C, E = len(classes), len(nodes)
    big = C + 1
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lo: list[float] = []
    hi: list[float] = []

    def row(entries: list[tuple[int, float]], low: float, high: float) -> None:
        r = len(lo)
        for col, v in entries:
            rows.append(r)
            cols.append(col)
            vals.append(v)
        lo.append(low)
        hi.append(high)

    x0, a0, t0 = 0, E, E + C  # variable blocks: x (e-nodes), a (classes), t (levels)
    upper = np.ones(E + 2 * C)
    upper[t0:] = C
    lower = np.zeros(E + 2 * C)
    per_class: dict[int, list[int]] = {}
    for j, (c, n) in enumerate(nodes):
        per_class.setdefault(c, []).append(j)
        for ch in dict.fromkeys(n.children):
            if ch == c:
                upper[x0 + j] = 0  # its own operand: never chosen
                continue
            row([(x0 + j, 1.0), (a0 + index[ch], -1.0)], -np.inf, 0.0)
            row([(t0 + index[ch], 1.0), (t0 + index[c], -1.0), (x0 + j, big)], -np.inf,
                big - 1.0)
    for c, js in per_class.items():
        row([*((x0 + j, 1.0) for j in js), (a0 + index[c], -1.0)], 0.0, 0.0)
    for r in roots:
        lower[a0 + index[r]] = 1
    cost = np.zeros(E + 2 * C)
    cost[:E] = np.minimum(np.asarray(own, dtype=float), _MAX_COEFFICIENT)
    integrality = np.zeros(E + 2 * C)
    integrality[:t0] = 1
    matrix = coo_array((vals, (rows, cols)), shape=(len(lo), E + 2 * C)).tocsr()
    limit = float(options.get("time_limit_s", DEFAULT_EXTRACT_TIME_LIMIT_S))
    if not limit > 0:
        raise ValueError(f"the ilp extractor's time limit must be positive, got {limit!r}")
    res = milp(cost, integrality=integrality, bounds=Bounds(lower, upper),
               constraints=LinearConstraint(matrix, lo, hi),
               options={"time_limit": limit, "presolve": True, "disp": False})
    greedy_cost = _dag_cost(fallback, roots)
    if res.x is None:
        options["note"] = (f"ilp: no solution within {limit:g} s ({res.message}); "
                           "greedy-dag result used")
        return fallback
    chosen: dict[int, ENode] = {}
    for c, js in per_class.items():
        j = max(js, key=lambda j: (res.x[x0 + j], -j))
        if res.x[a0 + index[c]] > 0.5 and res.x[x0 + j] > 0.5:
            chosen[c] = nodes[j][1]
    choices = _choices(chosen, roots, own, nodes)
    exact = res.status == 0
    if choices is None or _dag_cost(choices, roots) >= greedy_cost:
        options["note"] = ("ilp: " + ("optimal" if exact else f"stopped at {limit:g} s")
                           + ", no cheaper than greedy-dag; greedy-dag result used")
        return fallback
    if not exact:
        options["note"] = f"ilp: stopped at {limit:g} s; best solution found used"
    return choices


def _own(n: ENode, greedy: dict[int, Choice], model: CostModel) -> int:
    if n.op is None:
        return 0
    operands = greedy[n.children[0]].elements if n.op.arity is None else n.children
    types = tuple([greedy[o].node.type for o in priced_operands(n.op, operands)])
    return model.node_cost(n.op, n.type, types, dict(n.attrs))  # type: ignore[arg-type]


def _choices(chosen: dict[int, ENode], roots: list[int], own: list[int],
             nodes: list[tuple[int, ENode]]) -> dict[int, Choice] | None:
    """Choices (own cost, list elements; tree cost and size; no digest) of the chosen e-nodes
    reachable from the roots, or None if a root or operand has none (a numerical slip)."""
    own_of = {(c, id(n)): own[j] for j, (c, n) in enumerate(nodes)}
    out: dict[int, Choice] = {}
    entered: set[int] = set()
    for root in roots:
        stack = [(root, False)]
        while stack:  # post-order without recursion
            c, ready = stack.pop()
            if c in out:
                continue
            n = chosen.get(c)
            if n is None:
                return None
            if not ready:
                if c in entered:  # pushed by its own descendant: a cycle
                    return None
                entered.add(c)
                stack.append((c, True))
                stack.extend((ch, False) for ch in n.children if ch not in out)
                continue
            kids = [out[ch] for ch in n.children]
            elements: tuple[int, ...] = ()
            if n.op is None and n.children:
                elements = (n.children[0], *kids[1].elements)
            o = own_of[(c, id(n))]
            out[c] = Choice(n, o, o + sum(k.cost for k in kids),
                            (n.op is not None) + sum(k.size for k in kids), b"", elements)
    return out


def _dag_cost(choices: dict[int, Choice], roots: list[int]) -> int:
    seen: set[int] = set()
    stack = list(roots)
    total = 0
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen.add(c)
        total += choices[c].own
        stack.extend(choices[c].node.children)
    return total

