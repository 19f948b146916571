"""wgmma-tf32 / wgmma-3xtf32: f32 matrix products on Hopper's warpgroup tensor-core instructions
in TF32, A's fragments in registers, under the ``tf32`` and ``3xtf32`` precision policies.

Taken before ``mma-tf32`` / ``mma-3xtf32`` where the target's probe ran a register-A TF32
``wgmma`` (``WGMMA_TF32`` in ``TargetProfile.tensor_cores``: compute capability 9.0, the
instructions built for ``sm_90a`` by the runtime, :mod:`accy.kernels.wgmma_ptx`), the product
is one the mma generators take (:func:`accy.kernels.mma_plan.plan`) with A stored along K in
whole 16-byte vectors, and its tiles fill the device (:func:`plan`).

The kernel is ``wgmma-f16``'s (:mod:`accy.kernels.wgmma`) with TF32's ``wgmma m64nBNk8``: a
work-group of ``WARPGROUPS`` warpgroups computes a ``64 WARPGROUPS x BN`` tile, per warp
exactly ``mma.sync``'s m16n8 C fragments (so the stores are the mma kernels'), K steps of
``BK``. A's fragments come straight from global memory, 16 bytes a row a step: lane ``t``
loads K ``4t .. 4t + 3`` of its rows ``g`` and ``g + 8``, so fragment column ``4h + t`` of
k8 step ``i`` holds K ``4t + 2i + h`` (:func:`position`); B goes through local memory in that
K order, copied by ``cp.async`` 4 bytes at a time (any layout of B: TF32 wgmma reads B only
K-major, 8 N rows of 4 K words a core matrix, K-adjacent ones 128 bytes apart, N-adjacent
ones ``BK / 4 * 128``). Each work-item rounds the words it copied once they land: ``tf32``
in place (``cvt.rna``); ``3xtf32`` the big part in place and the small part
(``tf32(x - big)``) into a second tile beside it, A's fragments split the same way in
registers, and each K step is the small products then big x big (small x small dropped), as
:func:`accy.kernels.mma_ptx.tf32_products` does with ``mma.sync``; a side exact in TF32 (f16
values cast to f32) is not split and its small products are skipped. The rounding is the mma
kernels' (saturating for the big part where the probe found it), so the error bounds are
theirs.

A K step: the next step's A words loaded (into the other of two register sets), this step's
A split, the copies waited for and rounded, a barrier, the step's wgmma issued, the copies of
step ``kt + STAGES - 1`` issued, the wgmma waited for.
"""

from __future__ import annotations

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
    Load,
    LocalArray,
    Stmt,
    Store,
    Var,
    add,
    div,
    idx,
    mod,
    mul,
)
from accy.kernels.mma import _Builder
from accy.kernels.mma_plan import MAX_PADDING, MmaTiles, along_k, copy_layout
from accy.kernels.mma_plan import plan as mma_plan
from accy.kernels.mma_ptx import CP_COMMIT, CP_WAIT, cp_async, tf32_registers
from accy.kernels.wgmma import LD_V4, LD_V4_IF, MIN_FILL, by_tail, clamped
from accy.kernels.wgmma_ptx import PROXY, WAIT0, descriptor_bits, tstep
from accy.plans import FusionGroup, KernelOutline, ScheduleKind
from accy.target import WGMMA_TF32, TargetProfile

WARPGROUPS = 4  # of 64 rows each: 256-row tiles
BN, BK = 128, 16
STAGES = {"tf32": 4, "3xtf32": 3}  # a 3xtf32 stage holds the small parts too
TILES = MmaTiles(64 * WARPGROUPS, BN, BK, 4 * WARPGROUPS, 1, swizzle=1, loads="scalar")
CORE = 128  # bytes of a core matrix (8 rows of 16 bytes); B's descriptor's leading offset
SBO = BK // 4 * CORE  # bytes between N-adjacent core matrices
TILE_WORDS = BN * BK  # of one B tile (big or small parts)
MIN_K = 128  # as wgmma-f16: the pipeline's fill and drain and the stores need some K
COPIES = TILE_WORDS // TILES.threads  # 4-byte copies a work-item makes a step


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


