"""wgmma-tf32 / wgmma-3xtf32: f32 matrix products on Hopper's warpgroup tensor-core instructions
in TF32, A's fragments in registers, under the ``tf32`` and ``3xtf32`` precision policies.

Taken before ``mma-tf32`` / ``mma-3xtf32`` where the target's probe ran a register-A TF32
``wgmma`` (``WGMMA_TF32`` in ``TargetProfile.tensor_cores``: compute capability 9.0, the
instructions built for ``sm_90a`` by the runtime, :mod:`accy.kernels.wgmma_ptx`), the product
is one the mma generators take (:func:`accy.kernels.mma_plan.plan`) with A stored along K in
whole 16-byte vectors, K is at least ``MIN_K`` and its tiles score above the mma kernels'
(:func:`accy.kernels.wgmma.plan_for`).

The kernel is ``wgmma-f16``'s (a subclass of :class:`accy.kernels.wgmma._Wgmma`) with TF32's
``wgmma m64nBNk8``: a work-group of four warpgroups computes a 256 x ``BN`` tile (under
``3xtf32`` also two warpgroups a 128 x ``BN`` one: :data:`WARPGROUPS`), per warp
exactly ``mma.sync``'s m16n8 C fragments (so the stores are the mma kernels'), K steps of
``BK``; K tails peeled and edge rows and columns wrapped as there. A's fragments come straight
from global memory, 16 bytes a row a step: lane ``t`` loads K ``4t .. 4t + 3`` of its rows
``g`` and ``g + 8``, so fragment column ``4h + t`` of k8 step ``i`` holds K ``4t + 2i + h``
(:func:`position`); B goes through local memory in that K order, copied by ``cp.async`` 4 bytes
at a time (any layout of B: TF32 wgmma reads B only K-major, 8 N rows of 4 K words a core
matrix, K-adjacent ones 128 bytes apart, N-adjacent ones ``BK / 4 * 128``). Each work-item
rounds the words it copied once they land: ``tf32`` in place (``cvt.rna``); ``3xtf32`` the big
part in place and the small part (``tf32(x - big)``) into a second tile beside it, A's
fragments split the same way in registers, and each K step is the small products then big x big
(small x small dropped), as :func:`accy.kernels.mma_ptx.tf32_products` does with ``mma.sync``;
a side exact in TF32 (f16 values cast to f32) is neither split nor rounded, its small products
skipped. The rounding is the mma kernels' (saturating for the big part where the probe found
it), so the error bounds are theirs.

A K step: the next step's A words loaded (into the other of two register sets), this step's
A split, the copies waited for and rounded, a barrier, the step's wgmma issued, the copies of
step ``kt + STAGES - 1`` issued, the wgmma waited for.

Under ``tf32``, where the probe found TMA copies that round to TF32 (``TMA_TF32``), B is
stored along K and the target's static local memory holds the stages, ``wgmma-tf32`` builds
:mod:`accy.kernels.wgmma_ss`'s kernel instead (A and B both copied by TMA, rounded on the way;
:func:`tilings`). Under ``3xtf32``, :mod:`accy.kernels.wgmma_ss3`'s form (operands split by a
kernel before the product, where enabled) competes with the register-A tilings, from any
layout of A.
"""

from __future__ import annotations

from dataclasses import replace

from accy.ir.types import DType
from accy.kernels import tma, wgmma, wgmma_ss, wgmma_ss3
from accy.kernels.contraction_plan import Contraction, analyse
from accy.kernels.generators import Generator, register_generator
from accy.kernels.ir import (
    INDEX,
    Bin,
    Call,
    Cast,
    Expr,
    InlineAsm,
    Kernel,
    Let,
    Lit,
    Load,
    Stmt,
    Store,
    Var,
    add,
    div,
    idx,
    mod,
    mul,
)
from accy.kernels.mma_plan import MmaTiles, along_k, copy_layout
from accy.kernels.mma_ptx import exact_in_tf32, tf32_registers
from accy.kernels.wgmma import BN, CORE, LD_V4, LD_V4_IF, _Wgmma, plan_for, wrapped
from accy.kernels.wgmma_ptx import tstep
from accy.kernels.wgmma_tma import SWIZZLE
from accy.plans import FusionGroup, KernelOutline, ScheduleKind
from accy.target import WGMMA_TF32, TargetProfile

