"""Row groups: reductions over the same rows with the elementwise ops between and after them.

A *row group* is a set of ops over one row domain ``prefix + (n,)``: reductions along the
last axis only (sum, mean, max: each turns a *full* ``prefix + (n,)`` value into a *row*
value, ``prefix + (1,)`` or ``prefix``), elementwise ops on full and row values (broadcasting
rows back along the axis), and movement ops. Everything downstream of a reduction stays in the
row: it is a full or row value, and the only movement ops on it are broadcasts back along the
row and reshapes between the two row shapes. Such a group needs each row's reductions once,
in dependency order (a layer norm's variance reads its mean), so one work-group per row (or a
work-item on a CPU) computes it whole. A softmax or log-softmax along the rows counts as two
reductions (the row maximum, then the sum of ``exp(x - shift)``) and a full value.
fusion-planning merges the groups of such chains (``row-fusion``) and the ``row-fused``
generator (:mod:`accy.kernels.rowfused`) builds them. This module only analyses; both import
it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from accy.ir.node import Node
from accy.ir.ops import Op, OpKind
from accy.ir.types import DType

ROW_REDUCTIONS = (Op.REDUCE_SUM, Op.REDUCE_MEAN, Op.REDUCE_MAX)
# A row group takes one work-group per row: fewer rows than MIN_ROWS are only fused when they
# are short (at most SHORT_ROW elements); a few long rows would leave a GPU idle, where the
# tree reduction splits each over the device (a full sum of 2^24 elements, then x - mean)
MIN_ROWS = 64
SHORT_ROW = 4096
ROW_OPS = (Op.SOFTMAX, Op.LOG_SOFTMAX)  # full values from two row statistics: max, sum of exp


@dataclass(frozen=True)
class RowStat:
    """One per-row value a row group computes: a reduction's result (``reduce``), or a
    (log-)softmax's row maximum (``max``) or sum of ``exp(x - shift)`` (``expsum``)."""

    node: Node
    stat: str


@dataclass(frozen=True)
class RowGroup:
    """The rows of a row group and its reductions by level (a reduction's level is one more
    than the highest level of the reductions it reads; level 0 reads none)."""

    prefix: tuple[int, ...]
    n: int
    levels: tuple[tuple[RowStat, ...], ...]
    dependent: frozenset[Node] = frozenset()  # the statistics' nodes and all that read them

    @property
    def full(self) -> tuple[int, ...]:
        return (*self.prefix, self.n)

    @property
    def stats(self) -> tuple[RowStat, ...]:
        return tuple(r for level in self.levels for r in level)

    def is_row(self, shape: tuple[int, ...]) -> bool:
        """A row value's shape (one element per row)."""
        return shape in (self.prefix, (*self.prefix, 1)) and shape != self.full


def row_reduction(node: Node) -> tuple[tuple[int, ...], int] | None:
    """``(prefix, n)`` of a reduction or (log-)softmax along the last axis only, else None."""
    if node.op not in ROW_REDUCTIONS and node.op not in ROW_OPS:
        return None
    x = node.srcs[0]
    rank = x.type.rank
    if rank == 0:
        return None
    axes = node.attr("axes") if node.op in ROW_REDUCTIONS else (node.attr("axis"),)
    if tuple(sorted({a % rank for a in axes})) != (rank - 1,):
        return None
    if not x.type.dtype.is_float or x.type.dtype is DType.f16 or node.type.dtype != x.type.dtype:
        return None
    return x.type.shape[:-1], x.type.shape[-1]


def _broadcasts_to(shape: tuple[int, ...], full: tuple[int, ...]) -> bool:
    if len(shape) > len(full):
        return False
    lead = len(full) - len(shape)
    return all(d in (1, full[lead + i]) for i, d in enumerate(shape))


def analyse(nodes: Iterable[Node], outputs: Iterable[Node] = ()) -> RowGroup | None:
    """The :class:`RowGroup` of ``nodes`` (operands before users), else None: at least one
    row reduction, all over the same rows, and only elementwise and movement ops besides,
    within the rules of the module; ``outputs`` must be full or row values."""
    nodes = list(nodes)
    rows = {row_reduction(n) for n in nodes if n.op in ROW_REDUCTIONS or n.op in ROW_OPS}
    if len(rows) != 1 or None in rows:
        return None
    ((prefix, n),) = rows
    if math.prod(prefix) < MIN_ROWS and n > SHORT_ROW:
        return None
    full = (*prefix, n)
    group = RowGroup(prefix, n, ())
    level: dict[Node, int] = {}  # for row-dependent nodes: the level of the values they need
    stats: list[tuple[int, RowStat]] = []
    for node in nodes:
        shape = node.type.shape
        if not (_broadcasts_to(shape, full) or group.is_row(shape)):
            return None
        deps = [level[s] for s in node.srcs if s in level]
        if node.op in ROW_REDUCTIONS:
            if node.srcs[0].type.shape != full:
                return None
            level[node] = 1 + max(deps, default=-1)
            stats.append((level[node], RowStat(node, "reduce")))
            continue
        if node.op in ROW_OPS:
            if node.srcs[0].type.shape != full:
                return None
            first = 1 + max(deps, default=-1)
            stats += [(first, RowStat(node, "max")), (first + 1, RowStat(node, "expsum"))]
            level[node] = first + 1
            continue
        if not (node.op.is_elementwise or node.op.kind is OpKind.MOVEMENT):
            return None
        if not deps:
            continue
        if shape != full and not group.is_row(shape):
            return None
        if node.op.kind is OpKind.MOVEMENT and node.op not in (Op.BROADCAST, Op.RESHAPE):
            return None
        if node.op is Op.RESHAPE and not group.is_row(shape):
            return None
        level[node] = max(deps)
    if any(o.type.shape != full and not group.is_row(o.type.shape) for o in outputs):
        return None
    top = max(k for k, _ in stats)
    levels = tuple(tuple(r for k, r in stats if k == at) for at in range(top + 1))
    return RowGroup(prefix, n, levels, frozenset(level))