class _WgmmaTf32(_Builder):
    def stage_words(self) -> int:
        return TILE_WORDS * (2 if self.split["b"] else 1)

    def stage_buffers(self) -> list[tuple[str, int, int]]:
        half = STAGES[self.policy] * self.stage_words() // 2  # the B stages, two buffers
        return [("b_tile", 0, half), ("b_tile", half, half)]

    def build(self) -> Kernel:
        c = self.c
        groups, _, g, tt, wm, wn, m0, n0 = self.place()
        stages = STAGES[self.policy]
        self.body.append(LocalArray("b_tile", DType.f32, stages * self.stage_words(), 128))
        self.acc = [f"acc_0_{j}_{r}" for j in range(BN // 8) for r in range(4)]
        for name in self.acc:
            self.let(name, Lit(0.0, DType.f32), DType.f32, mutable=True)
        self.raw = {s: [[f"a{s}{h}_{r}" for r in range(4)] for h in (0, 1)] for s in "EO"}
        for name in (n for s in "EO" for row in self.raw[s] for n in row):
            self.let(name, Lit(0, DType.i32), DType.i32, mutable=True)
        rows = [self.let(f"a_row{h}", clamped(add(m0, add(wm, add(g, idx(8 * h)))),
                                              c.m.size - 1, c.m.size % TILES.bm != 0))
                for h in (0, 1)]
        self.a_at = [self.let(f"a_at{h}", Bin("+", Cast(INDEX, Var(self.arg["x"])), mul(
            add(self.bases["x"], add(mul(r, idx(c.m.x)), mul(tt, idx(4)))), idx(4))))
            for h, r in enumerate(rows)]
        # B: this work-item's words of a step, fixed over K; consecutive work-items take
        # consecutive N (B along N) or K (B along K) of the operand
        self.copies = []
        for i in range(COPIES):
            e = add(Var("tid"), idx(i * TILES.threads))
            if along_k(c, "y"):
                k, n = mod(e, BK), div(e, BK)
            else:  # 8 N of 4 K a warp: its local writes in 32 distinct banks
                k = add(mul(mod(div(e, 8), 4), idx(4)), div(e, TILES.threads))
                n = add(mod(e, 8), mul(mod(div(e, 32), BN // 8), idx(8)))
            kk, nn = self.let(f"y_k{i}", k), self.let(f"y_n{i}", n)
            self.copies.append((kk, self.let(f"y_gn{i}", clamped(
                add(n0, nn), c.n.size - 1, c.n.size % BN != 0)),
                                self.let(f"y_w{i}", word(kk, nn))))
        steps = -(-c.k.size // BK)
        commit = InlineAsm(CP_COMMIT, (), (), True, ("memory",))
        for s in range(stages - 1):
            self.body += self.copy(idx(s), idx(s), s * BK + BK > c.k.size) if s < steps else []
            self.body.append(commit)
        self.body += self.load_a("E", idx(0), BK > c.k.size)
        kt = Var("kt")
        loop = self.step("E", "O", kt, steps, 0)
        loop.append(If(Bin("<", add(kt, idx(1)), idx(steps)),
                       tuple(self.step("O", "E", add(kt, idx(1)), steps, 1))))
        self.body.append(For("kt", idx(0), idx(steps), tuple(loop), step=2))
        self.stores(m0, n0, wm, wn, g, tt)
        return self.kernel(groups)

    def load_a(self, regs: str, step: Expr, tail: bool) -> list[Stmt]:
        """A's words of K step ``step`` into register set ``regs``: one 16-byte load per row
        (zeros outside the operand; ``tail``: K ends inside the step)."""
        c, out = self.c, []
        k = mul(step, idx(BK))
        k_ok = Bin("<", add(k, mul(Var("t"), idx(4))), idx(c.k.size)) if tail else None
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
                    value = Call("bitcast_f32", (Var(self.raw[regs][row][2 * i + h]),))
                    out += tf32_registers(name, value, self.policy if self.split["a"]
                                          else "tf32", self.big_cvt)
                    names.append(name)
        big = names
        small = [f"{name}_s" for name in names]
        products = ([small] if self.split["a"] else []) + ([big] if self.split["b"] else [])
        return out, [*products, big]

    def copy(self, step: Expr, stage: Expr, tail: bool) -> list[Stmt]:
        """The 4-byte ``cp.async`` of K step ``step``'s B words into stage ``stage``
        (``tail``: K ends inside the step)."""
        c, out = self.c, []
        for k, n, w in self.copies:
            kg = add(mul(step, idx(BK)), k)
            at = add(self.bases["y"], add(mul(kg, idx(c.k.y)), mul(n, idx(c.n.y))))
            dst = Cast(DType.i32, Cast(INDEX, Bin("+", Var("b_tile"), add(
                mul(stage, idx(self.stage_words())), w))))
            guard = Bin("<", kg, idx(c.k.size)) if tail else None
            out.append(cp_async(dst, self.arg["y"], at, 4, 4, guard))
        return out

    def round_b(self, stage: Var, n: int) -> list[Stmt]:
        """This work-item's words of the stage rounded once they landed: the big part (or
        ``tf32``'s rounding) in place, the small part into the tile beside it."""
        out: list[Stmt] = []
        for i, (_, _, w) in enumerate(self.copies):
            at = add(mul(stage, idx(self.stage_words())), w)
            name = f"r{n}_{i}"
            policy = "3xtf32" if self.split["b"] else "tf32"
            out += tf32_registers(name, Load("b_tile", at), policy, self.big_cvt)
            out.append(Store("b_tile", at, Call("bitcast_f32", (Var(name),))))
            if self.split["b"]:
                out.append(Store("b_tile", add(at, idx(TILE_WORDS)),
                                 Call("bitcast_f32", (Var(f"{name}_s"),))))
        return out

    def step(self, regs: str, other: str, kt: Expr, steps: int, n: int) -> list[Stmt]:
        """K step ``kt`` from A register set ``regs``, loading step ``kt + 1``'s into
        ``other`` first (``n``: the step's place in the loop body, naming its variables)."""
        stages = STAGES[self.policy]
        out = by_tail(add(kt, idx(1)), self.c.k.size, BK,
                      lambda tail: self.load_a(other, add(kt, idx(1)), tail))
        frags, products = self.fragments(regs, n)
        out += frags
        stage = Var(f"stage{n}")
        out.append(Let(stage.name, INDEX, mod(kt, stages)))
        out.append(InlineAsm(CP_WAIT.format(stages - 2), (), (), True, ("memory",)))
        out += self.round_b(stage, n)
        out += [InlineAsm(PROXY, (), (), True, ("memory",)), Barrier()]
        addr = Cast(DType.i32, Cast(INDEX, Bin("+", Var("b_tile"),
                                                mul(stage, idx(self.stage_words())))))
        base = Bin("|", Cast(INDEX, Bin(">>", Bin("&", addr, Lit(0x3FFFF, DType.i32)),
                                        Lit(4, DType.i32))),
                   Lit(descriptor_bits(CORE, SBO), INDEX))
        out.append(Let(f"bdesc{n}", INDEX, base))
        small = Bin("+", Var(f"bdesc{n}"), Lit(TILE_WORDS * 4 >> 4, INDEX))
        # B's descriptor per product: big, except where A's big part meets B's small one
        descs = [Var(f"bdesc{n}")] * len(products)
        if self.split["b"]:
            descs[len(products) - 2] = small
        acc = tuple(("+f", name) for name in self.acc)
        a = tuple(("r", Var(name)) for names in products for name in names)
        ops = ", ".join(f"%{i}" for i in range(len(acc) + len(a) + len(descs)))
        out.append(InlineAsm(f"{tstep(BN, BK // 8, len(products))} {ops}", acc,
                             (*a, *(("l", d) for d in descs)), True, ("memory",)))
        nxt = add(kt, idx(stages - 1))
        out += by_tail(nxt, self.c.k.size, BK, lambda tail: self.copy(nxt, mod(nxt, stages), tail))
        out.append(InlineAsm(CP_COMMIT, (), (), True, ("memory",)))
        held = ", ".join(f"%{i}" for i in range(len(acc) + len(a)))
        out.append(InlineAsm(f"{WAIT0} {held}", acc, a, True, ("memory",)))
        return out


def plan(group: FusionGroup, target: TargetProfile) -> Contraction | str:
    """The contraction of a group ``wgmma-tf32`` / ``wgmma-3xtf32`` take, or why not."""
    if WGMMA_TF32 not in target.tensor_cores:
        return "the target's probe found no register-A TF32 wgmma (TargetProfile.tensor_cores)"
    found = mma_plan(group, target)
    if isinstance(found, str):
        return found
    c, _ = found
    if c.dtype is not DType.f32:
        return f"dtype {c.dtype.value}: wgmma-tf32 takes f32 products"
    if not (along_k(c, "x") and copy_layout(c, "x", 4)[1]):
        return "wgmma-tf32 needs A stored along K in whole 16-byte vectors"
    if TILES.threads > target.max_work_group_size or \
            STAGES["3xtf32"] * 2 * TILE_WORDS * 4 > target.local_mem_bytes:
        return f"a work-group of {TILES.threads} work-items and 48 KiB of local memory"
    if c.k.size < MIN_K:
        return f"K = {c.k.size} is below {MIN_K}: mma's smaller tiles are faster"
    if padded(c, TILES.bm, TILES.bn) > MAX_PADDING * c.m.size * c.n.size:
        return f"{c.m.size}x{c.n.size} pads {TILES.bm}x{TILES.bn} tiles by over {MAX_PADDING}"
    tiles = tile_groups(c, TILES.bm, TILES.bn)
    if tiles < MIN_FILL * target.compute_units:
        return (f"{tiles} tiles of {TILES.bm}x{TILES.bn} for {target.compute_units} compute "
                "units: mma's smaller tiles are faster")
    return c


def build(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
          target: TargetProfile, policy: str) -> tuple[Kernel, ...]:
    """The TF32 wgmma kernel of an accepted group under ``policy``."""
    c = plan(group, target)
    if isinstance(c, str):
        raise ValueError(f"the wgmma-tf32 generator cannot take this group: {c}")
    einsum, _ = analyse(group)  # type: ignore[misc]  (plan accepted it)
    return (_WgmmaTf32(group, outline, kind, einsum, c, TILES, policy, target).build(),)


for _policy in STAGES:
    register_generator(Generator(
        f"wgmma-{_policy}",
        f"f32 matrix products (A along K) on Hopper's TF32 wgmma with A in registers under "
        f"kernelization{{precision={_policy}}} (deferred PTX built for sm_90a), on targets "
        "whose probe ran TF32 wgmma",
        lambda group, target: not isinstance(plan(group, target), str),
        lambda group, outline, kind, target, p=_policy: build(group, outline, kind, target, p),
        precisions=frozenset({_policy}),
    ))
