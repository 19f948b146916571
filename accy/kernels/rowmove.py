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

UNROLL_BYTES = 16
"""Bytes of output a GPU work-item writes (:func:`unroll_of`): four f32 or eight f16
elements, each load issued before the stores."""
MIN_ITEMS_PER_UNIT = 2048  # work-items a compute unit holds at once (NVIDIA: 2048 a multiprocessor)

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


def geometry(domain: tuple[int, ...], target: TargetProfile,
             unroll: tuple[int, int] = (1, 1)) -> LaunchGeometry:
    """Work-groups of :data:`LOCAL` items (or the target's most): along a row, the power of
    two that pads the row least (the widest of those, down to a warp of 32), the rest over
    rows; each work-item takes ``unroll`` elements (along the row, over rows) a work-group
    apart (:func:`unroll_of`)."""
    last, rows = domain[-1], math.prod(domain[:-1])
    caps = target.work_item_sizes
    cap = min(LOCAL, target.max_work_group_size)
    widest = min(cap, caps[0], pow2ceil(last))
    widths = [widest >> i for i in range(widest.bit_length()) if widest >> i >= min(32, widest)]
    local0 = min(widths, key=lambda w: (-(-last // w) * w, -w))
    local1 = min(max(1, cap // local0), caps[1], pow2ceil(rows))
    u0, u1 = unroll
    groups = -(-rows // (local1 * u1))
    slabs = -(-groups // MAX_GROUPS)  # rows a slab of dimension 1, slabs along dimension 2
    size = (-(-last // (local0 * u0)) * local0, -(-groups // slabs) * local1)
    if slabs == 1:
        return LaunchGeometry(size, (local0, local1))
    return LaunchGeometry((*size, slabs), (local0, local1, 1))


def unroll_of(group: FusionGroup, target: TargetProfile) -> tuple[int, int]:
    """Elements a work-item takes on a GPU (along the row, over rows): :data:`UNROLL_BYTES`
    of its smallest output (one f16 element a work-item keeps too few bytes in flight to
    reach the memory's bandwidth), fewer while the launch would hold under
    :data:`MIN_ITEMS_PER_UNIT` work-items a compute unit; split between the row and the rows
    so that the launch, whose elements past the ends repeat the last one, covers the least.
    CPUs: one (PoCL packs neighbouring work-items into SIMD lanes)."""
    if target.device_type == "cpu":
        return 1, 1
    domain = group.domain
    last, rows = domain[-1], math.prod(domain[:-1])
    base = geometry(domain, target)
    local0, local1 = base.local_size[:2]
    want = max(1, UNROLL_BYTES // min(o.type.dtype.itemsize for o in group.outputs))
    while want > 1 and last * rows < want * MIN_ITEMS_PER_UNIT * target.compute_units:
        want //= 2
    choices = [(u0, min(want // u0, -(-rows // local1)))
               for u0 in (want >> i for i in range(want.bit_length()))]

    def cost(u: tuple[int, int]) -> tuple[int, int, int]:  # the most in flight, least padding
        padded = (-(-last // (local0 * u[0])) * local0 * u[0]
                  * -(-rows // (local1 * u[1])) * local1 * u[1])
        return -u[0] * u[1], padded, -u[0]

    return min(choices, key=cost)


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
    geo = geometry(domain, target, unroll_of(group, target))
    return (geo.global_size[-1] // geo.local_size[-1] <= MAX_GROUPS
            and not target.launch_excess(geo.global_size, geo.local_size))


class RowBuilder(LoopNestBuilder):
    """The loop nest's values at coordinates (leading coordinates of the row, last
    coordinate), with reshapes that keep the last axis remapping only the leading ones and
    concats along the last axis loading each piece only where it is the one selected."""

    row: Expr = idx(0)  # the row being built, and its leading coordinates
    lead: tuple[Expr, ...] = ()

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
        return Load(self.arg_of[node], self.address(coords, node.type.shape))

    def address(self, coords: tuple[Expr, ...], shape: tuple[int, ...]) -> Expr:
        """A tensor of the domain's leading axes read at the row's own leading coordinates:
        the row number times its row length plus the last coordinate, without the divisions
        that found those coordinates (left unused, unbound)."""
        if shape and coords[:-1] == self.lead and shape[:-1] == self.group.domain[:-1]:
            return add(mul(self.row, idx(shape[-1])), coords[-1])
        return super().address(coords, shape)

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

    def build_rows(self, kind: ScheduleKind, geo: LaunchGeometry,
                   unroll: tuple[int, int] = (1, 1)) -> Kernel:
        """One element a work-item at (global 0, global 1 [+ rows of earlier slabs]), or with
        ``unroll`` (u0, u1) u0 x u1 elements a work-group's width and height apart, those past
        the domain's end clamped to its last element (written again with the same value)."""
        domain = self.group.domain
        last, rows = domain[-1], math.prod(domain[:-1])
        (local0, local1), (u0, u1) = geo.local_size[:2], unroll
        if u0 == 1:
            c: Expr = Id("global", 0)
        else:
            c = add(mul(Id("group", 0), idx(local0 * u0)), Id("local", 0))
        c = self.em.bind(c, INDEX, prefix="c")
        slab = geo.global_size[1] if len(geo.global_size) == 3 else 0  # rows along dimension 2
        if u1 == 1:
            row: Expr = Id("global", 1)
            if slab:
                row = add(row, mul(Id("global", 2), idx(slab)))
        else:
            grp: Expr = Id("group", 1)
            if slab:
                grp = add(grp, mul(Id("group", 2), idx(slab // local1)))
            row = add(mul(grp, idx(local1 * u1)), Id("local", 1))
        row = self.em.bind(row, INDEX, prefix="row")
        out = [Bin(">=", c, idx(last))] if geo.global_size[0] * u0 > last else []
        out += [Bin(">=", row, idx(rows))] if math.prod(geo.global_size[1:]) * u1 > rows else []
        if out:
            self.em.emit(If(all_of(out, "||"), (Return(),)))

        def steps(first: Expr, n: int, apart: int, end: int, span: int) -> list[Expr]:
            clamp = overhangs(span, n, end)
            return [first] + [self.em.bind(
                Call("min", (add(first, idx(j * apart)), idx(end - 1))) if clamp
                else add(first, idx(j * apart)), INDEX, prefix="c") for j in range(1, n)]

        cs = steps(c, u0, local0, last, geo.global_size[0])
        rs = steps(row, u1, local1, rows, math.prod(geo.global_size[1:]))
        stores = []
        for r in rs:
            self.row, self.lead = r, delinearize(r, domain[:-1])
            for cj in cs:
                self.coords = self.lead + (cj,)
                self.flat_id = self.em.bind(add(mul(r, idx(last)), cj), INDEX, prefix="at")
                stores += [Store(f"out{i}", self.flat_id, self.value(n, self.coords))
                           for i, n in enumerate(self.group.outputs)]
        for s in stores:  # every element's loads before the first store
            self.em.emit(s)
        outs = [KernelArg(f"out{i}", n.type.dtype, True, slot) for i, (n, slot) in enumerate(
            zip(self.group.outputs, self.outline.output_slots, strict=True))]
        return Kernel(self.outline.entry, self.outline.work_item, kind, domain,
                      tuple(self.args + outs), tuple(self.em.scopes[0].body), geo,
                      implemented_ops(self.group))


def overhangs(span: int, n: int, end: int) -> bool:
    """Whether ``span`` work-items of ``n`` elements each reach past ``end``: ``build_rows``
    then clamps the elements past it to the last one (computed and written again)."""
    return n > 1 and span * n > end


def clamps(domain: tuple[int, ...], geo: LaunchGeometry, unroll: tuple[int, int]) -> bool:
    """Whether ``build_rows`` clamps some unrolled elements, along the row or over rows."""
    return (overhangs(geo.global_size[0], unroll[0], domain[-1])
            or overhangs(math.prod(geo.global_size[1:]), unroll[1], math.prod(domain[:-1])))


def build(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
          target: TargetProfile) -> tuple[Kernel, ...]:
    unroll = unroll_of(group, target)
    geo = geometry(group.domain, target, unroll)
    if set(outline.input_slots) & set(outline.output_slots) and clamps(group.domain, geo,
                                                                       unroll):
        # an output written in place over an input: a clamped element, computed again by
        # another work-item, would read what its own work-item may have overwritten already
        unroll = (1, 1)
        geo = geometry(group.domain, target, unroll)
    return (RowBuilder(group, outline).build_rows(kind, geo, unroll),)


def _register() -> None:
    from accy.kernels.generators import Generator, register_generator

    register_generator(Generator(
        "row-movement",
        "flat groups with slices, pads, concats or transposes that keep the last axis: a 2-D "
        "launch (last axis, rows), contiguous reads, concat pieces read only where selected",
        accepts, build))


_register()
