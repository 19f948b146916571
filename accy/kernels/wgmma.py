"""wgmma-f16: f16 matrix products on Hopper's warpgroup tensor-core instructions, A's fragments
in registers, from OpenCL C.

Taken before ``mma-f16`` where the target's probe ran a register-A ``wgmma`` (``WGMMA_F16`` in
``TargetProfile.tensor_cores``: compute capability 9.0; the instructions are deferred PTX,
expanded and built for ``sm_90a`` by the runtime, :mod:`accy.kernels.wgmma_ptx`), the product
is one ``mma-f16`` takes (:func:`accy.kernels.mma_plan.plan`) with A stored along K in whole
16-byte vectors, B along N in whole 16-byte vectors (``x @ W``) or along K in whole pairs of
halves (``x @ W.T``), K is at least ``MIN_K`` (``wgmma_ss.SHORT_K`` where that kernel walks
tiles) and its tiles score above the mma kernels' (:func:`plan_for`). Where the probe ran TMA
copies, the kernel built is one of two subclasses of this one: B copied by TMA
(:mod:`accy.kernels.wgmma_tma`) or, where the target's static local memory holds their
stages, A and B both (:mod:`accy.kernels.wgmma_ss`; :func:`tilings`), which also takes a B
along N whose rows fit neither (N halves not a multiple of 16 bytes) by transposing it first.

The kernel (``experiments/probe_wgmma.py`` step (7), where it was measured): a work-group of
4 or 2 warpgroups (128 work-items each; :data:`WARPGROUPS`) computes a 256 or 128 x ``BN``
tile (:func:`tiles`); each warpgroup's 64 rows are one ``wgmma m64nBNk16`` accumulator, which
per warp is exactly
``mma.sync``'s m16n8 C fragments of its 16 rows (``acc_0_{j}_{r}``), so the epilogue and
stores are ``mma-f16``'s (:class:`accy.kernels.mma_store.Stores`, staged through the B stages'
local memory, two halves in turn). Only B goes through local memory during the K loop:
``STAGES`` stages of ``BK x BN`` filled by ``cp.async`` (zero-filled past K; rows and columns
past M and N read ones from the start, :func:`wrapped`),
stored as MN-major core matrices for a B along N (8 K rows of 8 N halves, 128 bytes, copied 16
bytes at a time) or K-major ones for a B along K (8 N rows of 8 K positions, copied a pair of
halves at a time); K-adjacent ones 128 bytes apart: the descriptor's leading offset;
N-adjacent ones ``BK / 8 * 128``: its stride.
A's fragments come straight from global memory, 16 bytes a row at a time:
lane ``t`` of a warp loads K ``t BK/4 ..`` of its rows ``g`` and ``g + 8``, so register
position ``16 i + 8 h + 2 t + e`` of the fragments holds K ``t BK/4 + 4 i + 2 h + e``; B's
stage holds the same permutation of its K (:func:`k_row`, :func:`k_position`), which makes the
product the same.

A K step: the next step's A fragments are loaded (into the other of two register sets, read
by the previous step's wgmma, which was waited for), the step's copies waited for, a barrier,
the step's ``BK / 16`` wgmma issued, the copies of step ``kt + STAGES - 1`` issued into the
stage step ``kt - 1`` read, then the wgmma waited for (the wait names the A registers, so the
compiler reuses none before it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from accy.ir.types import DType
from accy.kernels.contraction_plan import Contraction, analyse, padded, tile_groups
from accy.kernels.generators import Generator, register_generator
from accy.kernels.ir import (
    INDEX,
    Barrier,
    Bin,
    Call,
    Cast,
    Expr,
    For,
    If,
    InlineAsm,
    Kernel,
    Let,
    Lit,
    LocalArray,
    Stmt,
    Var,
    add,
    all_of,
    div,
    idx,
    mod,
    mul,
)
from accy.kernels.mma import _Builder
from accy.kernels.mma_plan import (
    MAX_PADDING,
    MmaTiles,
    along_k,
    balance,
    copy_layout,
    split_k,
)
from accy.kernels.mma_plan import plan as mma_plan
from accy.kernels.mma_ptx import CP_COMMIT, CP_WAIT, cp_async
from accy.kernels.wgmma_ptx import PROXY, WAIT0, descriptor_bits, rstep
from accy.plans import FusionGroup, KernelOutline, ScheduleKind
from accy.target import TMA_COPY, WGMMA_F16, TargetProfile

BN, BK, STAGES = 128, 32, 4
# work-group heights in warpgroups of 64 rows, scored by plan_for: 256-row and 128-row tiles
# (64-row ones build too, and were slower than another tiling on every shape swept)
WARPGROUPS = (4, 2)


def tiles(warpgroups: int, bn: int = BN) -> MmaTiles:
    """As MmaTiles, for the shared stores: ``4 warpgroups`` warps of 16 x ``bn`` (one m16n8
    fragment row each); tiles in row-major order (swizzle 1: consecutive work-groups share A's
    rows), which measured faster here than mma-f16's bands of tile rows (papers/kernels.md)."""
    return MmaTiles(64 * warpgroups, bn, BK, 4 * warpgroups, 1, swizzle=1, stages=STAGES,
                    f16=True, loads="vector")


