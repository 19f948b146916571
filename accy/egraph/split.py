"""Splitting a program into regions saturated one by one, and stitching the results back.

E-graph growth is worse than linear in the program's size (more places for every rule to
match, and rules feed each other across the whole program), so one e-graph for a 10,000-node
program reaches any node limit in a step or two and gains less per block than the same
block saturated alone. ``split`` cuts the program's operations, in a topological order, into
consecutive chunks of at most ``size`` nodes, sized evenly. Of two orders it keeps the one
whose cut exports fewer values: the depth-first order of ``accy.ir.node.topological`` (which
keeps a block's nodes together) and the as-late-as-possible one (which keeps a value beside
its user where the depth-first order reaches it early: an unrolled loop's input
projections). Each chunk becomes a one-function program, a *region*:

- its parameters are the values it reads from outside: the program's parameters and the
  results of earlier regions (boundary values, opaque leaves to the rules);
- constants it reads are copied in as constants (folding rules need their values);
- its results are its values that later regions or the program's functions use.

A region is rewritten on its own (its own e-graph and budget); ``stitch`` then substitutes,
region by region in order, every region's (rewritten) results for the original values in the
regions after it. Each region's rewrite is equal to its input for every value of its
parameters, so the stitched program is equal to the input.

Context: a boundary value is an opaque leaf, so a rewrite that needs to see how it was made
(``(a + b) - b``, or the region computing ``b * a`` again where ``a * b`` comes in) is lost at
the cut. With ``context=d`` each region also carries the definitions of its parameters, up to
``d`` operations deep, whose leaves are the region's own parameters or constants
(:class:`Context`; a definition that needs any other value is left out, as the region could
not use what it proves): the e-graph holds them equal to the parameters
(:func:`accy.egraph.convert.add_context`). So what the region recomputes of its inputs, or
what folds to another input, is found, and the rewritten region reads its parameters only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from accy.ir.node import Node, topological
from accy.ir.ops import Op
from accy.ir.program import Function, Program

__all__ = ["Context", "Region", "split", "stitch"]

_LEAVES = (Op.PARAM, Op.CONSTANT)


@dataclass(frozen=True)
class Region:
    """A chunk of a program as a program of its own (module docstring)."""

    program: Program  # one function, "region": parameters = inputs, results = outputs
    inputs: tuple[Node, ...]  # the original values read as parameters, in parameter order
    outputs: tuple[Node, ...]  # the original values its results stand for, in result order
    size: int  # operations (nodes other than parameters and constants) in it
    context: Context | None = None  # its parameters' definitions (split's ``context``)


@dataclass(frozen=True)
class Context:
    """Definitions of a region's parameters (module docstring): ``program``'s function takes
    the region's parameters, and its result ``k`` equals the region's parameter
    ``defines[k]``."""

    program: Program
    defines: tuple[int, ...]


def split(program: Program, size: int, context: int = 0) -> list[Region] | None:
    """The regions of ``program``, at most ``size`` operations each; None when ``size`` is 0
    or the program has no more operations than that (it is one region: itself). With
    ``context`` > 0 each region carries its parameters' definitions that many operations
    deep (module docstring)."""
    if isinstance(context, bool) or not isinstance(context, int) or context < 0:
        raise ValueError(f"context must be a non-negative int, got {context!r}")
    dfs = [n for n in program.nodes() if n.op not in _LEAVES]
    if size <= 0 or len(dfs) <= size:
        return None
    count = -(-len(dfs) // size)
    per = -(-len(dfs) // count)  # even chunks: no tiny last region
    results = [r for f in program.functions for r in f.results]
    ops, region_of, exported = min(
        (_cut(order, per, results) for order in (dfs, _as_late_as_possible(dfs, results))),
        key=lambda cut: len(cut[2]))
    chunks: list[list[Node]] = [[] for _ in range(count)]
    for n in ops:
        chunks[region_of[n]].append(n)
    regions = []
    for k, chunk in enumerate(chunks):
        inputs: dict[Node, Node] = {}  # original value -> the region's parameter
        local: dict[Node, Node] = {}
        for n in chunk:
            srcs = []
            for s in n.srcs:
                if s in local:
                    srcs.append(local[s])
                elif s.op is Op.CONSTANT:
                    srcs.append(s)
                else:
                    if s not in inputs:
                        inputs[s] = Node(Op.PARAM, s.type, (), {"index": len(inputs)})
                    srcs.append(inputs[s])
            local[n] = Node(n.op, n.type, srcs, dict(n.attrs))
        outputs = tuple(n for n in chunk if n in exported)
        fn = Function("region", tuple(inputs.values()),
                      tuple(f"v{i}" for i in range(len(inputs))),
                      tuple(local[n] for n in outputs))
        defined = _context(fn.params, tuple(inputs), context) if context else None
        regions.append(Region(Program((fn,)), tuple(inputs), outputs, len(chunk), defined))
        assert outputs, f"region {k} exports nothing"  # its last node is used later
    return regions


def _as_late_as_possible(ops: list[Node], results: Sequence[Node]) -> list[Node]:
    """``ops`` (in topological order) reordered so that each comes as late as its users
    allow: by decreasing height (the longest path from it to a result), ties in ``ops``'
    order. Where the depth-first order puts a value computed early for a late user (an
    unrolled loop's input projections, all of which the first step's traversal reaches)
    far from that user, this keeps it beside the user, in the same region."""
    height: dict[Node, int] = {r: 0 for r in results}
    for n in reversed(ops):  # users before operands
        h = height.get(n, 0) + 1
        for s in n.srcs:
            if height.get(s, -1) < h:
                height[s] = h
    position = {n: i for i, n in enumerate(ops)}
    return sorted(ops, key=lambda n: (-height.get(n, 0), position[n]))


def _cut(ops: list[Node], per: int, results: Sequence[Node]
         ) -> tuple[list[Node], dict[Node, int], set[Node]]:
    """``ops`` cut into consecutive chunks of ``per``: the order, each operation's chunk,
    and the values used outside their chunk (by a later chunk or as a result)."""
    region_of = {n: i // per for i, n in enumerate(ops)}
    exported = {r for r in results if r in region_of}
    for n in ops:
        for s in n.srcs:
            if s in region_of and region_of[s] != region_of[n]:
                exported.add(s)
    return ops, region_of, exported


def _context(params: tuple[Node, ...], inputs: tuple[Node, ...], depth: int
             ) -> Context | None:
    """The definitions of the parameters (standing for ``inputs``) that are operations,
    over the region's parameters and constants, at most ``depth`` operations deep; a
    parameter whose definition needs a value the region does not read has none."""
    param_of = dict(zip(inputs, params, strict=True))
    memo: dict[tuple[Node, int], Node | None] = {}

    def define(n: Node, d: int) -> Node | None:  # n an operation, d >= 1 levels of it
        stack = [(n, d, False)]
        while stack:
            m, k, ready = stack.pop()
            if (m, k) in memo:
                continue
            deeper = [s for s in m.srcs if s not in param_of and s.op not in _LEAVES]
            if not ready:
                if deeper and k == 1:
                    memo[(m, k)] = None  # reads a value the region does not
                    continue
                stack.append((m, k, True))
                stack.extend((s, k - 1, False) for s in deeper if (s, k - 1) not in memo)
                continue
            srcs: list[Node | None] = [
                param_of[s] if s in param_of else s if s.op is Op.CONSTANT
                else None if s.op is Op.PARAM else memo[(s, k - 1)] for s in m.srcs]
            memo[(m, k)] = (None if any(x is None for x in srcs)
                            else Node(m.op, m.type, srcs, dict(m.attrs)))
        return memo[(n, d)]

    found = [(i, define(v, depth)) for i, v in enumerate(inputs) if v.op not in _LEAVES]
    found = [(i, x) for i, x in found if x is not None]
    if not found:
        return None
    fn = Function("context", params, tuple(f"v{i}" for i in range(len(params))),
                  tuple(x for _, x in found))
    return Context(Program((fn,)), tuple(i for i, _ in found))


def stitch(program: Program, regions: Sequence[Region], rewritten: Sequence[Program]
           ) -> Program:
    """``program`` with every region replaced by its rewritten program (same interface)."""
    new_of: dict[Node, Node] = {}
    for region, prog in zip(regions, rewritten, strict=True):
        subst = [new_of.get(v, v) for v in region.inputs]
        results = _substitute(prog.functions[0].results, subst)
        new_of.update(zip(region.outputs, results, strict=True))
    return Program(tuple(
        Function(f.name, f.params, f.param_names, tuple(new_of.get(r, r) for r in f.results))
        for f in program.functions))


def _substitute(results: Sequence[Node], params: Sequence[Node]) -> list[Node]:
    """``results`` rebuilt over ``params`` in place of their parameters (no recursion)."""
    memo: dict[Node, Node] = {}
    for n in topological(results):
        if n.op is Op.PARAM:
            memo[n] = params[n.attr("index")]
        elif n.op is Op.CONSTANT:
            memo[n] = n
        else:
            memo[n] = Node(n.op, n.type, [memo[s] for s in n.srcs], dict(n.attrs))
    return [memo[r] for r in results]
