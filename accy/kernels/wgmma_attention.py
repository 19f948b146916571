"""wgmma-attention-f16: f16 attention as one kernel on Hopper's warpgroup tensor-core
instructions, A from registers (:mod:`accy.kernels.wgmma_ptx`, as ``wgmma-f16``).

Tried before ``mma-attention-f16`` where the target's probe ran a register-A ``wgmma``
(``WGMMA_F16``) and ``mma-attention-f16`` takes the group (:func:`plan`). It is that kernel
(:mod:`accy.kernels.attention_mma`: a key tile's scores and probabilities in registers, the
online softmax, ``cp.async`` stages) with one warpgroup (4 warps of 16 queries: wgmma's 64
rows) a work-group and its two products on wgmma: ``S = Q Kᵀ`` as one K step of ``d / 16``
wgmma m64n``bk``k16, A the query fragments (``mma.sync``'s, held all along), B the K tile as
K-major core matrices (8 keys x 16 bytes of features, feature-adjacent ones 128 bytes apart);
``O += P V`` as ``bk / 16`` wgmma m64n``dv``k16, A the probabilities packed as for
``mma.sync``, B the V tile as MN-major core matrices (8 keys x 16 bytes of value features). A
warp's accumulators of either are ``mma.sync``'s C fragments of its 16 rows, so the softmax,
the rescale and the stores are ``mma-attention-f16``'s. The tiles are unpadded (the
descriptors address whole core matrices) and each product is waited for before its
accumulators are read.
"""

from __future__ import annotations

from accy.kernels.attention_mma import _Builder
from accy.kernels.attention_mma_plan import KEY_TILES, Tiles
from accy.kernels.attention_mma_plan import plan as mma_plan
from accy.kernels.attention_plan import Attention
from accy.kernels.generators import Generator, register_generator
from accy.kernels.ir import Expr, Kernel, Stmt, Var, add, div, idx, mod, mul
from accy.kernels.wgmma import CORE, PROXY_FENCE, descriptor, issue, wait
from accy.plans import FusionGroup, KernelOutline, ScheduleKind
from accy.target import WGMMA_F16, TargetProfile

WARPS = 4  # one warpgroup: 64 queries a work-group


class _Wgmma(_Builder):
    TILE_ALIGN = 128
    PROXY = (PROXY_FENCE,)

    def local_rows(self) -> dict[str, int]:
        return {"k": self.a.d // 2, "v": self.a.dv // 2}  # unpadded: whole core matrices

    def lane_bases(self, body: list[Stmt], lane: Expr, g: Expr, tt: Expr, col: Expr) -> None:
        pass  # the tiles are read by descriptor

    def tile_word(self, side: str, key: Expr, c: Expr) -> Expr:
        """K: key ``key``'s features ``c ..`` in K-major core matrices (rows of 8 keys,
        features along the 16 bytes; key blocks ``d / 8`` core matrices apart); V: MN-major
        (value features along the 16 bytes; feature blocks ``bk / 8`` core matrices apart)."""
        in_block = mul(mod(key, 8), idx(16))
        if side == "k":
            byte = add(mul(div(key, 8), idx(self.a.d // 8 * CORE)),
                       add(mul(div(c, 8), idx(CORE)), in_block))
        else:
            byte = add(mul(div(c, 8), idx(self.t.bk // 8 * CORE)),
                       add(mul(div(key, 8), idx(CORE)), in_block))
        return div(byte, 4)

    def desc(self, out: list[Stmt], side: str, cur: Expr, sbo: int) -> Var:
        return self.let(out, f"{side}desc", descriptor(
            f"{side}_tile", mul(cur, idx(self.sizes[side])), sbo))

    def score_products(self, cur: Expr) -> list[Stmt]:
        a, t, out = self.a, self.t, []
        self.zero_scores(out)
        acc = [f"fa_s0_{j}_{r}" for j in range(t.bk // 8) for r in range(4)]
        regs = [f"fa_q0_{kk}_{r}" for kk in range(a.d // 16) for r in range(4)]
        desc = self.desc(out, "k", cur, a.d // 8 * CORE)
        return out + issue(t.bk, a.d // 16, 0, acc, regs, desc) + [wait(acc, regs)]

    def value_products(self, cur: Expr, p: dict) -> list[Stmt]:
        a, t, out = self.a, self.t, []
        regs = [r for kk in range(t.bk // 16) for r in self.p_registers(out, p, kk)[0]]
        acc = [f"fa_o0_{n}_{r}" for n in range(a.dv // 8) for r in range(4)]
        desc = self.desc(out, "v", cur, t.bk // 8 * CORE)
        return out + issue(a.dv, t.bk // 16, 1, acc, regs, desc) + [wait(acc, regs)]


def plan(group: FusionGroup, target: TargetProfile) -> tuple[Attention, Tiles] | str:
    """The attention and tiles of a group ``wgmma-attention-f16`` takes, or why not."""
    if WGMMA_F16 not in target.tensor_cores:
        return "the target's probe found no register-A wgmma (TargetProfile.tensor_cores)"
    found = mma_plan(group, target, "f16")
    if isinstance(found, str):
        return found
    a, t = found
    if WARPS * 32 > target.max_work_group_size:
        return f"work-groups of {WARPS * 32} work-items exceed the target"

    def stage_bytes(bk: int) -> int:
        return 2 * bk * (a.d + a.dv)

    fitting = [bk for bk in KEY_TILES["f16"] if 2 * stage_bytes(bk) <= target.local_mem_bytes]
    if not fitting:
        return "two key tiles do not fit local memory"
    bk = fitting[0]
    stages = 3 if 3 * stage_bytes(bk) <= target.local_mem_bytes else 2
    return a, Tiles(bk, WARPS, t.k_lanes, t.v_lanes, stages, 1)


def build(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
          target: TargetProfile) -> tuple[Kernel, ...]:
    found = plan(group, target)
    if isinstance(found, str):
        raise ValueError(f"the wgmma attention generator cannot take this group: {found}")
    a, t = found
    return (_Wgmma(group, outline, a, t, "f16", target).build(kind),)


register_generator(Generator(
    "wgmma-attention-f16",
    "f16 attention as one kernel on Hopper's wgmma (A from registers: the queries, then the "
    "probabilities), the scores in registers, on targets whose probe ran it",
    lambda group, target: not isinstance(plan(group, target), str),
    build,
))