BK = 16
STAGES = {"tf32": 4, "3xtf32": 3}  # a 3xtf32 stage holds the small parts too
# work-group heights tried (wgmma.plan_for): 128-row tiles read B twice as often a product as
# 256-row ones, which 3xTF32's three products a step hide and TF32's one does not (it lost to
# mma-tf32 wherever 256-row tiles did not fill the device; papers/kernels.md)
WARPGROUPS = {"tf32": (4,), "3xtf32": (4, 2)}
SBO = BK // 4 * CORE  # bytes between N-adjacent core matrices
TILE_WORDS = BN * BK  # of one B tile (big or small parts)


def tiles(warpgroups: int) -> MmaTiles:
    """wgmma-f16's tiles (the stores read them) in K steps of 16 f32."""
    return MmaTiles(64 * warpgroups, BN, BK, 4 * warpgroups, 1, swizzle=1, loads="scalar")


def position(k: Expr) -> Expr:
    """Where (of a step's K positions) the A fragments hold K ``k``: fragment column
    ``4h + t`` of k8 step ``i`` (position ``8i + 4h + t``) holds K ``4t + 2i + h``."""
    r = mod(k, 4)
    return add(add(mul(div(r, 2), idx(8)), mul(mod(r, 2), idx(4))), div(k, 4))


def word(k: Expr, n: Expr) -> Expr:
    """The word of a B tile holding (K ``k`` of the step, N ``n`` of the tile): K-major core
    matrices at K position :func:`position` ``(k)``."""
    p = position(k)
    return div(add(add(mul(div(n, 8), idx(SBO)), mul(div(p, 4), idx(CORE))),
                   add(mul(mod(n, 8), idx(16)), mul(mod(p, 4), idx(4)))), 4)


