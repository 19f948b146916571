"""einsum-lowering: N-operand einsums become local reductions and pairwise einsums.

Each ``einsum`` node becomes, in order:

1. per operand, a single-operand ``einsum`` taking the diagonal when its term repeats a letter
   (``iij->ij``: nothing summed, letters in order of first appearance);
2. per operand, a ``reduce_sum`` over the letters found in no other operand and not in the
   output (``ab,cd->ac`` sums ``b`` and ``d`` first: two reductions and an outer product);
3. pairwise ``einsum`` nodes along the path the chosen strategy finds
   (:mod:`accy.contraction`). An intermediate lists its letters in batched-matmul order
   (shared, then the left operand's, then the right's) with the letters its consumer will sum
   last, in the order the consumer's other operand has them, so that summed letters are
   contiguous and alike in both operands of a contraction; the last step writes the output's
   order directly, so no transpose follows it;
4. for a single operand, a ``transpose`` when the remaining letters are out of output order.

With ``memory-limit=N`` every intermediate must hold at most N elements. When no pairwise
path fits (:class:`accy.contraction.NoPathError`), summed letters of the unconstrained path
are *sliced*, the path re-searched for the sliced sizes after each letter
(:mod:`accy.contraction.slicing`): the pairwise steps are emitted once per value
of the sliced letters, on width-1 ``slice`` views of the operands holding them, and the
slices' results are added in a balanced tree of ``add`` nodes (at most :data:`MAX_SLICES`
slices; output letters are never sliced here). ``strategy=hyper`` with ``max-time`` or
``max-repeats`` spends a search budget (``max-time`` makes the chosen path depend on the
machine's speed; ``max-repeats`` keeps it reproducible).

What remains afterwards: ``einsum`` nodes with two operands, none of which holds a letter
that could have been summed inside it, and single-operand ``einsum`` nodes that only take a
diagonal or copy (``ij->ij``). With ``kernel-library=disabled`` the pairwise steps are
primitive ops instead of einsums, for the contraction kernels to be ablated from pipeline
text: each operand transposed and reshaped onto the step's letters (output letters, then the
summed ones), a broadcasting ``mul`` and a ``reduce_sum`` over the summed letters, which
fusion turns into one reduction kernel reading both operands through index arithmetic (f16
operands are multiplied and summed in f32, as the contraction kernels do).

The record of the pass (``ctx.stat``) has ``lowered`` (how many einsums) and, per einsum in
program order, ``einsum-<k>``: the spec, strategy, chosen path (linear form) and its cost next
to the naive left-to-right path's cost, in the units of :mod:`accy.contraction.cost`, and for
a sliced einsum the sliced letters, the number of slices and the total cost of all slices.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from accy.contraction import (
    ContractionError,
    NoPathError,
    PathCost,
    PathOptions,
    PathResult,
    linear_to_ssa,
    search_path,
)
from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Stage
from accy.ir.shapes import infer, parse_einsum
from accy.ir.types import DType
from accy.passes.base import COUNT_MAX, SECONDS_MAX, Pass, option
from accy.passes.rebuild import rebuild, with_srcs
from accy.passes.registry import register

if TYPE_CHECKING:
    from accy.passes.manager import PassContext
    from accy.product import Product

_DEFAULTS = PathOptions()
MAX_SLICES = 256  # slices of one einsum the pass emits (each repeats the pairwise steps)


def make(op: Op, srcs: tuple[Node, ...], **attrs: Any) -> Node:
    """A node of ``op`` over ``srcs`` with its type and attributes from :func:`infer`."""
    t, norm = infer(op, tuple(s.type for s in srcs), attrs)
    return Node(op, t, srcs, norm)


@register
@dataclass(frozen=True)
class EinsumLowering(Pass):
    """Lower N-operand einsums to local reductions and pairwise einsums along a searched path."""

    name = "einsum-lowering"
    stage = Stage.tensor

    strategy: Literal["auto", "exact", "beam", "greedy", "hyper"] = option(
        "auto", "path strategy of accy.contraction (auto: exact within the state limit, else beam)")
    exact_state_limit: int = option(
        _DEFAULTS.exact_state_limit, "most dynamic-programming states the exact search may need",
        minimum=1, maximum=COUNT_MAX)
    beam_width: int = option(_DEFAULTS.beam_width, "partial paths the beam search keeps per step",
                             minimum=1, maximum=COUNT_MAX)
    auto_beam_width: int = option(
        _DEFAULTS.auto_beam_width, "beam width for small einsums (0: never widen)", minimum=0,
        maximum=COUNT_MAX)
    objective: Literal["flops", "size", "write"] = option(
        "flops", "what the path minimizes: FLOPs, largest intermediate or elements written")
    kernel_library: Literal["enabled", "disabled"] = option(
        "enabled", "enabled: pairwise einsums for the tiled contraction kernels; disabled: "
        "each step as broadcast multiply + reduce_sum (primitive ops)")
    memory_limit: int = option(
        0, "largest intermediate in elements (0: no limit); einsums no path fits are sliced",
        minimum=0, maximum=2**62)
    max_time: float = option(
        0.0, "seconds the hyper search (and exact's state limit) may spend per einsum (0: none)",
        minimum=0, maximum=SECONDS_MAX)
    max_repeats: int = option(0, "randomized trials of the hyper search (0: its default)",
                              minimum=0, maximum=COUNT_MAX)

    def __post_init__(self) -> None:
        self.path_options()  # bad values fail when the pipeline is read

    def path_options(self) -> PathOptions:
        for name in ("memory_limit", "max_repeats"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ContractionError(f"{name} must be an int >= 0, got {value!r}")
        if not 0 <= self.max_time < float("inf"):
            raise ContractionError(f"max_time must be a finite number >= 0, "
                                   f"got {self.max_time!r}")
        return PathOptions(objective=self.objective, exact_state_limit=self.exact_state_limit,
                           beam_width=self.beam_width, auto_beam_width=self.auto_beam_width,
                           memory_limit=self.memory_limit or None,
                           max_time=float(self.max_time) or None,
                           max_repeats=self.max_repeats or None)

    def run(self, ctx: PassContext, product: Product) -> Product:
        records: list[dict[str, Any]] = []

        def rewrite(node: Node, srcs: tuple[Node, ...]) -> Node:
            if node.op is Op.EINSUM:
                lowered, record = self.lower(node.attr("spec"), srcs)
                if record is not None:
                    records.append(record)
                return lowered
            if node.op in (Op.PARAM, Op.CONSTANT):
                return node
            return with_srcs(node, srcs)

        program = rebuild(product.program, rewrite)
        ctx.stat("lowered", len(records))
        for k, record in enumerate(records):
            ctx.stat(f"einsum-{k}", record)
        return product.replace(program=program)

    def lower(self, spec: str, srcs: tuple[Node, ...]) -> tuple[Node, dict[str, Any] | None]:
        """The nodes replacing ``einsum(spec, *srcs)`` and the record of its path (None for a
        copy, which is left as it is)."""
        terms, out = parse_einsum(spec, [s.type.rank for s in srcs])
        if len(srcs) == 1 and len(set(terms[0])) == len(terms[0]) and terms[0] == out:
            return make(Op.EINSUM, srcs, spec=spec), None  # a copy: nothing to lower
        letters = [set(t) for t in terms]
        operands = []
        for i, (node, term) in enumerate(zip(srcs, terms, strict=True)):
            elsewhere = set(out).union(*(letters[:i] + letters[i + 1:]))
            operands.append(_prepare(node, term, elsewhere))
        sizes = {c: d for s, t in zip(srcs, terms, strict=True) for c, d in zip(t, s.type.shape,
                                                                                 strict=True)}
        try:
            chosen = search_path(terms, out, sizes, self.strategy, self.path_options(),
                                 slicing=True, slice_output=False)
        except NoPathError as e:
            raise NoPathError(f"einsum {spec!r}: {e} (the pass slices summed letters only)",
                              e.smallest) from e
        if len(operands) == 1:
            node, have = operands[0]
            if have != out:
                node = make(Op.TRANSPOSE, (node,), perm=tuple(have.index(c) for c in out))
            return node, self.record(spec, chosen)
        sliced = chosen.sliced.letters if chosen.sliced is not None else ()
        if chosen.sliced is not None and chosen.sliced.slices > MAX_SLICES:
            raise ContractionError(
                f"einsum {spec!r} fits memory_limit={self.memory_limit} only in "
                f"{chosen.sliced.slices} slices (letters {', '.join(sliced)}); the pass emits "
                f"at most {MAX_SLICES}: raise the limit")
        results = []
        for values in itertools.product(*(range(sizes[c]) for c in sliced)):
            fixed = dict(zip(sliced, values, strict=True))
            views = [_fix(node, have, fixed) for node, have in operands]
            results.append(self._pairwise(chosen.path, views, out))
        while len(results) > 1:  # a balanced tree of adds: the slices' partial sums
            results = [make(Op.ADD, (results[k], results[k + 1])) if k + 1 < len(results)
                       else results[k] for k in range(0, len(results), 2)]
        return results[0], self.record(spec, chosen)

    def _pairwise(self, path: list[tuple[int, ...]], operands: list[tuple[Node, str]],
                  out: str) -> Node:
        """The pairwise steps of ``path`` over prepared ``operands`` (node, letter order)."""
        nodes = {i: node for i, (node, _) in enumerate(operands)}
        orders = {i: have for i, (_, have) in enumerate(operands)}
        for x, a, b, result in _steps(path, [set(h) for _, h in operands], out, orders):
            if self.kernel_library == "disabled":
                nodes[x] = _multiply_sum(nodes[a], orders[a], nodes[b], orders[b], result)
            else:
                spec_ab = f"{orders[a]},{orders[b]}->{result}"
                nodes[x] = make(Op.EINSUM, (nodes[a], nodes[b]), spec=spec_ab)
            orders[x] = result
        return nodes[max(nodes)]

    def record(self, spec: str, chosen: PathResult) -> dict[str, Any]:
        """What the pass reports about one einsum (``ctx.stat("einsum-<k>", ...)``)."""
        record = {
            "spec": spec, "strategy": self.strategy, "objective": self.objective,
            "path": tuple(chosen.path), "cost": _figures(chosen.cost),
            "naive_cost": _figures(chosen.naive_cost),
        }
        if chosen.sliced is not None:
            record.update(sliced=chosen.sliced.letters, slices=chosen.sliced.slices,
                          sliced_cost=_figures(chosen.sliced.total))
        return record


def _multiply_sum(a: Node, la: str, b: Node, lb: str, result: str) -> Node:
    """``einsum(la,lb->result)`` as primitive ops: both operands on the letters ``result`` +
    summed (transposed, size-1 dims where a letter is missing), a broadcasting ``mul`` and a
    ``reduce_sum`` over the summed letters; f16 computed in f32."""
    full = result + "".join(c for c in dict.fromkeys(la + lb) if c not in result)
    dtype = a.type.dtype

    def spread(node: Node, have: str) -> Node:
        order = "".join(c for c in full if c in have)
        if order != have:
            node = make(Op.TRANSPOSE, (node,), perm=tuple(have.index(c) for c in order))
        shape = tuple(node.type.shape[order.index(c)] if c in order else 1 for c in full)
        if shape != node.type.shape:
            node = make(Op.RESHAPE, (node,), shape=shape)
        if dtype is DType.f16:
            node = make(Op.CAST, (node,), dtype=DType.f32)
        return node

    out = make(Op.MUL, (spread(a, la), spread(b, lb)))
    if len(full) > len(result):
        out = make(Op.REDUCE_SUM, (out,), axes=tuple(range(len(result), len(full))),
                   keepdims=False)
    return make(Op.CAST, (out,), dtype=dtype) if dtype is DType.f16 else out


def _fix(node: Node, have: str, fixed: dict[str, int]) -> tuple[Node, str]:
    """``node`` (letters ``have``) with the letters of ``fixed`` fixed to their values: a
    width-1 ``slice`` and a ``reshape`` dropping those axes."""
    axes = [k for k, c in enumerate(have) if c in fixed]
    if not axes:
        return node, have
    shape = node.type.shape
    starts = tuple(fixed[c] if c in fixed else 0 for c in have)
    stops = tuple(fixed[c] + 1 if c in fixed else d for c, d in zip(have, shape, strict=True))
    view = make(Op.SLICE, (node,), starts=starts, stops=stops, steps=(1,) * len(have))
    kept = "".join(c for c in have if c not in fixed)
    view = make(Op.RESHAPE, (view,), shape=tuple(d for c, d in zip(have, shape, strict=True)
                                                 if c not in fixed))
    return view, kept


def _prepare(node: Node, term: str, elsewhere: set[str]) -> tuple[Node, str]:
    """Take the diagonal of repeated letters, then sum letters found nowhere else."""
    have = "".join(dict.fromkeys(term))
    if have != term:
        node = make(Op.EINSUM, (node,), spec=f"{term}->{have}")
    local = tuple(k for k, c in enumerate(have) if c not in elsewhere)
    if local:
        node = make(Op.REDUCE_SUM, (node,), axes=local, keepdims=False)
        have = "".join(c for c in have if c in elsewhere)
    return node, have


def _steps(path: list[tuple[int, ...]], letters: list[set[str]], out: str,
           orders: dict[int, str]) -> Iterator[tuple[int, int, int, str]]:
    """Yield ``(result id, left id, right id, result letters)`` per step of ``path`` (SSA ids).

    ``orders`` holds the letter order of every operand made so far (the caller adds each
    result before asking for the next step). Letters are ordered as the module docstring
    says; the tail follows the consumer's other operand, alphabetical while it is not made.
    """
    n = len(letters)
    ssa = linear_to_ssa(path, n)
    alive, sets, partner, lost = list(range(n)), dict(enumerate(letters)), {}, {}
    for t, (a, b) in enumerate(ssa):
        alive = [k for k in alive if k not in (a, b)]
        keep = set(out).union(*(sets[k] for k in alive))
        sets[n + t] = (sets[a] | sets[b]) & keep
        lost[a] = sets[a] - sets[n + t]
        lost[b] = sets[b] - sets[n + t]
        partner[a], partner[b] = b, a
        alive.append(n + t)
    for t, (a, b) in enumerate(ssa):
        x = n + t
        if t == len(ssa) - 1:
            yield x, a, b, out
            continue
        la, lb = orders[a], orders[b]
        first = [c for c in la if c in lb] + [c for c in la + lb if c not in lb or c not in la]
        tail = lost[x]
        other = orders.get(partner[x])
        last = [c for c in other if c in tail] if other is not None else sorted(tail)
        yield x, a, b, "".join(c for c in first if c in sets[x] and c not in tail) + "".join(last)


def _figures(cost: PathCost) -> dict[str, int]:
    return {"flops": cost.flops, "size": cost.size, "write": cost.write}