CORE = 128  # bytes of a core matrix (8 rows of 16 bytes); B's descriptor's leading offset
SBO = BK // 8 * CORE  # bytes between N-adjacent core matrices
STAGE_BYTES = BN * BK * 2
# Selection (plan_for), as swept against the mma kernels under every policy (papers/kernels.md,
# "Eighteenth session"): each tiling's score is its rate (a compute unit's throughput on it
# with full waves, relative to the mma kernels' 128x128 tiles) times the share of its waves'
# slots its work-groups fill (:func:`accy.kernels.mma_plan.balance`); the wgmma tiles are
# taken where they score above the tiles the mma kernels would use. The rates are fitted to
# those sweeps (where the fit's error is given).
RATES = {4: 1.5, 2: 1.1}  # 256-row and 128-row tiles
# the same for the f16 kernel copying B by TMA (accy/kernels/wgmma_tma.py; fitted to its own
# sweep, papers/kernels.md "Nineteenth session"): 128-row tiles gain the most from it
TMA_RATES = {4: 1.6, 2: 1.5}
# K past SPLIT_K is split over work-groups where a kernel's tiles leave at least half the
# compute units idle (SPLIT_IDLE): the partial sums are written and read again, a cost that
# fuller waves or a shorter K do not repay. H100, f16 (papers/kernels.md, "Thirty-fourth
# session"): 256x256x65536 0.50x -> 0.63x of torch.compile, 1024x1024x8192 0.30x -> 0.60x;
# 1024^3 in two chunks 0.38x -> 0.24x
SPLIT_IDLE, SPLIT_K = 2, 1024
MMA_SMALL_RATE = 0.65  # the mma kernels' tiles smaller than 128x64
# the mma kernels' 128x64 tiles, which f32 products take where 128x128 tiles had been chosen
# before (papers/kernels.md, "Twenty-ninth session": the wgmma kernels were faster than them
# wherever both were timed, and mma-tf32's 128x64 tiles beat wgmma-tf32's at 2048x1024x512)
MMA_MID_RATE = 0.9
# K must be at least MIN_K (a tile's fixed costs, the pipeline's fill and drain and the stores,
# need some K to pay off: K 64 lost under f16 and 3xtf32, K 128 won)
MIN_K = 128
# A tiling padding M x N past MAX_PADDING (the mma kernels' bound; their smaller tiles pad
# less) is still scored, times its share of useful work past that bound (padding_share), up
# to PADDED: products of a few hundred rows then take wgmma's 128/256-row tiles, which beat
# the mma kernels there though they pad more (measured: papers/kernels.md, "Thirty-ninth
# session")
PADDED = 2.0
# A tiling a compute unit holds several work-groups of (wgmma_ss's 128x128 tiles in three
# stages, two a unit), whose work-groups number no more than the units, has one alone on each
# unit: it runs at LONE of the tiling's rate (its stores no longer hidden behind another's
# products), not at a share of the rate by the slots filled (1 / work-groups a unit)
LONE = 0.75
# one 16-byte load of global memory into four registers, and where ``%5`` is 0 zeros instead
LD_V4 = "ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
LD_V4_IF = ("{ .reg .pred p; setp.ne.b32 p, %5, 0; @p ld.global.v4.u32 {%0, %1, %2, %3}, "
            "[%4]; @!p mov.b32 %0, 0; @!p mov.b32 %1, 0; @!p mov.b32 %2, 0; "
            "@!p mov.b32 %3, 0; }")