class _WgmmaTf32(_Wgmma):
    bk, elem, sbo = BK, 4, SBO
    tile_dtype = DType.f32

    def stages(self) -> int:
        return STAGES[self.policy]

    def stage_words(self) -> int:
        return TILE_WORDS * (2 if self.split["b"] else 1)

    def registers(self) -> list[str]:
        """A's words as loaded (K ``4t .. 4t + 3`` of rows g, g + 8), two sets."""
        self.raw = {s: [[f"a{s}{h}_{r}" for r in range(4)] for h in (0, 1)] for s in "EO"}
        return [n for s in "EO" for row in self.raw[s] for n in row]

    def b_copies(self, n0: Expr) -> list[tuple[Expr, Expr, Expr]]:
        """(K of the step, N of the operand, local word) of this work-item's 4-byte B copies,
        fixed over K; consecutive work-items take consecutive N (B along N) or K (B along
        K) of the operand, columns past N wrapped."""
        c, copies = self.c, []
        for i in range(TILE_WORDS // self.t.threads):
            e = add(Var("tid"), idx(i * self.t.threads))
            if along_k(c, "y"):
                k, n = mod(e, BK), div(e, BK)
            else:  # 8 N of 4 K a warp: its local writes in 32 distinct banks
                k = add(mul(mod(div(e, 8), 4), idx(4)), div(e, TILE_WORDS // 4))
                n = add(mod(e, 8), mul(mod(div(e, 32), BN // 8), idx(8)))
            kk, nn = self.let(f"y_k{i}", k), self.let(f"y_n{i}", n)
            copies.append((kk, self.let(f"y_gn{i}", wrapped(
                add(n0, nn), c.n.size, c.n.size % BN != 0)),
                self.let(f"y_w{i}", word(kk, nn))))
        return copies

    def load_a(self, regs: str, step: Expr, tail: bool) -> list[Stmt]:
        """A's words of K step ``step`` into register set ``regs``: one 16-byte load per row
        (zeros past K where ``tail``: K ends inside the step)."""
        c, out = self.c, []
        k = mul(step, idx(BK))
        k_ok = Bin("<", add(add(self.k0, k), mul(Var("t"), idx(4))), idx(c.k.size)) \
            if tail else None
        for h in (0, 1):
            dst = tuple(("=r", name) for name in self.raw[regs][h])
            at = Bin("+", self.a_at[h], mul(k, idx(4)))
            out.append(InlineAsm(LD_V4, dst, (("l", at),), True) if k_ok is None else
                       InlineAsm(LD_V4_IF, dst, (("l", at), ("r", Cast(DType.i32, k_ok))),
                                 True))
        return out

    def fragments(self, regs: str, n: int) -> tuple[list[Stmt], list[list[str]]]:
        """A's registers of the step in set ``regs`` under the policy, and the A operands of
        each product, in order (small parts first): per product ``4 BK/8`` registers, k8
        step ``i``'s fragment (rows g, g + 8 at column t, then at t + 4) K ``4t + 2i + h``."""
        out: list[Stmt] = []
        names = []
        for i in range(BK // 8):
            for h in (0, 1):
                for row in (0, 1):
                    name = f"f{n}_{i}{h}{row}"
                    word = Var(self.raw[regs][row][2 * i + h])
                    out += (tf32_registers(name, Call("bitcast_f32", (word,)), self.policy,
                                           self.big_cvt) if self.rounds("a")
                            else [Let(name, DType.i32, word)])
                    names.append(name)
        big = names
        small = [f"{name}_s" for name in names]
        products = ([small] if self.split["a"] else []) + ([big] if self.split["b"] else [])
        return out, [*products, big]

    def copy_bytes(self) -> int:
        return 4

    def round_b(self, stage: Var, n: int) -> list[Stmt]:
        """This work-item's words of the stage rounded once they landed: the big part (or
        ``tf32``'s rounding) in place, the small part into the tile beside it."""
        out: list[Stmt] = []
        for i, (_, _, w) in enumerate(self.copies):
            at = add(mul(stage, idx(self.stage_words())), w)
            name = f"r{n}_{i}"
            out += tf32_registers(name, Load("b_tile", at), self.policy, self.big_cvt)
            out.append(Store("b_tile", at, Call("bitcast_f32", (Var(name),))))
            if self.split["b"]:
                out.append(Store("b_tile", add(at, idx(TILE_WORDS)),
                                 Call("bitcast_f32", (Var(f"{name}_s"),))))
        return out

    def a_operands(self, regs: str, n: int) -> tuple[list[Stmt], tuple[tuple[str, Expr], ...]]:
        """A's registers split or rounded under the policy (:meth:`fragments`), each
        product's in turn."""
        frags, self.products = self.fragments(regs, n)
        return frags, tuple(("r", Var(name)) for names in self.products for name in names)

    def landed(self, stage: Var, n: int) -> list[Stmt]:
        return self.round_b(stage, n) if self.rounds("b") else []

    def rounds(self, side: str) -> bool:
        """Whether operand ``side`` is rounded (or split): not under 3xtf32 where its values
        are exact in TF32 (f16 cast to f32), as the mma kernels' ``operand``."""
        return self.policy == "tf32" or self.split[side]

    def issue(self, bdesc: Var) -> tuple[str, tuple[tuple[str, Expr], ...]]:
        """``TSTEP`` with B's descriptor per product: the big tile's, except where A's big
        part meets B's small one (the tile beside it)."""
        descs: list[Expr] = [bdesc] * len(self.products)
        if self.split["b"]:
            descs[len(self.products) - 2] = Bin("+", bdesc, Lit(TILE_WORDS * 4 >> 4, INDEX))
        return tstep(BN, BK // 8, len(self.products)), tuple(("l", d) for d in descs)


def plan(group: FusionGroup, target: TargetProfile, policy: str
         ) -> tuple[Contraction, MmaTiles] | str:
    """The contraction of a group ``wgmma-{policy}`` takes and its tiles, or why not."""
    def ss3(c: Contraction) -> list[tuple[MmaTiles, float, int]]:
        return wgmma_ss3.tilings(c, splits(group, c), target) if policy == "3xtf32" else []

    def a_fits(c: Contraction) -> bool:
        return along_k(c, "x") and copy_layout(c, "x", 4)[1]

    def layout(c: Contraction) -> str | None:
        if a_fits(c) or ss3(c):  # (wgmma_ss3 splits A first, from any layout)
            return None
        return "wgmma-tf32 needs A stored along K in whole 16-byte vectors"

    def tiled(c: Contraction) -> list[tuple[MmaTiles, float, int]]:
        return ss3(c) + (tilings(c, target, policy) if a_fits(c) else [])

    tiles_a_stage = 2 if policy == "3xtf32" else 1  # big and small parts (at most)
    return plan_for(group, target, WGMMA_TF32, DType.f32, layout,
                    STAGES[policy] * tiles_a_stage * TILE_WORDS * 4, tiled)


def splits(group: FusionGroup, c: Contraction) -> dict[str, bool]:
    """Which of ``c``'s operands 3xtf32 splits: those not exact in TF32 (as the mma kernels'
    ``split``)."""
    einsum, _ = analyse(group)  # type: ignore[misc]
    return {"x": not exact_in_tf32(einsum.srcs[c.x]),
            "y": not exact_in_tf32(einsum.srcs[1 - c.x])}


def tilings(c: Contraction, target: TargetProfile, policy: str
            ) -> list[tuple[MmaTiles, float, int]]:
    """The TF32 kernels' tilings of ``c``, their rates and work-groups a compute unit: A and B
    both copied by TMA, rounded to TF32 on the way (:mod:`accy.kernels.wgmma_ss`), under
    ``tf32`` where that kernel is usable; else A in registers at ``wgmma.RATES``."""
    if policy == "tf32" and (found := wgmma_ss.tilings(c, target, tma.TF32, loads="scalar")):
        return found  # (scalar loads: as tiles())
    if c.k.size < wgmma.MIN_K:
        return []
    # wgmma.RATES read at the call: sweeps replace it. K is split for 256-row tiles only:
    # 128-row ones split measured slower than the mma kernels' split tiles on the H100
    # (papers/kernels.md, "Thirty-fourth session": 384x384x30720 1.18x -> 1.08x of
    # torch.compile, 316x252x97768 0.90x -> 0.82x)
    return [(wgmma.split_tiles(c, tiles(h), target, 1, wgmma.MIN_K) if h == 4 else tiles(h),
             wgmma.RATES[h], 1) for h in WARPGROUPS[policy]]


def build(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
          target: TargetProfile, policy: str) -> tuple[Kernel, ...]:
    """The TF32 wgmma kernel of an accepted group under ``policy``."""
    found = plan(group, target, policy)
    if isinstance(found, str):
        raise ValueError(f"the wgmma-{policy} generator cannot take this group: {found}")
    einsum, _ = analyse(group)  # type: ignore[misc]  (plan accepted it)
    c, t = found
    if t.rounding == wgmma_ss3.ROUNDING:
        return wgmma_ss3.kernels(group, outline, kind, einsum, c, t, policy, target)
    if policy != "tf32" or not wgmma_ss.forms_for(c, target, tma.TF32):
        return _WgmmaTf32(group, outline, kind, einsum, c, t, policy, target).kernels()
    return wgmma_ss.kernels(wgmma_ss._WgmmaSsTf32, group, outline, kind, einsum, c,
                            replace(t, swizzle=SWIZZLE), policy, target)


for _policy in STAGES:
    register_generator(Generator(
        f"wgmma-{_policy}",
        f"f32 matrix products (A along K) on Hopper's TF32 wgmma with A in registers under "
        f"kernelization{{precision={_policy}}} (deferred PTX built for sm_90a), on targets "
        "whose probe ran TF32 wgmma",
        lambda group, target, p=_policy: not isinstance(plan(group, target, p), str),
        lambda group, outline, kind, target, p=_policy: build(group, outline, kind, target, p),
        precisions=frozenset({_policy}),
    ))
