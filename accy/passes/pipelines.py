"""Named pipelines: one per stage, and ``accy-default`` running all six."""

from __future__ import annotations

from dataclasses import dataclass

from accy.ir.program import Stage


@dataclass(frozen=True)
class NamedPipeline:
    name: str
    stage: Stage | None  # None for pipelines spanning stages
    text: str
    description: str


def _named(*items: NamedPipeline) -> dict[str, NamedPipeline]:
    out: dict[str, NamedPipeline] = {}
    for p in items:
        if p.name in out:
            raise ValueError(f"pipeline {p.name!r} is registered twice")
        out[p.name] = p
    return out


PIPELINES = _named(
    NamedPipeline("accy-contract", Stage.contract, "constant-fold,canonicalize",
                  "canonicalization: constant folding, then egglog's canonical rules"),
    NamedPipeline("accy-tensor", Stage.tensor,
                  "saturate,conv-lowering,shape-layout-propagation,dtype-legalization,"
                  "activation-lowering,einsum-lowering,contraction-padding,indexing-lowering,"
                  "loss-lowering",
                  "equality saturation, the lowering of convolutions and pools, movement "
                  "folding, dtype legalization and the lowering of activations, einsums "
                  "(unaligned summed rows padded), indexing and losses"),
    NamedPipeline("accy-dispatch", Stage.dispatch, "fusion-planning,schedule-planning",
                  "fusion and schedule planning"),
    NamedPipeline("accy-memory", Stage.memory,
                  "bufferization-planning,memory-space-planning,layout-planning",
                  "buffer slots, memory spaces and layouts"),
    NamedPipeline("accy-kernel", Stage.kernel, "kernel-outlining-planning,kernelization",
                  "outlined kernels"),
    NamedPipeline("accy-target", Stage.target, "backend-legalization",
                  "legality against the target profile"),
    NamedPipeline("accy-default", None,
                  "accy-contract,accy-tensor,accy-dispatch,accy-memory,accy-kernel,accy-target",
                  "all six stages"),
)
