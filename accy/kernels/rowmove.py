"""row-movement: flat groups with slices, concats, pads and transposes that keep the last axis,
row by row.

The loop nest gives each work-item one output element and finds its coordinates by dividing
its flat index; a slice or a concat then reads at an address its neighbours' addresses do not
visibly follow (a division and a remainder, a clamp), so a CPU compiler reads them one at a
time. Here the launch is two-dimensional: dimension 0 along the output's last axis, dimension
1 over its rows (the leading axes, divided out of the row number only where there are
several). Every value then reads its inputs at a row's base address plus the last coordinate
plus a constant, and a concat along the last axis reads each piece only where it is the one
selected (a conditional load, where the loop nest clamps the coordinate and loads anyway), so
neighbouring work-items read neighbouring addresses: PoCL packs them into SIMD loads, as it does
for the loop nest's contiguous elementwise kernels.

The values themselves are the loop nest's (:class:`accy.kernels.loopnest.LoopNestBuilder`):
same expressions, same rounding.
"""

from __future__ import annotations

import math

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.walk import Pending
from accy.kernels import exprs
from accy.kernels.flat import flat_leaves
from accy.kernels.ir import (
    INDEX,
    Bin,
    Call,
    Cond,
    Expr,
    Id,
    If,
    Kernel,
    KernelArg,
    Load,
    Return,
    Store,
    add,
    all_of,
    delinearize,
    idx,
    linear,
    mul,
    row_major,
)
from accy.kernels.loopnest import REMAPS, LoopNestBuilder, implemented_ops
from accy.kernels.workgroup import ops_supported, pow2ceil
from accy.plans import FusionGroup, KernelOutline, LaunchGeometry, ScheduleKind, is_inlined
from accy.target import TargetProfile

MIN_ROW = 16
"""On GPUs, shorter last axes stay in the loop nest: a warp along rows that short would be
idle lanes and scattered segments. CPUs take rows from :data:`MIN_ROW_CPU` up: PoCL runs a
work-group's rows one after another, and even rows of 3 gained over the loop nest (a channel
concat of 3x3 images; papers/kernels.md)."""
MIN_ROW_CPU = 2

LOCAL = 256  # work-items of a work-group, as the loop nest's flat launches

MAX_GROUPS = 65535
"""The most work-groups along launch dimensions 1 and 2 (CUDA's grid limits, which NVIDIA's
OpenCL inherits): rows past that many groups go on in dimension 2."""

_MOVES = (Op.SLICE, Op.CONCAT, Op.TRANSPOSE, Op.BROADCAST, Op.RESHAPE)


def keeps_last_axis(node: Node) -> bool:
    """Whether ``node`` reads its operands' last axis at its own last coordinate (plus a
    constant): elementwise ops and broadcasts, slices of step 1 along it, concats, transposes
    and reshapes that leave it in place."""
    op = node.op
    if op.is_elementwise or op in (Op.BROADCAST, Op.CONCAT):
        return True
    if not node.type.shape:
        return False
    if op is Op.SLICE:
        return node.attr("steps")[-1] == 1
    if op is Op.TRANSPOSE:
        perm = node.attr("perm")
        return perm[-1] == len(perm) - 1
    if op is Op.RESHAPE:
        src = node.srcs[0].type.shape
        return bool(src) and src[-1] == node.type.shape[-1]
    return False


