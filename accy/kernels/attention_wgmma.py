"""wgmma-attention-f16: f16 attention as one kernel with both products on Hopper's ``wgmma``.

The kernel is ``mma-attention-f16``'s (:class:`accy.kernels.attention_mma._Builder`: the
queries' fragments in registers, key tiles copied by ``cp.async`` into ``stages`` buffers, the
online softmax on the scores' registers, ``O / l`` through the epilogue) with its two products
each one register-A ``wgmma`` step (marker ``RSTEP`` of :mod:`accy.kernels.wgmma_ptx`) per key
tile instead of ``mma.sync`` and ``ldmatrix``:

- a warpgroup (4 warps, one m16 fragment row each: 64 queries; a work-group holds one or two,
  :data:`accy.kernels.attention_mma_plan.WG_FORMS`) computes ``S = Q Kᵀ`` as ``d / 16`` wgmma
  ``m64n{bk}k16``, A the query fragments (``mma.sync``'s m16n8k16 A layout, which wgmma's
  register A is), B the K tile: K-major core matrices (8 keys of 8 features, 128 bytes;
  feature-adjacent ones 128 bytes apart, key-adjacent ones ``d / 8 * 128``), trans-b 0. Its
  accumulators are per warp exactly the m16n8 C fragments the softmax reads (``fa_s0_{j}_{r}``);
- ``O += P V`` as ``bk / 16`` wgmma ``m64n{dv}k16``, A the probabilities packed to f16 pairs
  as ``mma-attention-f16`` packs them, B the V tile: MN-major core matrices (8 keys of 8 value
  features; key-adjacent ones 128 bytes apart, value-adjacent ones ``bk / 8 * 128``), trans-b 1.

Each stage of the one local array ``b_tile`` holds K's tile, then V's. Each ``cp.async``
copies 16 bytes of a K or V row, one core-matrix row; once a tile's copies landed each
work-item fences them to the asynchronous proxy wgmma reads through, before the barrier.
Without the ``ldmatrix`` fragments and with one fragment row a warp, ptxas gives the kernel
about half the registers of ``mma-attention-f16``'s two-row form (papers/kernels.md,
"Twenty-second session"), so a compute unit holds twice the warps. The scores are zeroed
before each tile's first step (the marker's accumulate flag holds for all its steps).

With three buffers and key tiles of 64 keys or more the loop runs one tile ahead (``lead``,
as FlashAttention-3 overlaps within a warpgroup): tile 0's scores come before the loop, and
iteration ``kt`` issues tile ``kt + 1``'s scores (``fa_n``) before its softmax of tile ``kt``
and waits for them after its ``P V``. ptxas moves that issue past the softmax, next to the
``P V``, the new scores taking the old ones' registers (``experiments/kernel_asm.py --sass``
shows it), so the two products run together between softmaxes. With :data:`PIN` a fence
after the issue (marker ``HOLD``: ``fence.acq_rel.cta``, which ptxas moves no wgmma across)
keeps it ahead of the softmax, the two tiles' scores in registers together (ptxas for the bench
shape at 64 features: 150 registers against 124; with ``tma-attention-f16``'s queries in local
memory, ``QLOCAL``, 128). FlashAttention-3's order
held by the waits (the softmax of tile ``kt + 1`` while tile ``kt``'s ``P V`` runs) was built
and timed slower (papers/kernels.md, "Fifty-first session").

Taken where ``tma-attention-f16`` and ``mma-attention-f16`` are not (they are tried first, and
``kernelization{disable=tma-attention-f16,mma-attention-f16}`` picks this one), on targets
whose probe ran wgmma (``WGMMA_F16``); the runtime builds the expanded PTX for ``sm_90a``. It
comes after them because both timed faster at every sequence length (papers/kernels.md,
"Twenty-third session", "Fiftieth session"). ``tma-attention-f16``
(:mod:`accy.kernels.attention_tma`) is this kernel with its tiles copied by TMA.
"""

from __future__ import annotations

from collections.abc import Callable