def matrix_descriptor(address: Expr, bits: int) -> Expr:
    """A wgmma matrix descriptor: the 18-bit local ``address`` (an i32) >> 4 in its start
    field, ``bits`` its fixed fields (:func:`accy.kernels.wgmma_ptx.descriptor_bits`)."""
    return Bin("|", Cast(INDEX, Bin(">>", Bin("&", address, Lit(0x3FFFF, DType.i32)),
                                    Lit(4, DType.i32))), Lit(bits, INDEX))


def by_tail(step: Expr, k: int | Expr, bk: int, make: Callable[[bool], list[Stmt]],
            tail: bool = False) -> list[Stmt]:
    """``make(tail)``'s statements for K step ``step`` (of ``bk``) where it exists: without K
    guards for a whole step, with them (``tail``) for a last step K ends inside. Guards on
    every step predicated every load and copy of the loop and measured much slower
    (papers/kernels.md, "Seventeenth session"). ``k`` may be a variable (a K chunk's), then
    ``tail`` says whether it can end inside a step."""
    if not isinstance(k, int):
        whole = div(k, bk)
        out: list[Stmt] = [If(Bin("<", step, whole), tuple(make(False)))]
        ends = all_of([Bin("==", step, whole), Bin("!=", mod(k, bk), idx(0))])
        return out + ([If(ends, tuple(make(True)))] if tail else [])
    out = [If(Bin("<", step, idx(k // bk)), tuple(make(False)))] if k // bk else []
    if k % bk:
        out.append(If(Bin("==", step, idx(k // bk)), tuple(make(True))))
    return out


def wrapped(e: Expr, size: int, needed: bool) -> Expr:
    """``e`` modulo ``size`` where the tiles overrun the operand (``needed``): a row or column
    past the end reads one from its start instead of a guard on every load, its results never
    stored (each output depends on its own row of A and column of B only). Distinct rows and
    columns, not the last one for all: many work-items' cp.async of one address made the TF32
    kernel up to 1.8x slower (papers/kernels.md, "Eighteenth session")."""
    return mod(e, size) if needed else e


def k_row(kr: Expr) -> Expr:
    """The K row (of a step) that stage row ``kr`` holds: position ``16 i + 8 h + 2 t + e``
    of the A fragments holds K ``t BK/4 + 4 i + 2 h + e`` (each lane's 16-byte loads)."""
    t, rest = div(mod(kr, 8), 2), add(mul(div(kr, 16), idx(4)), mod(kr, 2))
    return add(mul(t, idx(BK // 4)), add(rest, mul(mod(div(kr, 8), 2), idx(2))))


def k_position(k: Expr) -> Expr:
    """Where (of a step's K positions) the A fragments hold K ``k``: :func:`k_row` inverted,
    K ``t BK/4 + 4 i + 2 h + e`` at position ``16 i + 8 h + 2 t + e``."""
    t, r = div(k, BK // 4), mod(k, BK // 4)
    return add(add(mul(div(r, 4), idx(16)), mul(div(mod(r, 4), 2), idx(8))),
               add(mul(t, idx(2)), mod(r, 2)))


class _Wgmma(_Builder):
    """The kernel; :class:`accy.kernels.wgmma_tf32._WgmmaTf32` changes its K step and element
    size (:attr:`bk`, :attr:`elem`, :attr:`sbo`), its stages (:meth:`stages`,
    :meth:`stage_words`), A's registers and loads (:meth:`registers`, :meth:`load_a`,
    :meth:`a_operands`), B's copies (:meth:`b_copies`, :meth:`copy_bytes`, :meth:`landed`)
    and the wgmma a step issues (:meth:`issue`)."""

    bk, elem, sbo = BK, 2, SBO  # K per step, bytes of an operand element, B's stride offset
    tile_dtype = DType.i32  # of the B stages' local array

    def stages(self) -> int:
        return STAGES

    def k_step(self, tiles: MmaTiles) -> int:
        return self.bk

    def k_span(self) -> int | Expr:
        """K of a work-group's loop: the contraction's, or K split, its chunk's (a variable
        where the last chunk is shorter: the K left from the chunk's start)."""
        k = self.c.k.size
        if self.chunks == 1 or k % self.chunk_k == 0:
            return self.chunk_k if self.chunks > 1 else k
        return self.let("k_span", Call("min", (Bin("-", idx(k), self.k0), idx(self.chunk_k))))

    def by_tail(self, step: Expr, span: int | Expr, make: Callable[[bool], list[Stmt]]
                ) -> list[Stmt]:
        """:func:`by_tail` of K step ``step`` of a loop over ``span`` (:meth:`k_span`)."""
        return by_tail(step, span, self.bk, make, self.c.k.size % self.bk != 0)

    def stage_words(self) -> int:
        return self.t.bn * self.bk * self.elem // 4

    def stage_buffers(self) -> list[tuple[str, int, int]]:
        half = self.stages() * self.stage_words() // 2  # the B stages' words, two buffers
        return [("b_tile", 0, half), ("b_tile", half, half)]

    def build(self) -> Kernel:
        groups, _, g, tt, wm, wn, m0, n0 = self.place()
        self.body.append(LocalArray("b_tile", self.tile_dtype,
                                    self.stages() * self.stage_words(), 128))
        self.acc = [f"acc_0_{j}_{r}" for j in range(self.t.bn // 8) for r in range(4)]
        for name in self.acc:
            self.let(name, Lit(0.0, DType.f32), DType.f32, mutable=True)
        for name in self.registers():
            self.let(name, Lit(0, DType.i32), DType.i32, mutable=True)
        self.a_rows(m0, wm, g, tt)
        self.copies = self.b_copies(n0)
        span, bk = self.k_span(), self.bk
        self.span = span
        if isinstance(span, int):
            count = -(-span // bk)
            steps: Expr = idx(count)
            for s in range(self.stages() - 1):
                self.body += self.copy(idx(s), idx(s), s * bk + bk > span) if s < count else []
                self.body += self.commit()
            self.body += self.load_a("E", idx(0), bk > span)
        else:  # the last chunk shorter: its steps counted, K tails guarded, at run time
            steps = self.let("k_steps", div(add(span, idx(bk - 1)), bk))
            for s in range(self.stages() - 1):
                self.body += self.by_tail(idx(s), span,
                                          lambda t, s=s: self.copy(idx(s), idx(s), t))
                self.body += self.commit()
            self.body += self.by_tail(idx(0), span, lambda t: self.load_a("E", idx(0), t))
        kt = Var("kt")
        loop = self.step("E", "O", kt, 0)
        loop.append(If(Bin("<", add(kt, idx(1)), steps),
                       tuple(self.step("O", "E", add(kt, idx(1)), 1))))
        self.body.append(For("kt", idx(0), steps, tuple(loop), step=2))
        self.stores(m0, n0, wm, wn, g, tt)
        return self.kernel(groups)

    def a_rows(self, m0: Expr, wm: Expr, g: Expr, tt: Expr) -> None:
        """A's addresses: this lane's rows g and g + 8 of its warp's 16 (rows past M
        wrapped), as byte addresses of its first K (t BK/4)."""
        c = self.c
        rows = [self.let(f"a_row{h}", wrapped(add(m0, add(wm, add(g, idx(8 * h)))), c.m.size,
                                              c.m.size % self.t.bm != 0)) for h in (0, 1)]
        self.a_at = [self.let(f"a_at{h}", Bin("+", Cast(INDEX, Var(self.arg["x"])), mul(add(
            self.bases["x"], add(mul(r, idx(c.m.x)), add(self.k0, mul(tt, idx(self.bk // 4))))),
            idx(self.elem)))) for h, r in enumerate(rows)]

    def registers(self) -> list[str]:
        """The A fragment registers, two sets (``E``, ``O``)."""
        self.regs = {s: [f"a{s}{i}" for i in range(4 * (BK // 16))] for s in "EO"}
        return self.regs["E"] + self.regs["O"]

    def b_copies(self, n0: Expr) -> list[tuple[Expr, Expr, Expr]]:
        """(K of the step, N of the operand, local word) of this work-item's B chunks, fixed
        over K: 16 bytes of a K row (B along N, MN-major core matrices), or a pair of halves
        along K (B along K, K-major ones)."""
        c, t = self.c, self.t
        self.trans, copies = 0 if along_k(c, "y") else 1, []
        width = 8 if self.trans else 2  # halves per copy
        for i in range(BN * BK // width // t.threads):
            ch = add(Var("tid"), idx(i * t.threads))
            if self.trans:
                kb, nc = div(ch, BN), mod(div(ch, 8), BN // 8)
                kr = self.let(f"y_kr{i}", add(mul(kb, idx(8)), mod(ch, 8)))
                n = self.let(f"y_n{i}", wrapped(add(n0, mul(nc, idx(8))), c.n.size,
                                                c.n.size % BN != 0))
                byte = add(mul(nc, idx(SBO)), add(mul(kb, idx(CORE)), mul(mod(ch, 8), idx(16))))
                k = k_row(kr)
            else:  # consecutive work-items: consecutive pairs of a row of B
                nl, k = div(ch, BK // 2), mul(mod(ch, BK // 2), idx(2))
                n = self.let(f"y_n{i}", wrapped(add(n0, nl), c.n.size, c.n.size % BN != 0))
                p = self.let(f"y_p{i}", k_position(k))
                byte = add(add(mul(div(nl, 8), idx(SBO)), mul(div(p, 8), idx(CORE))),
                           add(mul(mod(nl, 8), idx(16)), mul(mod(p, 8), idx(2))))
            local = self.let(f"y_l{i}", div(byte, 4))
            copies.append((self.let(f"y_k{i}", k), n, local))
        return copies

    def b_desc(self, out: list[Stmt], stage: Var, n: int) -> Var:
        """B's descriptor of stage ``stage`` (:meth:`stage_address`, :meth:`descriptor`), as
        variable ``bdesc{n}`` appended to ``out``."""
        return self.let_in(out, f"bdesc{n}", matrix_descriptor(self.stage_address(stage),
                                                               self.descriptor()))

    def stage_address(self, stage: Expr) -> Expr:
        """The local address (an i32) of stage ``stage``."""
        return Cast(DType.i32, Cast(INDEX, Bin("+", Var("b_tile"),
                                               mul(stage, idx(self.stage_words())))))

    def descriptor(self) -> int:
        """B's descriptor's fixed fields: core matrices :attr:`sbo` bytes apart along N, 128
        along K, no swizzling."""
        return descriptor_bits(CORE, self.sbo)

    def load_a(self, regs: str, step: Expr, tail: bool) -> list[Stmt]:
        """A's fragments of K step ``step`` into register set ``regs``: per row one 16-byte
        load per 32 of K (zeros past K where ``tail``: K ends inside the step)."""
        out: list[Stmt] = []
        names = self.regs[regs]
        for v in range(BK // 32):
            k = add(mul(step, idx(BK)), idx(8 * v))
            k_ok = Bin("<", add(add(self.k0, k), mul(Var("t"), idx(BK // 4))),
                       idx(self.c.k.size)) \
                if tail else None
            for h in (0, 1):  # row g: registers 0, 2, 4, 6 of the eight; row g + 8: 1, 3, 5, 7
                dst = tuple(("=r", names[8 * v + 2 * e + h]) for e in range(4))
                at = Bin("+", self.a_at[h], mul(k, idx(2)))
                out.append(InlineAsm(LD_V4, dst, (("l", at),), True) if k_ok is None else
                           InlineAsm(LD_V4_IF, dst, (("l", at), ("r", Cast(DType.i32, k_ok))),
                                     True))
        return out

    def copy(self, step: Expr, stage: Expr, tail: bool) -> list[Stmt]:
        """The ``cp.async`` of K step ``step``'s B chunks (:meth:`b_copies`, each
        :meth:`copy_bytes` long) into stage ``stage`` (``tail``: K ends inside the step)."""
        c, out = self.c, []
        for k, n, local in self.copies:
            kg = add(self.k0, add(mul(step, idx(self.bk)), k))
            at = add(self.bases["y"], add(mul(kg, idx(c.k.y)), mul(n, idx(c.n.y))))
            dst = Cast(DType.i32, Cast(INDEX, Bin("+", Var("b_tile"), add(
                mul(stage, idx(self.stage_words())), local))))
            guard = Bin("<", kg, idx(c.k.size)) if tail else None
            out.append(cp_async(dst, self.arg["y"], at, self.elem, self.copy_bytes(), guard))
        return out

    def copy_bytes(self) -> int:
        return 16 if self.trans else 4

    def step(self, regs: str, other: str, kt: Expr, n: int) -> list[Stmt]:
        """K step ``kt`` from A register set ``regs``, loading step ``kt + 1``'s into
        ``other`` first (``n``: the step's place in the loop body, naming its variables)."""
        out = self.by_tail(add(kt, idx(1)), self.span,
                           lambda tail: self.load_a(other, add(kt, idx(1)), tail))
        prep, a = self.a_operands(regs, n)
        out += prep
        stage = self.let_in(out, f"stage{n}", mod(kt, self.stages()))
        out += self.arrived(stage, kt, n)
        acc = tuple(("+f", name) for name in self.acc)
        marker, rest = self.issue(self.b_desc(out, stage, n))
        ops = ", ".join(f"%{i}" for i in range(len(acc) + len(a) + len(rest)))
        out.append(InlineAsm(f"{marker} {ops}", acc, (*a, *rest), True, ("memory",)))
        nxt = add(kt, idx(self.stages() - 1))
        copies = self.by_tail(nxt, self.span,
                              lambda tail: self.copy(nxt, mod(nxt, self.stages()), tail))
        return out + self.after_issue(kt, stage, copies + self.commit(), a)

    def after_issue(self, kt: Expr, stage: Expr, copies: list[Stmt],
                    a: tuple[tuple[str, Expr], ...] = ()) -> list[Stmt]:
        """What follows step ``kt``'s wgmma (reading ``stage`` and A registers ``a``): the
        ``copies`` ahead, the wait for the products, the stage given back."""
        return [*copies, self.wait_products(WAIT0, a), *self.released(stage)]

    def wait_products(self, marker: str, a: tuple[tuple[str, Expr], ...] = ()) -> Stmt:
        """The wait ``marker`` (``WAIT0``, ``WAIT1``) holding the accumulators (and A
        registers ``a``) live."""
        acc = tuple(("+f", name) for name in self.acc)
        held = ", ".join(f"%{i}" for i in range(len(acc) + len(a)))
        return InlineAsm(f"{marker} {held}", acc, a, True, ("memory",))

    def a_operands(self, regs: str, n: int) -> tuple[list[Stmt], tuple[tuple[str, Expr], ...]]:
        """What prepares the step's A operands from register set ``regs``, and the operands."""
        return [], tuple(("r", Var(name)) for name in self.regs[regs])

    def commit(self) -> list[Stmt]:
        """What closes a step's copies (a ``cp.async`` group)."""
        return [InlineAsm(CP_COMMIT, (), (), True, ("memory",))]

    def arrived(self, stage: Var, kt: Expr, n: int) -> list[Stmt]:
        """What waits for step ``kt``'s copies into ``stage`` before its wgmma: all but the
        last ``STAGES - 2`` groups, each work-item's landed copies seen to (:meth:`landed`),
        the fence that shows them to wgmma's proxy, a barrier (after which every work-item's
        copies are in, and the stage the step's copies go to was read by all)."""
        return [InlineAsm(CP_WAIT.format(self.stages() - 2), (), (), True, ("memory",)),
                *self.landed(stage, n), InlineAsm(PROXY, (), (), True, ("memory",)),
                Barrier()]

    def released(self, stage: Var) -> list[Stmt]:
        """What follows the wait for a step's wgmma, which read ``stage``."""
        return []

    def landed(self, stage: Var, n: int) -> list[Stmt]:
        """What each work-item does to its copies of stage ``stage`` once they landed."""
        return []

    def issue(self, bdesc: Var) -> tuple[str, tuple[tuple[str, Expr], ...]]:
        """The step's marker and its operands after the A registers (B's descriptor ...)."""
        return (rstep(self.t.bn, BK // 16, self.trans),
                (("l", bdesc), ("r", Lit(1, DType.i32))))

    @staticmethod
    def let_in(out: list[Stmt], name: str, e: Expr) -> Var:
        out.append(Let(name, INDEX, e))
        return Var(name)


def split_tiles(c: Contraction, t: MmaTiles, target: TargetProfile, per_unit: int,
                least: int) -> MmaTiles:
    """``t`` with K split over work-groups (``MmaTiles.split``) where its tiles leave most
    compute units idle over a K past :data:`SPLIT_K`: :func:`mma_plan.split_k`'s count
    (``per_unit`` work-groups a unit, chunks of at least ``least``)."""
    if SPLIT_IDLE * tile_groups(c, t.bm, t.bn) > target.compute_units or c.k.size <= SPLIT_K:
        return t
    return replace(t, split=split_k(c, t, target, per_unit, least))


def plan(group: FusionGroup, target: TargetProfile) -> tuple[Contraction, MmaTiles] | str:
    """The contraction of a group ``wgmma-f16`` takes and its tiles, or why not."""
    from accy.kernels import wgmma_ss  # (it builds on this module)

    def layout(c: Contraction) -> str | None:
        if along_k(c, "x") and copy_layout(c, "x", 8)[1] and \
                copy_layout(c, "y", 2 if along_k(c, "y") else 8)[1]:
            return None
        if wgmma_ss.forms_for(c, target):  # B transposed first (wgmma_ss.reads)
            return None
        return ("wgmma-f16 needs A stored along K in whole 16-byte vectors, and B along N in "
                "whole 16-byte vectors or along K in whole pairs of halves (or copied by TMA "
                "after a transpose)")

    return plan_for(group, target, WGMMA_F16, DType.f16, layout, STAGES * STAGE_BYTES,
                    lambda c: tilings(c, target))


def tilings(c: Contraction, target: TargetProfile) -> list[tuple[MmaTiles, float, int]]:
    """The f16 kernel's tilings of ``c``, their rates and work-groups a compute unit: A and B
    both copied (:mod:`accy.kernels.wgmma_ss`, its forms, rates and residency) where that
    kernel is usable, else A in registers at :data:`TMA_RATES` where B is copied by TMA,
    :data:`RATES` otherwise, one work-group a unit."""
    from accy.kernels import wgmma_ss  # (it builds on this module)

    if found := wgmma_ss.tilings(c, target):
        return found
    if c.k.size < MIN_K:
        return []
    rates = TMA_RATES if copies_by_tma(c, target) else RATES
    return [(split_tiles(c, tiles(h), target, 1, MIN_K), rates[h], 1) for h in WARPGROUPS]


def copies_by_tma(c: Contraction, target: TargetProfile) -> bool:
    """Whether the f16 kernel copies ``c``'s B by TMA: the probe ran it and B's tensor map
    encodes (:mod:`accy.kernels.wgmma_tma`)."""
    from accy.kernels.wgmma_tma import template  # (it builds on this module)

    return TMA_COPY in target.tensor_cores and not isinstance(template(c), str)


def plan_for(group: FusionGroup, target: TargetProfile, capability: str, dtype: DType,
             layout: Callable[[Contraction], str | None], local_bytes: int,
             tilings: Callable[[Contraction], list[tuple[MmaTiles, float, int]]]
             ) -> tuple[Contraction, MmaTiles] | str:
    """The contraction of a group a wgmma generator takes and its tiles (its probe's
    ``capability``, its ``dtype``, operands ``layout`` accepts, ``local_bytes`` of stages, the
    ``tilings`` of the contraction with their rates and work-groups a compute unit), or why
    not: of the tilings (none where K is too short for every kernel: below ``MIN_K`` for the
    register-A ones) padding M x N by at most :data:`PADDED`, the best scoring (:func:`score`
    times :func:`padding_share`) where that beats the mma kernels' tiles (scored alike)."""
    if capability not in target.tensor_cores:
        return f"the target's probe found no {capability} (TargetProfile.tensor_cores)"
    found = mma_plan(group, target)
    if isinstance(found, str):
        return found
    c, theirs = found
    if c.dtype is not dtype:
        return f"dtype {c.dtype.value}: {capability} takes {dtype.value} products"
    if (why := layout(c)) is not None:
        return why
    if local_bytes > target.local_mem_bytes:
        return f"{local_bytes} bytes of local memory"
    units = target.compute_units
    to_beat = mma_score(c, theirs, units) * padding_share(c, theirs)
    best, why = None, f"K = {c.k.size} is below {MIN_K}: the mma kernels are faster there"
    for t, rate, per_unit in tilings(c):
        if t.threads > target.max_work_group_size:
            why = f"a work-group of {t.threads} work-items"
        elif padded(c, t.bm, t.bn) > PADDED * c.m.size * c.n.size:
            why = f"{c.m.size}x{c.n.size} pads {t.bm}x{t.bn} tiles by over {PADDED}"
        elif (mine := wgmma_score(c, t, units, rate, per_unit) * padding_share(c, t)
              ) <= to_beat:
            why = (f"{tile_groups(c, t.bm, t.bn)} tiles of {t.bm}x{t.bn} on {units} compute "
                   f"units score {mine:.2f}, the mma kernels' {theirs.bm}x{theirs.bn} "
                   f"{to_beat:.2f}")
        elif best is None or mine > best[0]:
            best = (mine, t)
    return (c, best[1]) if best else why


def padding_share(c: Contraction, t: MmaTiles) -> float:
    """The share of tiles ``t``'s work on ``c`` a score keeps: 1 where they pad M x N by at
    most ``MAX_PADDING``, else ``MAX_PADDING x M x N`` over the padded area (the work past
    that bound counted as lost)."""
    return min(1.0, MAX_PADDING * c.m.size * c.n.size / padded(c, t.bm, t.bn))


def score(groups: int, units: int, rate: float) -> float:
    """A tiling's expected throughput: its ``rate`` times the share of its waves' slots its
    ``groups`` fill on ``units`` compute units."""
    return rate * balance(groups, units)


def wgmma_score(c: Contraction, t: MmaTiles, units: int, rate: float, per_unit: int = 1
                ) -> float:
    """The :func:`score` of wgmma tiles ``t`` at ``rate`` on ``c`` (K split: its groups too)
    on ``units`` compute units holding ``per_unit`` work-groups each; where they hold several
    and the work-groups are no more than the units, each alone on its unit at :data:`LONE` of
    the rate."""
    groups = tile_groups(c, t.bm, t.bn) * t.split
    if per_unit > 1 and groups <= units:
        return rate * LONE * groups / units
    return score(groups, units * per_unit, rate)


def mma_score(c: Contraction, t: MmaTiles, units: int) -> float:
    """The :func:`score` of the mma kernels' tiles ``t`` on ``c`` (K split: its groups too):
    rate 1 for 128x128 tiles or larger, :data:`MMA_MID_RATE` for 128x64, :data:`MMA_SMALL_RATE`
    for smaller ones."""
    rate = (1.0 if t.bm * t.bn >= 128 * 128 else MMA_MID_RATE if t.bm >= 128
            else MMA_SMALL_RATE)
    return score(tile_groups(c, t.bm, t.bn) * t.split, units, rate)


def build(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
          target: TargetProfile) -> tuple[Kernel, ...]:
    """The wgmma kernel of an accepted group."""
    found = plan(group, target)
    if isinstance(found, str):
        raise ValueError(f"the wgmma generator cannot take this group: {found}")
    einsum, _ = analyse(group)  # type: ignore[misc]  (plan accepted it)
    from accy.kernels import wgmma_ss  # (they build on _Wgmma)
    from accy.kernels.wgmma_tma import SWIZZLE, _WgmmaTma

    c, t = found
    if wgmma_ss.forms_for(c, target):
        return wgmma_ss.kernels(wgmma_ss._WgmmaSs, group, outline, kind, einsum, c,
                                replace(t, swizzle=SWIZZLE), "f16", target)
    if copies_by_tma(c, target):
        return _WgmmaTma(group, outline, kind, einsum, c, replace(t, swizzle=SWIZZLE), "f16",
                         target).kernels()
    return _Wgmma(group, outline, kind, einsum, c, t, "f16", target).kernels()


register_generator(Generator(
    "wgmma-f16",
    "f16 matrix products (A along K, B along N) on Hopper's wgmma with A in registers "
    "(deferred PTX built for sm_90a), on targets whose probe ran it",
    lambda group, target: not isinstance(plan(group, target), str),
    build,
))
