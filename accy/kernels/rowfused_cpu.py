"""The CPU vector form of the row-fused generator (:mod:`accy.kernels.rowfused`).

A CPU runs a work-group as loops on one core, so barriers and local memory only cost there,
and PoCL's scalar ``pow``/``exp`` calls cost more than its vector ones. Where every op the
row's statistic (or the outputs) need computes on whole vectors (as in
:func:`~accy.kernels.reduction.cpu_lanes`; the per-row values reach them as splats), one
work-item takes one row: each level of statistics streams the row with ``native_vector_bytes``
loads into ``CPU_ACCUMULATORS`` independent vector accumulators per statistic, folded in a
fixed order; a last pass computes and stores the outputs as vectors. Statistics (or outputs)
with an op that has no vector form here (a comparison, a cast) take a scalar loop over the
row in the same work-item (a log-softmax's max and sum of exp in vectors, then its NLL's
one-hot sum in scalars). The row stays in cache between passes. Groups with nothing in
vectors take the scalar form (one work-item per row, no barriers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.types import DType
from accy.ir.walk import Pending
from accy.kernels import exprs, rowgroup
from accy.kernels.ir import (
    INDEX,
    Assign,
    Bin,
    Call,
    Expr,
    Lane,
    Splat,
    Var,
    VectorStore,
    add,
    idx,
    mul,
)
from accy.kernels.reduction import (
    _VECTOR_FLOAT,
    CPU_ACCUMULATORS,
    VectorEvaluator,
    vector_accumulators,
    vector_fold,
)
from accy.kernels.workgroup import GroupEmitter, identity, is_outer_broadcast
from accy.plans import FusionGroup
from accy.target import TargetProfile


def cpu_lanes(group: FusionGroup, rows: rowgroup.RowGroup, target: TargetProfile) -> int:
    """The vector width of the CPU form for ``group``, else 0 (see the module): the widest
    dividing the rows at which some statistic or the outputs compute on whole vectors."""
    if target.device_type != "cpu":
        return 0
    dtype = rows.stats[0].node.type.dtype
    if dtype is not DType.f32 or any(st.node.type.dtype is not dtype for st in rows.stats):
        return 0
    lanes = min(16, max(1, target.native_vector_bytes // dtype.itemsize))
    while lanes >= 2:
        if rows.n % lanes == 0 and (any(vector_stat(group, rows, st, lanes) for st in rows.stats)
                                    or vector_outputs(group, rows, lanes)):
            return lanes
        lanes //= 2
    return 0


def vector_stat(group: FusionGroup, rows: rowgroup.RowGroup, st: rowgroup.RowStat,
                lanes: int) -> bool:
    """Whether statistic ``st`` accumulates whole vectors (else a scalar loop)."""
    return _whole_vectors([st.node.srcs[0]], set(group.nodes), rows, lanes,
                          st.node.type.dtype)


def vector_outputs(group: FusionGroup, rows: rowgroup.RowGroup, lanes: int) -> bool:
    """Whether the full outputs are computed and stored as vectors (else a scalar loop)."""
    full = [o for o in group.outputs if o.type.shape == rows.full]
    return bool(full) and all(o.type.dtype is DType.f32 for o in full) and _whole_vectors(
        full, set(group.nodes), rows, lanes, DType.f32)


def _whole_vectors(roots: list[Node], inside: set[Node], rows: rowgroup.RowGroup,
                   lanes: int, dtype: DType) -> bool:
    """Whether every value under ``roots`` (full values) computes on whole vectors: per-row
    values and scalars as splats, inputs tiling the rows read as vectors."""
    stats = {st.node for st in rows.stats}
    full = 1
    for d in rows.full:
        full *= d
    stack = [(r, False) for r in roots]
    seen = set()
    while stack:
        node, splat = stack.pop()
        if (node, splat) in seen:
            continue
        seen.add((node, splat))
        if node in stats:
            if node.op in rowgroup.ROW_OPS:
                if splat:
                    return False
                stack.append((node.srcs[0], False))
            continue
        size = node.type.size
        if node not in inside:
            if size != 1 and (splat or (size != full and size % lanes)):
                return False
            continue
        if node.type.dtype is not dtype:
            return False
        if node.op not in _VECTOR_FLOAT and node.op not in (Op.RESHAPE, Op.BROADCAST):
            return False
        for s in node.srcs:
            if splat or s.type.size == 1:
                stack.append((s, splat))
            elif rows.is_row(s.type.shape) and size == full:
                stack.append((s, True))  # a per-row value broadcast along its row
            elif node.op is Op.RESHAPE or is_outer_broadcast(s.type.shape, node.type.shape):
                stack.append((s, False))
            else:
                return False
    return True


@dataclass(frozen=True)
class Hooks:
    """What the CPU form takes from the row-fused generator's scalar side."""

    element: Callable[[Expr], tuple[Expr, ...]]  # coordinates of a row element (fast path set)
    source: Callable  # (builder, statistic, coords) -> the scalar value it accumulates
    finish: Callable  # (builder, statistic, total, n): record its combined value
    fmax: Callable[[Expr, Expr], Expr]
    combiner: Callable[[Op, DType], Callable[[Expr, Expr], Expr]]


class _Vectors(VectorEvaluator):
    """Vectors of the row's values: per-row values from ``splats``, (log-)softmax from its
    shift and sum."""

    def __init__(self, em: GroupEmitter, inside: set[Node], arg_of: dict[Node, str],
                 root_size: int, lanes: int, vindex: Expr, splats: dict[Node, Expr],
                 rowops: dict[Node, Callable[[Expr], Expr]]) -> None:
        super().__init__(em, inside, arg_of, root_size, lanes, vindex)
        self.memo.update(splats)
        self.rowops = rowops

    def _open(self, node: Node) -> Expr | Pending:
        if node in self.rowops and node not in self.memo:
            f = self.rowops[node]
            return Pending([(node.srcs[0],)], self._open, lambda args: self._remember(
                node, self.em.bind(f(args[0]), node.type.dtype, prefix="x", lanes=self.lanes)))
        return super()._open(node)