from accy.ir.types import DType
from accy.kernels.attention_mma import F32, ZERO, _Builder
from accy.kernels.attention_mma_plan import Tiles, plan
from accy.kernels.attention_plan import Attention
from accy.kernels.ir import (
    INDEX,
    Assign,
    Bin,
    Cast,
    Expr,
    InlineAsm,
    Kernel,
    Let,
    Lit,
    LocalArray,
    Stmt,
    Var,
    add,
    div,
    idx,
    mod,
    mul,
)
from accy.kernels.wgmma import CORE, matrix_descriptor
from accy.kernels.wgmma_ptx import HOLD, PROXY, WAIT0, descriptor_bits, rstep
from accy.plans import FusionGroup, KernelOutline, ScheduleKind
from accy.target import TargetProfile

NAME = "wgmma-attention-f16"
# a fence (marker HOLD) after the next tile's scores are issued, where ``lead``: ptxas then
# keeps that issue ahead of the softmax instead of moving it next to the ``P V`` (more
# registers: the two tiles' scores live together). Off until timed on a device
# (papers/kernels.md, "Fifty-fifth session")
PIN = False


def leads(stages: int, bk: int) -> bool:
    """Whether the loop runs one tile ahead (``lead``: the next tile's scores behind this
    one's softmax): where a third buffer holds that tile and a tile has 64 keys or more. Its
    copies are issued one iteration ahead, and shorter iterations leave them too little time
    to land (papers/kernels.md, "Twenty-third session")."""
    return stages >= 3 and bk >= 64


