"""The registry of kernel generators kernelization chooses from.

A generator turns one fusion group into one or more kernels (several when it needs more than
one launch, e.g. a two-pass reduction; they share scratch arguments by name). Specialised
generators say which groups they take (``accepts``); the loop-nest generator takes every
group and is the fallback. ``kernelization{disable=NAME,...}`` switches generators off, so
their effect can be measured.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass

from accy.kernels import loopnest
from accy.kernels.ir import Kernel
from accy.plans import FusionGroup, KernelOutline, ScheduleKind
from accy.target import TargetProfile

Build = Callable[[FusionGroup, KernelOutline, ScheduleKind, TargetProfile], tuple[Kernel, ...]]


@dataclass(frozen=True)
class Generator:
    name: str
    summary: str
    accepts: Callable[[FusionGroup, TargetProfile], bool]
    build: Build
    # the precision policies (accy.target.PRECISIONS) it may be chosen under; None: every one
    # (f32 arithmetic meets each policy's bound), so only looser generators name theirs
    precisions: frozenset[str] | None = None


GENERATORS: dict[str, Generator] = {}

PRIORITY: tuple[str, ...] = (
    "vector-flat", "row-movement", "row-fused", "tree-reduction", "row-softmax",
    "mma-attention-tf32", "mma-attention-3xtf32",  # under their policy, before the work-group
    # f16 attention: wgmma with the key tiles copied by TMA (features multiples of 64), then
    # mma.sync's, then wgmma's with cp.async (slower than both: an opt-in,
    # kernelization{disable=tma-attention-f16,mma-attention-f16})
    "tma-attention-f16", "mma-attention-f16", "wgmma-attention-f16", "fused-attention",
    # f32 products under the tf32 / 3xtf32 policies: Hopper's wgmma (A along K, tiles
    # scoring above mma's: wgmma.plan_for), else mma.sync; before the f32 tiles
    "wgmma-tf32", "wgmma-3xtf32", "mma-tf32", "mma-3xtf32",
    "wgmma-f16",  # f16 products on Hopper's wgmma (A along K, B along N, tiles scoring above)
    "mma-f16",  # f16 products, on targets with f16 tensor cores and cp.async
    "tiled-contraction", "direct-conv", "indexed-gather", "indexed-scatter",
)
"""The order kernelization tries accy's specialised generators in (the first that accepts a
group builds it). Generators registered from outside come after these, in registration
order; the loop nest is the fallback. Stated here, not left to the order of imports: each
name must be registered once the modules of :data:`BUILT_IN` are loaded (:func:`ranked`
checks)."""

BUILT_IN = ("flat", "rowmove", "reduction", "rowwise", "rowfused", "attention", "attention_mma",
            "attention_wgmma", "attention_tma", "mma", "wgmma", "wgmma_tf32", "contraction",
            "indexed", "conv")
"""The modules of accy.kernels whose generators register themselves (in any order)."""


def register_generator(gen: Generator) -> Generator:
    if gen.name in GENERATORS:
        raise ValueError(f"kernel generator {gen.name!r} is already registered")
    GENERATORS[gen.name] = gen
    return gen


def ranked() -> list[Generator]:
    """The specialised generators in the order kernelization tries them: :data:`PRIORITY`,
    then those registered from outside in registration order (the loop nest left out)."""
    load_built_ins()
    missing = [name for name in PRIORITY if name not in GENERATORS]
    if missing:
        raise LookupError(f"kernel generators in PRIORITY but not registered: "
                          f"{', '.join(missing)} (registered: {', '.join(GENERATORS)})")
    rest = [g for name, g in GENERATORS.items() if name not in PRIORITY and name != "loop-nest"]
    return [GENERATORS[name] for name in PRIORITY] + rest


def choose(group: FusionGroup, target: TargetProfile, disabled: frozenset[str],
           precision: str = "ieee") -> Generator:
    """The first enabled specialised generator (in :func:`ranked` order) that accepts
    ``group`` under ``precision``, else the loop nest."""
    for gen in ranked():
        if (gen.name not in disabled
                and (gen.precisions is None or precision in gen.precisions)
                and gen.accepts(group, target)):
            return gen
    return GENERATORS["loop-nest"]


def load_built_ins() -> None:
    """Import the modules of :data:`BUILT_IN` (each registers its generators when imported),
    unless one of them is being imported right now: a program importing, say,
    ``accy.kernels.reduction`` first gets here from its import of ``flat`` before it has
    defined what ``rowfused`` takes from it. Then :func:`ranked` loads them when first asked,
    once every import has finished."""
    global _LOADED
    if _LOADED:
        return
    names = [f"accy.kernels.{m}" for m in BUILT_IN]
    if any(getattr(getattr(sys.modules.get(n), "__spec__", None), "_initializing", False)
           for n in names):
        return
    for name in names:
        importlib.import_module(name)
    _LOADED = True


_LOADED = False  # every module of BUILT_IN imported (ranked() asks once per work item)


register_generator(Generator(
    "loop-nest", "any group: one work-item per output element, loops for reductions",
    lambda group, target: True,
    lambda group, outline, kind, target: (loopnest.build(group, outline, kind),),
))
load_built_ins()