def build_rows(b, group: FusionGroup, rows: rowgroup.RowGroup, lanes: int, row: Expr,
               hooks: Hooks) -> Callable[[list], None] | None:
    """Emit the levels of the CPU form into the builder ``b`` (a row-fused builder): vector
    passes for the statistics that compute on whole vectors, a scalar loop for the others;
    returns ``store(outs)``, which emits the vector pass storing the full outputs, or None
    when they take the scalar loop."""
    em: GroupEmitter = b.em
    dtype = rows.stats[0].node.type.dtype
    units = rows.n // lanes
    inside = set(group.nodes)
    size = 1
    for d in rows.full:
        size *= d
    base = em.bind(mul(row, idx(units)), INDEX, prefix="base")
    splats: dict[Node, Expr] = {}
    rowops: dict[Node, Callable[[Expr], Expr]] = {}

    def splat(value: Expr) -> Expr:
        return em.bind(Splat(dtype, lanes, value), dtype, prefix="sp", lanes=lanes)

    def vectors(u: Expr) -> _Vectors:
        at = em.bind(add(base, u), INDEX, prefix="vi")
        return _Vectors(em, inside, b.arg_of, size, lanes, at, splats, rowops)

    def op_of(st: rowgroup.RowStat) -> Op:
        return (Op.REDUCE_MAX if st.stat == "max" or st.node.op is Op.REDUCE_MAX
                else Op.REDUCE_SUM)

    for level in rows.levels:
        fs = {st: hooks.fmax if st.stat == "max" else hooks.combiner(op_of(st), dtype)
              for st in level}
        vec = [st for st in level if vector_stat(group, rows, st, lanes)]
        scalar = [st for st in level if st not in vec]
        totals: dict[rowgroup.RowStat, Expr] = {}
        if vec:
            totals.update(_vector_level(em, vec, fs, units, lanes, dtype, vectors, splat, b))
        if scalar:
            accs = {st: em.accumulator(dtype, identity(op_of(st), dtype)) for st in scalar}
            with em.strided(idx(0), idx(rows.n), 1) as k:
                coords = hooks.element(k)
                for st in scalar:
                    em.emit(Assign(accs[st], fs[st](Var(accs[st]),
                                                    hooks.source(b, st, coords))))
            totals.update({st: Var(a) for st, a in accs.items()})
        for st in level:
            hooks.finish(b, st, totals[st], rows.n)
            if st.stat == "reduce":
                splats[st.node] = splat(b.row_values[st.node])
            elif st.stat == "expsum":
                rowops[st.node] = _rowop(st.node, splat(b.shifts[st.node]),
                                         splat(b.sums[st.node]), em, dtype, lanes)
    if not vector_outputs(group, rows, lanes):
        return None

    def store(outs: list) -> None:
        with em.strided(idx(0), idx(units), 1) as k:
            ev = vectors(k)
            at = em.bind(add(base, k), INDEX, prefix="vo")
            for a, o in outs:
                y = ev.value(o)
                em.emit(VectorStore(a.name, at, a.dtype, tuple(Lane(y, i) for i in range(lanes))))

    return store


def _vector_level(em: GroupEmitter, level: list, fs: dict, units: int, lanes: int,
                  dtype: DType, vectors: Callable[[Expr], _Vectors],
                  splat: Callable[[Expr], Expr], b) -> dict:
    """Stream the row's vectors into ``CPU_ACCUMULATORS`` accumulators per statistic of
    ``level``; their folded totals."""
    count = min(CPU_ACCUMULATORS, units)
    accs = {st: vector_accumulators(em, dtype, lanes, identity(
        Op.REDUCE_MAX if st.stat == "max" or st.node.op is Op.REDUCE_MAX else Op.REDUCE_SUM,
        dtype), count) for st in level}
    shifts = {st.node: splat(b.shifts[st.node]) for st in level if st.stat == "expsum"}

    def step(u: Expr, j: int) -> None:
        ev = vectors(u)
        for st in level:
            v = ev.value(st.node.srcs[0])
            if st.stat == "expsum":
                v = em.bind(Call("exp", (Bin("-", v, shifts[st.node]),)), dtype, prefix="e",
                            lanes=lanes)
            em.emit(Assign(accs[st][j], fs[st](Var(accs[st][j]), v)))

    whole = units // count * count
    with em.strided(idx(0), idx(whole), count) as k:
        for j in range(count):
            step(add(k, idx(j)) if j else k, j)
    if whole < units:
        with em.strided(idx(whole), idx(units), 1) as k:
            step(k, 0)
    return {st: vector_fold(em, accs[st], fs[st], dtype, lanes) for st in level}


def _rowop(node: Node, shift: Expr, total: Expr, em: GroupEmitter, dtype: DType,
           lanes: int) -> Callable[[Expr], Expr]:
    if node.op is Op.LOG_SOFTMAX:
        ls = em.bind(Call("log", (total,)), dtype, prefix="ls", lanes=lanes)
        return lambda x: Bin("-", Bin("-", x, shift), ls)
    one = em.bind(Splat(dtype, lanes, exprs.const(1.0, dtype)), dtype, prefix="one", lanes=lanes)
    inv = em.bind(Bin("/", one, total), dtype, prefix="inv", lanes=lanes)
    return lambda x: Bin("*", Call("exp", (Bin("-", x, shift),)), inv)
