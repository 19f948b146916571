"""wgmma-3xtf32 with both operands split first and copied by TMA: no split in the K loop.

``wgmma-3xtf32``'s register-A kernel and ``mma-3xtf32`` split each value into its TF32 big
and small parts inside the K loop, every warp that reads it, and on products of a few
hundred rows each way their loops wait on issuing those instructions, not on the tensor cores
(papers/kernels.md, "Fifty-first session"). This form splits every value once, before the
product:

- A first kernel (:func:`split_kernel`) writes each operand K-contiguous into scratch memory
  (:data:`SPLIT`: ``[batch][part][row][K]``, K padded to 4 for 16-byte rows; B along N is
  transposed on the way) as two parts: the big part (rounded to TF32 as the mma kernels round
  it, saturating where the probe found it) and the small part ``tf32(x - big)``. A
  work-group of 256 work-items moves a 32 x 32 block through local memory (rows of 33
  words), reading along whichever index the operand stores contiguously and writing along K.
- The product is :mod:`accy.kernels.wgmma_ss`'s TF32 kernel (both operands copied by
  TFLOAT32 tensor maps, full and empty ``mbarrier`` stages, no barrier in the K loop) whose
  stage holds four boxes: A's big and small parts, B's big and small parts (each ``rows x 32``
  f32, K-major, 128-byte swizzled: 64 KiB a stage at 128 x 128). Each k8 step issues three
  ``wgmma`` from local memory in one marker (``SSTEPT..x3``): small x big, big x small, then
  big x big (small x small dropped), as the register forms sum them. A map per operand spans
  both parts (a dimension of two after the rows), so a work-group writes two maps as before.

Taken by ``wgmma_tf32`` under ``3xtf32`` (the default f32 policy where tensor cores run)
where its tiles score best and :data:`ENABLED`, the probe's TMA copies round
to TF32 (``TMA_TF32``), both operands are f32 values not exact in TF32 (an f16 cast is left to
the register forms, which skip its small products), K is at least :data:`MIN_K`, an operand
has at most two batch dimensions, and the stages fit the target's static local memory.
"""

from __future__ import annotations

import dataclasses
import math

from accy.ir.types import DType
from accy.kernels import loopnest, tma, wgmma_ss
from accy.kernels.contraction_plan import Contraction, Dim
from accy.kernels.ir import (
    INDEX,
    Barrier,
    Bin,
    Call,
    Expr,
    Id,
    If,
    Kernel,
    KernelArg,
    LaunchGeometry,
    Let,
    Lit,
    Load,
    LocalArray,
    Stmt,
    Store,
    Var,
    add,
    all_of,
    div,
    idx,
    mod,
    mul,
)
from accy.kernels.mma_plan import MmaTiles
from accy.kernels.mma_ptx import CVT_TF32, TF32_BIG_SAT, tf32_registers
from accy.kernels.wgmma import _Wgmma
from accy.kernels.wgmma_ptx import sstep
from accy.kernels.wgmma_ss import ROW, WG_ROWS, _WgmmaSsTf32, form_tiles
from accy.kernels.wgmma_tma import Geometry, i32
from accy.target import TF32_SATFINITE, TMA_TF32, TargetProfile

# off: the register-A and mma 3xTF32 kernels everywhere (ablations)
ENABLED = True
FORM = (2, 128, 3)  # (warpgroups, columns, stages): 128 x 128 tiles, three 64 KiB stages
# the form's rate on wgmma.RATES's scale (wgmma.plan_for weighs it against the mma kernels'
# and the register-A tiles by the waves they fill): forced on an H100, faster wherever its
# tiles filled at least about half the units, slower with fewer tiles or against a split K;
# the rate that takes exactly the faster ones (papers/kernels.md, "Fifty-third session")
RATE = 3.0
# K of at least MIN_K (ten steps of 32): below it the register-A and mma kernels were faster
# (a second kernel and deeper stages to fill for few steps; papers/kernels.md)
MIN_K = 320
SPLIT = {"x": "scratch_x3", "y": "scratch_y3"}  # the scratch split_kernel writes per operand
PARTS = 2  # big, small
ROUNDING = "first"  # MmaTiles.rounding of this form's tiles (wgmma_tf32.build tells them apart)