def geometry(domain: tuple[int, ...], target: TargetProfile) -> LaunchGeometry:
    """Work-groups of :data:`LOCAL` items (or the target's most): along a row, the power of
    two that pads the row least (the widest of those, down to a warp of 32), the rest over
    rows."""
    last, rows = domain[-1], math.prod(domain[:-1])
    caps = target.work_item_sizes
    cap = min(LOCAL, target.max_work_group_size)
    widest = min(cap, caps[0], pow2ceil(last))
    widths = [widest >> i for i in range(widest.bit_length()) if widest >> i >= min(32, widest)]
    local0 = min(widths, key=lambda w: (-(-last // w) * w, -w))
    local1 = min(max(1, cap // local0), caps[1], pow2ceil(rows))
    groups = -(-rows // local1)
    slabs = -(-groups // MAX_GROUPS)  # rows a slab of dimension 1, slabs along dimension 2
    size = (-(-last // local0) * local0, -(-groups // slabs) * local1)
    if slabs == 1:
        return LaunchGeometry(size, (local0, local1))
    return LaunchGeometry((*size, slabs), (local0, local1, 1))


def accepts(group: FusionGroup, target: TargetProfile) -> bool:
    """Flat groups of elementwise and movement ops whose movement is not the vector-flat
    kind (a slice, a concat, a transpose keeping the last axis), at least :data:`MIN_ROW`
    (CPUs: :data:`MIN_ROW_CPU`) elements a row."""
    if group.kind is not ScheduleKind.flat or not ops_supported(group):
        return False
    domain = group.domain
    if len(domain) < 1 or domain[-1] < (MIN_ROW_CPU if target.device_type == "cpu" else MIN_ROW):
        return False
    if any(o.type.shape != domain for o in group.outputs):
        return False
    if not all(n.op in _MOVES or n.op.is_elementwise for n in group.nodes):
        return False
    if not all(keeps_last_axis(n) for n in group.nodes):
        return False
    inside = set(group.nodes)
    if all(flat_leaves(o, inside) is not None for o in group.outputs):
        return False  # no index arithmetic to save: the loop nest or vector-flat
    geo = geometry(domain, target)
    return (geo.global_size[-1] // geo.local_size[-1] <= MAX_GROUPS
            and not target.launch_excess(geo.global_size, geo.local_size))


class RowBuilder(LoopNestBuilder):
    """The loop nest's values at coordinates (leading coordinates of the row, last
    coordinate), with reshapes that keep the last axis remapping only the leading ones and
    concats along the last axis loading each piece only where it is the one selected."""

    def _open(self, node: Node, coords: tuple[Expr, ...]) -> Expr | Pending:
        if node not in self.inside or node.op not in (Op.RESHAPE, Op.CONCAT):
            return super()._open(node, coords)
        key = (node, coords)
        hit = self.em.lookup(key)
        if hit is not None:
            return hit
        dtype = node.type.dtype
        if node.op is Op.RESHAPE:
            return Pending([(node.srcs[0], self._reshape(node, coords))], self._open,
                           lambda args: self.em.bind(args[0], dtype, key))
        if node.attr("axis") != node.type.rank - 1:
            return super()._open(node, coords)
        return self.em.bind(self._concat_last(node, coords), dtype, key)

    def _reshape(self, node: Node, coords: tuple[Expr, ...]) -> tuple[Expr, ...]:
        lead = node.srcs[0].type.shape[:-1]
        flat = self.em.bind(linear(coords[:-1], row_major(node.type.shape[:-1])), INDEX,
                            prefix="f")
        return tuple(self.em.bind(c, INDEX, prefix="c") for c in delinearize(flat, lead)) + (
            coords[-1],)

    def _unbound(self, node: Node, coords: tuple[Expr, ...]) -> Expr | None:
        """``node``'s element as one load not bound to a variable, when only movement ops
        lie between it and the value it reads (else None)."""
        while node in self.inside:
            if node.op is Op.RESHAPE:
                coords = self._reshape(node, coords)
            elif node.op in REMAPS:
                coords = REMAPS[node.op](self, node, coords)
            else:
                return None
            node = node.srcs[0]
        if is_inlined(node):
            return exprs.const(node.value.reshape(-1)[0].item(), node.type.dtype)
        return Load(self.arg_of[node], linear(coords, row_major(node.type.shape)))

    def _concat_last(self, node: Node, coords: tuple[Expr, ...]) -> Expr:
        """Pieces read where selected: the loop nest's clamped load only for pieces that are
        computed (their loads run whichever piece is selected)."""
        c, lead = coords[-1], coords[:-1]
        pieces: list[tuple[int, Expr]] = []
        offset = 0
        for s in node.srcs:
            n = s.type.shape[-1]
            if n:
                at = Bin("-", c, idx(offset)) if offset else c
                v = self._unbound(s, lead + (at,))
                if v is None:
                    at = self.em.bind(Call("clamp", (at, idx(0), idx(n - 1))), INDEX, prefix="c")
                    v = self.value(s, lead + (at,))
                pieces.append((offset + n, v))
            offset += n
        e = pieces[-1][1]
        for end, v in reversed(pieces[:-1]):
            e = Cond(Bin("<", c, idx(end)), v, e)
        return e

    def build_rows(self, kind: ScheduleKind, geo: LaunchGeometry) -> Kernel:
        domain = self.group.domain
        last, rows = domain[-1], math.prod(domain[:-1])
        c = self.em.bind(Id("global", 0), INDEX, prefix="c")
        row: Expr = Id("global", 1)
        if len(geo.global_size) == 3:  # slabs of rows along dimension 2
            row = add(row, mul(Id("global", 2), idx(geo.global_size[1])))
        row = self.em.bind(row, INDEX, prefix="row")
        out = [Bin(">=", c, idx(last))] if geo.global_size[0] > last else []
        out += [Bin(">=", row, idx(rows))] if math.prod(geo.global_size[1:]) > rows else []
        if out:
            self.em.emit(If(all_of(out, "||"), (Return(),)))
        lead = tuple(self.em.bind(x, INDEX, prefix="c")
                     for x in delinearize(row, domain[:-1]))
        self.coords = lead + (c,)
        self.flat_id = self.em.bind(add(mul(row, idx(last)), c), INDEX, prefix="at")
        outs = []
        for i, (n, slot) in enumerate(zip(self.group.outputs, self.outline.output_slots,
                                          strict=True)):
            outs.append(KernelArg(f"out{i}", n.type.dtype, True, slot))
            self.em.emit(Store(f"out{i}", self.flat_id, self.value(n, self.coords)))
        return Kernel(self.outline.entry, self.outline.work_item, kind, domain,
                      tuple(self.args + outs), tuple(self.em.scopes[0].body), geo,
                      implemented_ops(self.group))


def build(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
          target: TargetProfile) -> tuple[Kernel, ...]:
    geo = geometry(group.domain, target)
    return (RowBuilder(group, outline).build_rows(kind, geo),)


def _register() -> None:
    from accy.kernels.generators import Generator, register_generator

    register_generator(Generator(
        "row-movement",
        "flat groups with slices, pads, concats or transposes that keep the last axis: a 2-D "
        "launch (last axis, rows), contiguous reads, concat pieces read only where selected",
        accepts, build))


_register()
