"""direct-conv: a ``conv2d`` (kept whole by ``conv-lowering{method=direct}``) and its
elementwise epilogue as two kernels, with no im2col copy.

1. ``<entry>_windows`` copies the input, zero-padded, into scratch memory split into the
   ``stride_h x stride_w`` phases of the stride (``xs[n, c, a, b, r, q] = x[n, c, r*sh + a -
   top, q*sw + b - left]``, zero outside ``x``), each phase ``hq x wq`` with ``hq = OH +
   (KH-1)*dh // sh`` and ``wq = OW + (KW-1)*dw // sw``. Every tap ``(i, j)`` of the kernel then
   reads, for output pixel ``(oh, ow)``, the element at ``p + offset(i, j)`` of one phase,
   where ``p = oh * wq + ow`` is the pixel's place in a *virtual* output of rows ``wq`` wide:
   consecutive pixels read consecutive elements for every stride, padding and dilation, so
   they load as vectors and no load needs a bounds check. Columns ``ow >= OW`` of the virtual
   output are computed and never stored. Max pools pad with ``-inf`` instead of zeros. A
   stride-1 convolution without padding is its own copy: it reads the input in place
   (``ConvTiles.in_place``; the last pixel tile then ends at the input's end) and is one kernel.
2. ``<entry>`` computes a tile of ``tm`` output channels (of one group) times ``sn`` runs of
   ``lanes`` virtual pixels per work-item, ``wg`` work-items per work-group side by side along
   the pixels: per input channel of the group and tap, ``sn`` loads of pixels, ``tm`` loads of
   weights (the same for the whole work-group) and ``tm * sn`` fused multiply-adds into
   register accumulators (pools: one channel, max or add, an average divided by its window
   count). Kernels of more than ``UNROLLED_TAPS`` taps loop over their rows, the others are
   unrolled. The epilogue (bias, activation, residual, ...) is applied per element before the
   store; a run of pixels within one output row is stored as a vector, others lane by lane.

Grouped convolutions are tiles of one group each (the group is a batch index). Tile shapes
come from the target (:func:`choose_tiles`): CPUs get one work-item per work-group with
``tm x sn`` vector accumulators as wide as the device prefers (24 of them with AVX-512's 32
registers, else 12), the loads of a tap then being ``sn`` unaligned vector loads; GPUs get
scalar pixels, ``wg`` work-items of a work-group on consecutive pixels (coalesced loads, one
broadcast weight load per work-group) and ``sn`` pixels per work-item ``wg`` apart: 8 x 8
outputs per work-item where the layer is large enough to fill the device twice over, smaller
tiles where it is not. No local memory: the weights a work-group reads are the same address
for all its work-items, and the input rows a tap reads are the next tap's too (L1). Not yet
measured on a GPU.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.types import DType
from accy.kernels import exprs, loopnest
from accy.kernels.generators import Generator, register_generator
from accy.kernels.ir import (
    INDEX,
    Assign,
    Bin,
    Call,
    Cast,
    Cond,
    Expr,
    For,
    Id,
    If,
    Kernel,
    KernelArg,
    Lane,
    Let,
    Lit,
    Load,
    Return,
    Splat,
    Stmt,
    Store,
    Var,
    VectorLoadAt,
    VectorStoreAt,
    add,
    div,
    idx,
    mod,
    mul,
)
from accy.plans import FusionGroup, KernelOutline, LaunchGeometry, ScheduleKind, is_inlined
from accy.target import TargetProfile

FLOATS = (DType.f32, DType.f64)
UNROLLED_TAPS = 49  # kernels of up to 7 x 7 taps are unrolled whole; longer ones loop by row


@dataclass(frozen=True)
class ConvShape:
    """The sizes of a ``conv2d`` and of its phase-split, padded input copy."""

    n: int
    c: int
    h: int
    w: int
    o: int
    groups: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    top: int
    left: int
    oh: int
    ow: int
    align: int = 1  # virtual rows a multiple of this many pixels (ConvTiles.aligned)

    @classmethod
    def of(cls, node: Node) -> ConvShape:
        """The sizes of a conv2d, or of a pool as a depthwise window (one group a channel)."""
        n, c, h, wd = node.srcs[0].type.shape
        if node.op is Op.CONV2D:
            o, _, kh, kw = node.srcs[1].type.shape
            groups, (dh, dw) = node.attr("groups"), node.attr("dilations")
        else:
            (kh, kw), o, groups, dh, dw = node.attr("kernel"), c, c, 1, 1
        sh, sw = node.attr("strides")
        top, left = node.attr("pads")[:2]
        oh, ow = node.type.shape[2:]
        return cls(n, c, h, wd, o, groups, kh, kw, sh, sw, dh, dw, top, left, oh, ow)

    @property
    def cg(self) -> int:
        return self.c // self.groups

    @property
    def og(self) -> int:
        return self.o // self.groups

    @property
    def hq(self) -> int:
        return self.oh + (self.kh - 1) * self.dh // self.sh

    @property
    def wq(self) -> int:
        w = self.ow + (self.kw - 1) * self.dw // self.sw
        return -(-w // self.align) * self.align

    @property
    def block(self) -> int:
        """Elements of one input channel's copy (every phase)."""
        return self.sh * self.sw * self.hq * self.wq

    @property
    def pixels(self) -> int:
        """Pixels of the virtual output (``oh x wq``)."""
        return self.oh * self.wq

    @property
    def copy_free(self) -> bool:
        """Stride 1, no padding: the input is its own copy (one phase, ``hq x wq == h x w``)."""
        return (self.sh == self.sw == 1 and self.top == self.left == 0 and self.align == 1
                and (self.hq, self.wq) == (self.h, self.w))

    def tap(self, i: int, j: int) -> int:
        """Where tap ``(i, j)`` reads, relative to the pixel, in a channel's copy."""
        a, b = i * self.dh % self.sh, j * self.dw % self.sw
        return ((a * self.sw + b) * self.hq + i * self.dh // self.sh) * self.wq + (
            j * self.dw // self.sw)


@dataclass(frozen=True)
class ConvTiles:
    """``tm`` output channels times ``sn`` runs of ``lanes`` pixels per work-item; ``wg``
    work-items per work-group, side by side along the pixels."""

    tm: int
    sn: int
    lanes: int
    wg: int
    # virtual rows padded to a multiple of ``lanes``: no run crosses a row, the last of a
    # row stores its first ``OW % lanes`` lanes (cheap taps: pools, depthwise)
    aligned: bool = False
    # read the input in place, no windows copy (ConvShape.copy_free); the last pixel tile
    # then starts span before the end instead of running past it
    in_place: bool = False

    @property
    def span(self) -> int:
        """Virtual pixels one work-group covers."""
        return self.sn * self.lanes * self.wg


def _divisor_at_most(n: int, cap: int) -> int:
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def choose_tiles(s: ConvShape, dtype: DType, target: TargetProfile) -> ConvTiles:
    """Tile sizes for ``s`` on ``target`` (its device type, vector width and limits)."""
    if target.device_type == "cpu":
        lanes = min(16, 1 << max(0, (target.native_vector_bytes // dtype.itemsize).bit_length()
                                 - 1))
        budget = 24 if target.native_vector_bytes >= 64 else 12
        tm = _divisor_at_most(s.og, 8 if budget == 24 else 4)
        if s.copy_free and s.pixels >= lanes:  # no copy; no tile longer than the input
            vectors = -(-s.pixels // lanes)
            tiles = -(-vectors // (budget // tm))
            sn = min(-(-vectors // tiles), s.pixels // lanes)
            return ConvTiles(tm, sn, lanes, 1, False, True)
        # a pool or depthwise: rows aligned to the runs (runs of one pixel need no aligning:
        # with them every aligned row's last run was taken as a partial one of 0 lanes, so a
        # device reporting 4-byte vectors got nothing stored there)
        cheap = tm == 1 and s.cg == 1 and lanes > 1
        if cheap and 16 <= s.ow < 2 * lanes:
            lanes //= 2  # rows of 16 to 2 x lanes pixels: half the alignment padding
        pixels = dataclasses.replace(s, align=lanes).pixels if cheap else s.pixels
        vectors = -(-pixels // lanes)
        tiles = -(-vectors // (budget // tm))
        return ConvTiles(tm, -(-vectors // tiles), lanes, 1, cheap)  # tiles of equal length
    # GPUs: 8 x 8 outputs per work-item (8 pixel and 8 weight loads per 64 multiply-adds),
    # 128 work-items side by side; smaller where that leaves fewer than two work-groups per
    # compute unit (pixel runs first, then work-groups, then channels)
    tm = _divisor_at_most(s.og, 8)
    wg = min(128, target.max_work_group_size, 1 << max(0, (s.pixels - 1).bit_length()))
    sn = max(1, min(8, -(-s.pixels // wg)))

    def groups(tm: int, sn: int, wg: int) -> int:
        return s.n * s.groups * (s.og // tm) * -(-s.pixels // (sn * wg))

    need = 2 * target.compute_units
    while groups(tm, sn, wg) < need and sn > 1:
        sn //= 2
    while groups(tm, sn, wg) < need and wg > 32:
        wg //= 2
    while groups(tm, sn, wg) < need and tm > 1:
        tm = _divisor_at_most(s.og, tm - 1)
    return ConvTiles(tm, sn, 1, wg, in_place=s.copy_free and sn * wg <= s.pixels)


WINDOWED = (Op.CONV2D, Op.MAX_POOL2D, Op.AVG_POOL2D)


def analyse(group: FusionGroup) -> Node | str:
    """The conv2d or pool of a group this generator takes, or why it declines the group."""
    if group.kind is not ScheduleKind.contraction:
        return f"a {group.kind.value} group"
    convs = [n for n in group.nodes if n.op in WINDOWED]
    if len(convs) != 1:
        return f"{len(convs)} conv2d or pool ops in one group"
    (conv,) = convs
    if conv.type.dtype not in FLOATS:
        return f"dtype {conv.type.dtype.value}"
    inside = set(group.nodes)
    if any(s in inside or is_inlined(s) for s in conv.srcs):
        return "an operand is not read from a buffer"
    after = {conv}
    for n in group.nodes:
        if n is conv or not any(s in after for s in n.srcs):
            continue
        if not n.op.is_elementwise or n.type.shape != conv.type.shape:
            return f"{n.op.value} after the {conv.op.value} is not elementwise at its shape"
        after.add(n)
    if any(o not in after for o in group.outputs):
        return f"an output is not an elementwise function of the {conv.op.value}"
    return conv


class _Builder:
    def __init__(self, group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
                 conv: Node, tiles: ConvTiles) -> None:
        self.group, self.outline, self.kind, self.t = group, outline, kind, tiles
        self.s = dataclasses.replace(ConvShape.of(conv), align=tiles.lanes if tiles.aligned
                                     else 1)
        self.dtype = conv.type.dtype
        self.epi = loopnest.EpilogueBuilder(group, outline, conv)
        self.op = conv.op
        self.x_arg = self.epi.arg_of[conv.srcs[0]]
        self.w_arg = self.epi.arg_of[conv.srcs[1]] if conv.op is Op.CONV2D else ""
        # what a tap outside the input reads: nothing a max picks, nothing a sum adds
        self.fill = -math.inf if conv.op is Op.MAX_POOL2D else 0.0
        s, t = self.s, tiles
        self.tiles_p = -(-s.pixels // t.span)
        self.src = self.x_arg if t.in_place else "scratch0"
        # the last tile's lanes past the virtual output read (never stored) past the last
        # channel's copy: the scratch is that much longer (zero-filled, never written)
        reach = max(s.tap(i, j) for i in range(s.kh) for j in range(s.kw))
        slack = max(0, self.tiles_p * t.span + reach - s.block)
        self.scratch_elems = s.n * s.c * s.block + slack

    def scratch(self, written: bool) -> KernelArg:
        return KernelArg("scratch0", self.dtype, written, -1, self.scratch_elems)

    def zero(self, lanes: int, value: float = 0.0) -> Expr:
        z = Lit(value, self.dtype)
        return z if lanes == 1 else Splat(self.dtype, lanes, z)

    # kernel 1: the padded, phase-split copy -----------------------------------------------
    def windows(self) -> Kernel:
        """The padded, phase-split copy. GPUs: one element per work-item. CPUs: one padded
        input row per work-item (row ``r * sh + a`` of phase row ``a``), read once along it
        and written to the ``sw`` column phases in one pass."""
        s = self.s
        per_element = self.t.lanes == 1
        rows = s.n * s.c * s.sh * s.hq  # (nc, r, a): padded input rows
        count = rows * s.sw * s.wq if per_element else rows
        local = 64
        body: list[Stmt] = [Let("gid", INDEX, Id("global", 0))]
        gid = Var("gid")
        if count % local:
            body.append(If(Bin(">=", gid, idx(count)), (Return(),)))
        if per_element:  # gid = ((nc, a, b, r), q): the scratch's own order
            body += [Let("q", INDEX, mod(gid, s.wq)), Let("r", INDEX, mod(div(gid, s.wq), s.hq)),
                     Let("b", INDEX, mod(div(gid, s.wq * s.hq), s.sw)),
                     Let("a", INDEX, mod(div(gid, s.wq * s.hq * s.sw), s.sh)),
                     Let("nc", INDEX, div(gid, s.wq * s.hq * s.sw * s.sh))]
        else:  # gid = (nc, r, a)
            body += [Let("a", INDEX, mod(gid, s.sh)), Let("r", INDEX, mod(div(gid, s.sh), s.hq)),
                     Let("nc", INDEX, div(gid, s.sh * s.hq))]
        nc, a, r, q = Var("nc"), Var("a"), Var("r"), Var("q")
        body.append(Let("ih", INDEX, Bin("-", add(mul(r, idx(s.sh)), a), idx(s.top))))
        ih = Var("ih")
        row_ok = Bin("&&", Bin(">=", ih, idx(0)), Bin("<", ih, idx(s.h)))
        body.append(Let("src", INDEX, mul(add(mul(nc, idx(s.h)), Call(
            "clamp", (ih, idx(0), idx(s.h - 1)))), idx(s.w))))
        # scratch row (nc, a, b, r) starts at dst + b * hq * wq
        body.append(Let("dst", INDEX, mul(add(mul(add(mul(nc, idx(s.sh)), a), idx(s.sw * s.hq)),
                                              r), idx(s.wq))))

        def element(b: Expr, tag: str) -> list[Stmt]:
            iw = Var(f"iw{tag}")
            ok = Bin("&&", row_ok, Bin("&&", Bin(">=", iw, idx(0)), Bin("<", iw, idx(s.w))))
            value = Cond(ok, Load(self.x_arg, add(Var("src"), Call(
                "clamp", (iw, idx(0), idx(s.w - 1))))), self.zero(1, self.fill))
            return [Let(f"iw{tag}", INDEX, Bin("-", add(mul(q, idx(s.sw)), b), idx(s.left))),
                    Store("scratch0", add(add(Var("dst"), mul(b, idx(s.hq * s.wq))), q), value)]

        if per_element:
            body += element(Var("b"), "")
        else:
            # columns whose reads are inside the row for every column phase: a plain copy
            lo = min(s.wq, -(-s.left // s.sw))
            hi = max(lo, min(s.wq, (s.w + s.left - s.sw) // s.sw + 1))
            guarded = tuple(st for b in range(s.sw) for st in element(idx(b), str(b)))
            plain = tuple(Store("scratch0", add(add(Var("dst"), idx(b * s.hq * s.wq)), q),
                                Load(self.x_arg, add(Var("src"), Bin("-", add(
                                    mul(q, idx(s.sw)), idx(b)), idx(s.left)))))
                          for b in range(s.sw))
            interior = For("q", idx(lo), idx(hi), plain)
            body += [For("q", idx(0), idx(lo), guarded),
                     If(row_ok, (interior,), (For("q", idx(lo), idx(hi), guarded),)),
                     For("q", idx(hi), idx(s.wq), guarded)]
        x_in = next(a for a in self.epi.args if a.name == self.x_arg)
        return Kernel(f"{self.outline.entry}_windows", self.outline.work_item, self.kind,
                      self.group.domain, (x_in, self.scratch(True)), tuple(body),
                      LaunchGeometry((-(-count // local) * local,), (local,)),
                      loopnest.implemented_ops(self.group))

    # kernel 2: the convolution ------------------------------------------------------------
    def conv(self) -> Kernel:
        s, t, dt = self.s, self.t, self.dtype
        body: list[Stmt] = []

        def let(name: str, e: Expr) -> Var:
            body.append(Let(name, INDEX, e))
            return Var(name)

        ct = s.og // t.tm
        grp = let("grp", Id("group", 0))
        lid = let("lid", Id("local", 0)) if t.wg > 1 else idx(0)
        pt = let("pt", mod(grp, self.tiles_p))
        ot = let("ot", mod(div(grp, self.tiles_p), ct))
        g = let("g", mod(div(grp, self.tiles_p * ct), s.groups))
        n = let("n", div(grp, self.tiles_p * ct * s.groups))
        if t.in_place and s.pixels % t.span:  # the last tile ends at the input's end
            start = let("pstart", mul(pt, idx(t.span)))
            self.start: Expr | None = start
            tile0 = let("tile0", Call("min", (start, idx(s.pixels - t.span))))
        else:
            self.start, tile0 = None, mul(pt, idx(t.span))
        p0 = let("p0", add(tile0, mul(lid, idx(t.lanes))))
        o0 = let("o0", add(mul(g, idx(s.og)), mul(ot, idx(t.tm))))
        taps = s.kh * s.kw
        xb = let("xb", add(mul(add(mul(n, idx(s.c)), mul(g, idx(s.cg))), idx(s.block)), p0))
        wb = let("wb", mul(o0, idx(s.cg * taps)))
        acc = [[f"acc_{r}_{v}" for v in range(t.sn)] for r in range(t.tm)]
        for r in range(t.tm):
            for v in range(t.sn):
                body.append(Let(acc[r][v], dt, self.zero(t.lanes, self.fill), True, t.lanes))
        inner: list[Stmt] = [Let("xc", INDEX, add(xb, mul(Var("c"), idx(s.block)))),
                             Let("wc", INDEX, add(wb, mul(Var("c"), idx(taps))))]
        step = t.lanes * t.wg

        def taps_of_row(i: Expr, row: Expr, tag: str) -> list[Stmt]:
            """Kernel row ``i``'s taps; ``row`` is where its first tap reads (from ``xc``);
            ``tag`` keeps the names of unrolled rows apart."""
            out: list[Stmt] = []
            for j in range(s.kw):
                jo = j * s.dw % s.sw * s.hq * s.wq + j * s.dw // s.sw  # column phase, offset
                for v in range(t.sn):
                    at = add(add(Var("xc"), row), idx(jo + v * step))
                    if t.in_place and t.lanes == 1:
                        # pixels past the output's rows (computed, never stored) read past the
                        # input's end in the last channel: read its last element instead
                        at = Call("min", (at, idx(s.n * s.c * s.h * s.w - 1)))
                    load = (Load(self.src, at) if t.lanes == 1
                            else VectorLoadAt(self.src, at, t.lanes))
                    out.append(Let(f"b{tag}{j}_{v}", dt, load, lanes=t.lanes))
                if self.op is not Op.CONV2D:  # a pool: one channel, max or sum of the taps
                    combine = Op.MAX if self.op is Op.MAX_POOL2D else Op.ADD
                    out += [Assign(acc[0][v], exprs.elementwise(
                        combine, [Var(acc[0][v]), Var(f"b{tag}{j}_{v}")], dt, dt))
                        for v in range(t.sn)]
                    continue
                k = add(mul(i, idx(s.kw)), idx(j))
                for r in range(t.tm):
                    a: Expr = Load(self.w_arg, add(Var("wc"), add(idx(r * s.cg * taps), k)))
                    out.append(Let(f"a{tag}{j}_{r}", dt, a))
                    av: Expr = Var(f"a{tag}{j}_{r}")
                    if t.lanes > 1:
                        av = Splat(dt, t.lanes, av)
                    out += [Assign(acc[r][v], Call("fma", (av, Var(f"b{tag}{j}_{v}"),
                                                          Var(acc[r][v])))) for v in range(t.sn)]
            return out

        if taps <= UNROLLED_TAPS:  # every tap unrolled
            for i in range(s.kh):
                inner += taps_of_row(idx(i), idx(s.tap(i, 0)), f"{i}_")
        else:  # long kernels: a loop over the kernel's rows (compile time), columns unrolled
            row = Bin("*", add(mul(Bin("%", mul(Var("i"), idx(s.dh)), idx(s.sh)),
                                   idx(s.sw * s.hq)), Bin("/", mul(Var("i"), idx(s.dh)),
                                                          idx(s.sh))), idx(s.wq))
            inner.append(For("i", idx(0), idx(s.kh), (Let("io", INDEX, row),
                                                      *taps_of_row(Var("i"), Var("io"), ""))))
        body.append(For("c", idx(0), idx(s.cg), tuple(inner)))
        out_args = [KernelArg(f"out{i}", o.type.dtype, True, slot) for i, (o, slot) in
                    enumerate(zip(self.group.outputs, self.outline.output_slots, strict=True))]
        body += self.stores(acc, n, o0, p0, step, out_args)
        groups = s.n * s.groups * ct * self.tiles_p
        scratch = () if t.in_place else (self.scratch(False),)
        args = (*self.epi.args, *scratch, *out_args)
        return Kernel(self.outline.entry, self.outline.work_item, self.kind, self.group.domain,
                      args, tuple(body), LaunchGeometry((groups * t.wg,), (t.wg,)),
                      loopnest.implemented_ops(self.group), fixed_local_size=True)

    def stores(self, acc: list[list[str]], n: Expr, o0: Expr, p0: Expr, step: int,
               out_args: list[KernelArg]) -> list[Stmt]:
        """Epilogue and stores: a run of pixels within one output row as vectors (no per-lane
        index arithmetic); otherwise (:meth:`partial`) lane by lane."""
        s, t = self.s, self.t
        out: list[Stmt] = []
        self.counter = 0
        for v in range(t.sn):
            first = Var(f"px{v}")
            oh, ow = Var(f"oh{v}"), Var(f"ow{v}")
            out += [Let(first.name, INDEX, add(p0, idx(v * step))),
                    Let(oh.name, INDEX, div(first, s.wq)), Let(ow.name, INDEX, mod(first, s.wq))]
            if t.lanes == 1 or t.lanes > s.ow:  # no whole run of lanes fits an output row
                out += self.partial(acc, v, n, o0, first, oh, ow, out_args)
                continue
            row = [(oh, add(ow, idx(lane))) for lane in range(t.lanes)]
            vector: list[Stmt] = []
            for r in range(t.tm):
                values, body = self.lane_values(acc[r][v], n, add(o0, idx(r)), row)
                at = add(mul(add(mul(n, idx(s.o)), add(o0, idx(r))), idx(s.oh * s.ow)),
                         add(mul(oh, idx(s.ow)), ow))
                vector += body + [VectorStoreAt(a.name, at, a.dtype, tuple(vals))
                                  for a, vals in zip(out_args, values, strict=True)]
            whole = Bin("&&", Bin("<=", add(ow, idx(t.lanes)), idx(s.ow)),
                        Bin("<", oh, idx(s.oh)))
            if self.start is not None:  # not the previous tile's pixels (stored there)
                whole = Bin("&&", whole, Bin(">=", first, self.start))
            out.append(If(whole, tuple(vector),
                          tuple(self.partial(acc, v, n, o0, first, oh, ow, out_args))))
        return out

    def partial(self, acc: list[list[str]], v: int, n: Expr, o0: Expr, first: Var, oh: Var,
                ow: Var, out_args: list[KernelArg]) -> list[Stmt]:
        """Stores of run ``v`` lane by lane. Aligned rows: the run is the last of its row,
        whose first ``OW % lanes`` lanes are stored, or lies past the output. Otherwise each
        lane's row and column come from its pixel and each store is guarded."""
        s, t = self.s, self.t
        out: list[Stmt] = []
        if t.aligned:
            part = [(oh, add(ow, idx(lane))) for lane in range(s.ow % t.lanes)]
            for r in range(t.tm):
                values, body = self.lane_values(acc[r][v], n, add(o0, idx(r)), part)
                base = mul(add(mul(n, idx(s.o)), add(o0, idx(r))), idx(s.oh * s.ow))
                out += body + [Store(a.name, add(base, add(mul(oh, idx(s.ow)), lw)), vals[lane])
                               for lane, (_, lw) in enumerate(part)
                               for a, vals in zip(out_args, values, strict=True)]
            some = self.inside(oh, ow)
            return [If(some, tuple(out))] if out else []
        pos = [(oh, ow)]
        if t.lanes > 1:
            pos = [(Var(f"oh{v}_{lane}"), Var(f"ow{v}_{lane}")) for lane in range(t.lanes)]
            for lane, (lh, lw) in enumerate(pos):
                col = add(ow, idx(lane))
                if s.wq >= t.lanes:  # the run crosses at most one row end
                    same = Bin("<", col, idx(s.wq))
                    out += [Let(lh.name, INDEX, Cond(same, oh, add(oh, idx(1)))),
                            Let(lw.name, INDEX, Cond(same, col, Bin("-", col, idx(s.wq))))]
                else:
                    out += [Let(lh.name, INDEX, div(add(first, idx(lane)), s.wq)),
                            Let(lw.name, INDEX, mod(add(first, idx(lane)), s.wq))]
        for r in range(t.tm):
            values, body = self.lane_values(acc[r][v], n, add(o0, idx(r)), pos)
            out += body
            base = mul(add(mul(n, idx(s.o)), add(o0, idx(r))), idx(s.oh * s.ow))
            for lane, (lh, lw) in enumerate(pos):
                at = add(base, add(mul(lh, idx(s.ow)), lw))
                ok = self.inside(lh, lw)
                if self.start is not None:
                    ok = Bin("&&", ok, Bin(">=", add(first, idx(lane)), self.start))
                out.append(If(ok, tuple(Store(a.name, at, vals[lane]) for a, vals in
                                        zip(out_args, values, strict=True))))
        return out

    def inside(self, oh: Expr, ow: Expr) -> Expr:
        """Whether pixel (``oh``, ``ow``) of the virtual output (``ow`` below ``wq``) is one of
        the output's: a column check only where the virtual rows are wider."""
        row = Bin("<", oh, idx(self.s.oh))
        return Bin("&&", Bin("<", ow, idx(self.s.ow)), row) if self.s.wq > self.s.ow else row

    def lane_values(self, accumulator: str, n: Expr, o: Expr, pos: list[tuple[Expr, Expr]]
                    ) -> tuple[list[list[Expr]], list[Stmt]]:
        """Each output's value at each lane of one accumulator (at output rows and columns
        ``pos``, clamped into the output for the epilogue's loads), and the statements
        computing them."""
        s, t = self.s, self.t
        plain = all(o is self.epi.given for o in self.group.outputs)
        em = loopnest.Emitter()
        em.counter = self.counter
        self.epi.em = em
        values: list[list[Expr]] = [[] for _ in self.group.outputs]
        for lane, (oh, ow) in enumerate(pos):
            total = Var(accumulator) if t.lanes == 1 else Lane(Var(accumulator), lane)
            self.epi.result = self.finish(total, oh, ow)
            coords = () if plain else (n, o, Call("min", (oh, idx(s.oh - 1))),
                                       Call("min", (ow, idx(s.ow - 1))))
            for k, node in enumerate(self.group.outputs):
                values[k].append(self.epi.value(node, coords))
        self.counter = em.counter
        return values, list(em.scopes[0].body)

    def finish(self, total: Expr, oh: Expr, ow: Expr) -> Expr:
        """The op's value from its accumulated lane: an average pool divides by the window
        size, or by how many input elements the window covers (``count_include_pad``
        false)."""
        if self.op is not Op.AVG_POOL2D:
            return total
        s = self.s
        if self.epi.given.attr("count_include_pad"):
            return Bin("/", total, exprs.const(s.kh * s.kw, self.dtype))
        covered = []
        for at, stride, before, k, extent in ((oh, s.sh, s.top, s.kh, s.h),
                                              (ow, s.sw, s.left, s.kw, s.w)):
            lo = Bin("-", mul(at, idx(stride)), idx(before))
            covered.append(Bin("-", Call("min", (add(lo, idx(k)), idx(extent))),
                               Call("max", (lo, idx(0)))))
        count = Call("max", (mul(covered[0], covered[1]), idx(1)))  # lanes past the output
        return Bin("/", total, Cast(self.dtype, count))


def build(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
          target: TargetProfile, tiles: ConvTiles | None = None) -> tuple[Kernel, ...]:
    """The windows copy and the convolution kernel of an accepted group (``tiles``: override
    the heuristic)."""
    conv = analyse(group)
    if isinstance(conv, str):
        raise ValueError(f"direct-conv cannot take this group: {conv}")
    shape = ConvShape.of(conv)
    chosen = tiles or choose_tiles(shape, conv.type.dtype, target)
    if shape.og % chosen.tm or min(chosen.tm, chosen.sn, chosen.wg) < 1 or (
            chosen.lanes not in (1, 2, 4, 8, 16)):
        raise ValueError(f"direct-conv: tiles {chosen} do not fit {shape.og} output channels "
                         "per group (tm must divide them; lanes 1, 2, 4, 8 or 16)")
    if chosen.in_place and (chosen.aligned or not shape.copy_free
                            or chosen.span > shape.pixels):
        raise ValueError(f"direct-conv: tiles {chosen} cannot read this input in place (stride "
                         f"1, no padding, at most {shape.pixels} pixels per tile, not aligned)")
    b = _Builder(group, outline, kind, conv, chosen)
    return (b.conv(),) if chosen.in_place else (b.windows(), b.conv())


def accepts(group: FusionGroup, target: TargetProfile) -> bool:
    return not isinstance(analyse(group), str)


register_generator(Generator(
    "direct-conv",
    "conv2d (conv-lowering{method=direct}) with its elementwise epilogue: a padded, "
    "stride-phase copy of the input, then register tiles of output channels x pixels",
    accepts, build,
))