def padded_k(c: Contraction) -> int:
    """K of a scratch row: a multiple of 4 f32 (the tensor maps' 16-byte strides)."""
    return -(-c.k.size // 4) * 4


def side_dims(c: Contraction, side: str) -> tuple[Dim, int, int, list[int]]:
    """(the rows' Dim, their element stride, K's element stride, the batch dimensions the
    operand spans: indexes into ``c.batch``) of operand ``side`` as stored."""
    rows = c.m if side == "x" else c.n
    batch = [i for i, d in enumerate(c.batch) if getattr(d, side)]
    return rows, getattr(rows, side), getattr(c.k, side), batch


def scratch_elems(c: Contraction, side: str) -> int:
    rows, _, _, batch = side_dims(c, side)
    return math.prod(c.batch[i].size for i in batch) * PARTS * rows.size * padded_k(c)


def geometry(c: Contraction, side: str, box_rows: int) -> Geometry:
    """Operand ``side``'s tensor map over its split scratch: (K, rows, part, batch...), boxes
    of 32 f32 of K by ``box_rows`` rows of one part."""
    rows, _, _, batch = side_dims(c, side)
    row_bytes = 4 * padded_k(c)
    strides, inner = [row_bytes, row_bytes * rows.size], row_bytes * rows.size * PARTS
    for i in reversed(batch):  # (compact, the last batch dimension innermost)
        strides.insert(2, inner)
        inner *= c.batch[i].size
    return Geometry((c.k.size, rows.size, PARTS, *(c.batch[i].size for i in batch)),
                    tuple(strides), (ROW // 4, box_rows, 1, *[1] * len(batch)), tuple(batch),
                    tma.TF32)


def unusable(c: Contraction, split: dict[str, bool], target: TargetProfile) -> str | None:
    """Why this form does not take ``c`` (None: it does); ``split``: which operands the
    policy splits (not those exact in TF32)."""
    if not ENABLED:
        return "off (wgmma_ss3.ENABLED)"
    if TMA_TF32 not in target.tensor_cores:
        return "no TMA copies rounding to TF32 (the probe's TFLOAT32 tensor map)"
    if not all(split.values()):
        return "an operand is exact in TF32: the register forms skip its small products"
    if c.k.size < MIN_K:
        return f"K = {c.k.size} is below {MIN_K}"
    t = form_tiles(FORM)
    if (need := wgmma_ss.local_bytes(t, stage_bytes(t))) > target.group_local_bytes:
        return f"{need} bytes of local memory"
    for side, rows in (("x", t.bm), ("y", t.bn)):
        g = geometry(c, side, rows)
        if len(g.dims) > 5:
            return f"{'AB'[side == 'y']} has more than two batch dimensions"
        if isinstance(why := tma.template(g.dtype, g.dims, g.strides, g.box), str):
            return why
    return None


def stage_bytes(t: MmaTiles) -> int:
    """A stage: the big and small parts of wgmma_ss's boxes."""
    return PARTS * wgmma_ss.stage_bytes(t)


def tilings(c: Contraction, split: dict[str, bool], target: TargetProfile
            ) -> list[tuple[MmaTiles, float, int]]:
    """The form's tiling of ``c`` at :data:`RATE`, a work-group a compute unit (its stages
    take most of the unit's local memory), where :func:`unusable` finds nothing; its tiles'
    ``rounding`` is :data:`ROUNDING`."""
    if unusable(c, split, target) is not None:
        return []
    return [(dataclasses.replace(form_tiles(FORM), loads="scalar", rounding=ROUNDING), RATE, 1)]


def split_kernel(c: Contraction, operands: dict[str, KernelArg], entry: str, work_item: int,
                 kind, domain, ops, target: TargetProfile) -> tuple[Kernel, dict[str, KernelArg]]:
    """The kernel writing both operands' parts into their scratch (the module docstring),
    and those scratch arguments as the product reads them. Work-groups ``0 .. GA - 1`` move
    A's blocks, the rest B's."""
    big_cvt = TF32_BIG_SAT if TF32_SATFINITE in target.tensor_cores else CVT_TF32
    lane, row, kp = Var("lane"), Var("row"), padded_k(c)
    body: list[Stmt] = [Let("grp", INDEX, Id("group", 0)), Let("tid", INDEX, Id("local", 0)),
                        Let("lane", INDEX, mod(Var("tid"), 32)),
                        Let("row", INDEX, div(Var("tid"), 32)),
                        LocalArray("sp_tile", DType.f32, 32 * 33)]
    branches, first, outs = [], 0, {}
    for side in "xy":
        rows, rs, ks, batch = side_dims(c, side)
        kb, rb = -(-c.k.size // 32), -(-rows.size // 32)
        copies = math.prod(c.batch[i].size for i in batch)
        g = Bin("-", Var("grp"), idx(first)) if first else Var("grp")
        out = KernelArg(SPLIT[side], DType.f32, True, -1, scratch_elems(c, side))
        src, dst, rest = idx(0), idx(0), div(g, kb * rb)
        part = rows.size * kp
        stmts: list[Stmt] = [Let(f"{side}k0", INDEX, mul(mod(g, kb), idx(32))),
                             Let(f"{side}r0", INDEX, mul(mod(div(g, kb), rb), idx(32)))]
        scale = PARTS * part
        for i in reversed(batch):
            d = c.batch[i]
            stmts.append(Let(f"{side}b{i}", INDEX, mod(rest, d.size)))
            rest = div(rest, d.size)
            src = add(src, mul(Var(f"{side}b{i}"), idx(getattr(d, side))))
            dst = add(dst, mul(Var(f"{side}b{i}"), idx(scale)))
            scale *= d.size
        stmts += [Let(f"{side}src", INDEX, src), Let(f"{side}dst", INDEX, dst)]
        k0, r0 = Var(f"{side}k0"), Var(f"{side}r0")
        for i in range(4):  # lanes along the operand's contiguous index
            kl, rl = (lane, add(row, idx(8 * i))) if ks == 1 else (add(row, idx(8 * i)), lane)
            k, r = add(k0, kl), add(r0, rl)
            at = add(Var(f"{side}src"), add(mul(k, idx(ks)), mul(r, idx(rs))))
            inside = all_of([Bin("<", k, idx(c.k.size)), Bin("<", r, idx(rows.size))])
            stmts.append(If(inside, (Store("sp_tile", add(mul(rl, idx(33)), kl),
                                           Load(operands[side].name, at)),)))  # type: ignore
        stmts.append(Barrier())
        for i in range(4):  # rows r0 + row + 8i, K k0 + lane: both parts
            k, r = add(k0, lane), add(r0, add(row, idx(8 * i)))
            name = f"{side}v{i}"
            stmts += tf32_registers(name, Load("sp_tile", add(mul(add(row, idx(8 * i)),
                                                                  idx(33)), lane)),
                                    "3xtf32", big_cvt)
            at = add(Var(f"{side}dst"), add(mul(r, idx(kp)), k))
            inside = all_of([Bin("<", k, idx(c.k.size)), Bin("<", r, idx(rows.size))])
            stmts.append(If(inside, (
                Store(SPLIT[side], at, Call("bitcast_f32", (Var(name),))),
                Store(SPLIT[side], add(at, idx(part)), Call("bitcast_f32",
                                                            (Var(f"{name}_s"),))))))
        branches.append((first, tuple(stmts)))
        first += kb * rb * copies
        outs[side] = out
    body.append(If(Bin("<", Var("grp"), idx(branches[1][0])), branches[0][1], branches[1][1]))
    inputs = tuple({a.name: a for a in operands.values()}.values())  # (x @ x.T: one)
    kernel = Kernel(f"{entry}_split", work_item, kind, domain,
                    (*inputs, outs["x"], outs["y"]), tuple(body),
                    LaunchGeometry((256 * first,), (256,)), ops, fixed_local_size=True)
    return kernel, {s: dataclasses.replace(a, is_output=False) for s, a in outs.items()}


class _WgmmaSs3(_WgmmaSsTf32):
    """The product; see the module docstring."""

    def reads_split(self, scratch: dict[str, KernelArg]) -> _WgmmaSs3:
        """This kernel with both operands copied from :func:`split_kernel`'s ``scratch``."""
        self.split_args = scratch
        self.arg["x"], self.arg["y"] = scratch["x"].name, scratch["y"].name
        return self

    def kernel(self, groups: int) -> Kernel:
        k = super().kernel(groups)
        return dataclasses.replace(k, args=(*k.args, *self.split_args.values()))

    def build(self):
        self.ga, self.g = geometry(self.c, "x", self.t.bm), geometry(self.c, "y", self.t.bn)
        self.maps = tuple(tma.template(g.dtype, g.dims, g.strides, g.box)
                          for g in (self.ga, self.g))
        if bad := [w for w in self.maps if isinstance(w, str)]:
            raise ValueError(f"wgmma-3xtf32 cannot copy the split operands by TMA: {bad[0]}")
        self.kmajor, self.walking = True, False
        return _Wgmma.build(self)

    def stage_words(self) -> int:
        return stage_bytes(self.t) // 4

    def stage_address(self, stage: Expr) -> Expr:
        """B's big part, after A's two."""
        return Bin("+", self.a_address(stage), i32(PARTS * self.t.bm * ROW))

    def boxes(self, step: Expr, kstep: Expr, stage: Expr, m0: Expr, n0: Expr,
              bcoords: list[Expr]) -> list[Stmt]:
        """A's big and small boxes, then B's, of K step ``kstep`` into ``stage``."""
        t, k = self.t, add(self.k0, mul(kstep, idx(self.bk)))
        out = self.refill(step, stage, stage_bytes(t))
        for g, at, base, rows, r0 in ((self.ga, 0, self.a_address(stage), t.bm, m0),
                                      (self.g, tma.MAP_BYTES, self.stage_address(stage), t.bn,
                                       n0)):
            for part in range(PARTS):
                dst = Bin("+", base, i32(part * rows * ROW)) if part else base
                out.append(self.box(g, dst, at, [k, r0, idx(part)], stage, bcoords))
        return [If(Bin("==", Var("tid"), idx(0)), tuple(out))]

    def issue(self, bdesc: Var) -> tuple[str, tuple[tuple[str, Expr], ...]]:
        """Three runs of four k8 wgmma (small x big, big x small, big x big): A's
        descriptors are B's big part's moved back to the warpgroup's rows of A's parts."""
        t = self.t
        abig = Bin("+", Bin("+", bdesc, Lit(-(PARTS * t.bm * ROW >> 4), INDEX)),
                   mul(div(Var("warp"), 4), idx(WG_ROWS >> 4)))
        asmall = Bin("+", abig, Lit(t.bm * ROW >> 4, INDEX))
        bsmall = Bin("+", bdesc, Lit(t.bn * ROW >> 4, INDEX))
        pairs = ((asmall, bdesc), (abig, bsmall), (abig, bdesc))
        return (sstep(t.bn, ROW // 32, 2, 2, None, len(pairs)),
                (*(("l", d) for pair in pairs for d in pair), ("r", i32(1))))


def kernels(group, outline, kind, einsum, c: Contraction, t: MmaTiles, policy: str,
            target: TargetProfile) -> tuple[Kernel, ...]:
    """:func:`split_kernel`'s kernel, then the product reading its scratch."""
    kernel = _WgmmaSs3(group, outline, kind, einsum, c, t, policy, target)
    operands = {s: next(a for a in kernel.epi.args if a.name == kernel.arg[s]) for s in "xy"}
    first, scratch = split_kernel(c, operands, outline.entry, outline.work_item, kind,
                                  group.domain, loopnest.implemented_ops(group), target)
    return first, *kernel.reads_split(scratch).kernels()