class _WgBuilder(_Builder):
    """The kernel; see the module docstring."""

    v_advance = 16  # 16-byte units a k16 step of V moves on: two core matrices

    def layout(self) -> None:
        a, t = self.a, self.t
        self.sizes = {"k": t.bk * a.d // 2, "v": t.bk * a.dv // 2}  # words
        # bytes between core matrices adjacent in N: K's along its keys, V's along its
        # value features (adjacent ones along the products' K are CORE bytes apart)
        self.sbo = {"k": a.d // 8 * CORE, "v": t.bk // 8 * CORE}
        self.lead = int(leads(t.stages, t.bk))

    def local_arrays(self) -> list[Stmt]:
        """One array, ``b_tile`` as wgmma-f16's: each stage K's tile, then V's."""
        return [LocalArray("b_tile", DType.i32, self.t.stages * self.stage_words(), 16)]

    def stage_words(self) -> int:
        return self.sizes["k"] + self.sizes["v"]

    def array(self, side: str) -> str:
        return "b_tile"

    def stage_word(self, side: str, stage: Expr) -> Expr:
        first = mul(stage, idx(self.stage_words()))
        return add(first, idx(self.sizes["k"])) if side == "v" else first

    def lanes(self, body: list[Stmt], lane: Var, g: Var, tt: Var, col: Expr) -> None:
        """No fragment loads from local memory: wgmma reads the tiles by descriptor."""

    def chunk_word(self, side: str, key: Expr, c: Expr) -> Expr:
        """Core-matrix row ``key % 8`` (16 bytes) of K's core matrix (key / 8, c / 8) or V's
        (c / 8, key / 8), in words."""
        row = mul(mod(key, 8), idx(16))
        if side == "k":
            at = add(mul(div(key, 8), idx(self.sbo["k"])), mul(div(c, 8), idx(CORE)))
        else:
            at = add(mul(div(c, 8), idx(self.sbo["v"])), mul(div(key, 8), idx(CORE)))
        return div(add(at, row), 4)

    def landed(self) -> list[Stmt]:
        return [InlineAsm(PROXY, (), (), True, ("memory",))]

    def descriptor(self, out: list[Stmt], side: str, cur: Expr) -> Var:
        """The wgmma descriptor of buffer ``cur`` of ``side``'s tile."""
        address = Cast(DType.i32, Cast(INDEX, Bin("+", Var("b_tile"),
                                                  self.stage_word(side, cur))))
        return self.let(out, f"{side}desc",
                        matrix_descriptor(address, descriptor_bits(CORE, self.sbo[side])))

    def wgmma(self, out: list[Stmt], n: int, trans: int, acc: list[str],
              parts: list[tuple[list[str], Var, int, int]]) -> InlineAsm:
        """Appends, for each (A registers, B's descriptor, steps, advance) of ``parts``,
        ``steps`` wgmma ``m64n{n}k16`` into accumulators ``acc``, B's descriptor ``advance``
        16-byte units on a step; returns their wait (naming the registers they read and
        write)."""
        accs = tuple(("+f", name) for name in acc)
        held: list[tuple[str, Expr]] = []
        for a, desc, steps, advance in parts:
            ins = (*(("r", Var(name)) for name in a), ("l", desc), ("r", Lit(1, DType.i32)))
            ops = ", ".join(f"%{i}" for i in range(len(accs) + len(ins)))
            out.append(InlineAsm(f"{rstep(n, steps, trans, advance)} {ops}", accs, ins, True,
                                 ("memory",)))
            held += ins[:len(a)]
        names = ", ".join(f"%{i}" for i in range(len(accs) + len(held)))
        return InlineAsm(f"{WAIT0} {names}", accs, tuple(held), True, ("memory",))

    def score_tile(self, out: list[Stmt], prefix: str, stage: Expr) -> InlineAsm:
        """Appends ``S = Q Kᵀ`` of the K tile in buffer ``stage`` into ``{prefix}0_{j}_{r}``
        (declared zero); returns its wait."""
        a, t = self.a, self.t
        names = [f"{prefix}0_{j}_{r}" for j in range(t.bk // 8) for r in range(4)]
        out += [Let(name, F32, ZERO, True) for name in names]
        return self.wgmma(out, t.bk, 0, names, [(
            [f"fa_q0_{kk}_{r}" for kk in range(a.d // 16) for r in range(4)],
            self.descriptor(out, "k", stage), a.d // 16, 16)])

    def lead_in(self) -> list[Stmt]:
        """Tile 0's scores, before the loop."""
        out: list[Stmt] = []
        out.append(self.score_tile(out, "fa_s", idx(0)))
        return out

    def score_products(self, cur: Expr) -> list[Stmt]:
        """Where ``lead``: the next tile's scores into ``fa_n``, in flight through this tile's
        softmax (on the last tile they read a stale buffer and are dropped); else this
        tile's."""
        out: list[Stmt] = []
        if not self.lead:
            out.append(self.score_tile(out, "fa_s", cur))
            return out
        self.pending = self.score_tile(out, "fa_n", mod(add(Var("kt"), idx(1)), self.t.stages))
        if PIN:
            out.append(InlineAsm(HOLD, (), (), True, ("memory",)))
        return out

    def value_products(self, cur: Expr, p: dict) -> list[Stmt]:
        """``O += P V``; where ``lead``, then the next tile's scores become this loop's."""
        a, t, out = self.a, self.t, []
        pa = [name for kk in range(t.bk // 16) for name in self.p_operands(out, p, kk)[0]]
        out.append(self.wgmma(out, a.dv, 1,
                              [f"fa_o0_{n}_{r}" for n in range(a.dv // 8) for r in range(4)],
                              [(pa, self.descriptor(out, "v", cur), t.bk // 16, self.v_advance)]))
        if self.lead:
            out.append(self.pending)
            out += [Assign(f"fa_s0_{j}_{r}", Var(f"fa_n0_{j}_{r}"))
                    for j in range(t.bk // 8) for r in range(4)]
        return out


def register(name: str, summary: str,
             found: Callable[[FusionGroup, TargetProfile], tuple[Attention, Tiles] | str],
             builder: type[_WgBuilder]) -> None:
    """Registers the f16 attention generator ``name``: ``builder``'s kernel of the attention
    and tiles ``found`` gives a group (or why it cannot take it)."""
    from accy.kernels.generators import Generator, register_generator

    def build(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
              target: TargetProfile) -> tuple[Kernel, ...]:
        got = found(group, target)
        if isinstance(got, str):
            raise ValueError(f"the {name} generator cannot take this group: {got}")
        a, t = got
        return (builder(group, outline, a, t, "f16", target).build(kind),)

    register_generator(Generator(
        name, summary, lambda group, target: not isinstance(found(group, target), str), build))


register(NAME, "f16 attention as one kernel on Hopper's wgmma (register A: the query fragments, "
         "then the probabilities; K and V tiles by descriptor), the scores in registers; after "
         "mma-attention-f16 (kernelization{disable=tma-attention-f16,mma-attention-f16} takes "
         "it)", lambda group, target: plan(group, target, "f16", wgmma=True), _WgBuilder)
