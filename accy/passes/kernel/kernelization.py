"""kernelization: turn each outlined work item into a kernel (accy.kernel_ir)."""

from __future__ import annotations

from dataclasses import dataclass

from accy.errors import AccyError
from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Stage
from accy.kernel_ir import Compute, Const, Kernel, KernelArg, Load, Stmt, Store
from accy.passes.base import Pass
from accy.passes.memory.layout_planning import row_major
from accy.passes.registry import register
from accy.plans import FusionGroup, KernelOutline, ScheduleKind, is_inlined


def broadcast_strides(shape: tuple[int, ...], domain: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides that read a row-major ``shape`` broadcast over ``domain``."""
    own = row_major(shape)
    lead = len(domain) - len(shape)
    return tuple(
        0 if axis < lead or shape[axis - lead] == 1 else own[axis - lead]
        for axis in range(len(domain))
    )


def flat_kernel(group: FusionGroup, outline: KernelOutline, item_kind: ScheduleKind) -> Kernel:
    domain = group.domain
    args: list[KernelArg] = []
    var: dict[Node, str] = {}
    body: list[Stmt] = []
    slots = iter(outline.input_slots)
    for n in group.inputs:
        name = f"v{len(var)}"
        var[n] = name
        if is_inlined(n):
            body.append(Const(name, n.value.reshape(-1)[0].item(), n.type.dtype))
            continue
        args.append(KernelArg(f"in{len(args)}", n.type.dtype, False, next(slots)))
        body.append(Load(name, len(args) - 1, 0, broadcast_strides(n.type.shape, domain)))
    for n in group.nodes:
        name = f"v{len(var)}"
        var[n] = name
        operand = n.srcs[1] if n.op is Op.SELECT else n.srcs[0]
        body.append(Compute(name, n.op, tuple(var[s] for s in n.srcs), n.type.dtype,
                            operand.type.dtype))
    for i, (n, slot) in enumerate(zip(group.outputs, outline.output_slots, strict=True)):
        args.append(KernelArg(f"out{i}", n.type.dtype, True, slot))
        body.append(Store(len(args) - 1, var[n]))
    return Kernel(outline.entry, outline.work_item, item_kind, domain, tuple(args), tuple(body),
                  outline.geometry)


@register
@dataclass(frozen=True)
class Kernelization(Pass):
    """Build each kernel's body: affine loads, elementwise math, stores."""

    name = "kernelization"
    stage = Stage.kernel
    preserves = frozenset({"uses", "liveness", "slot-map"})

    def run(self, ctx, product):
        fusion = product.require("fusion", self.name, "fusion-planning")
        schedule = product.require("schedule", self.name, "schedule-planning")
        outline = product.require("outline", self.name, "kernel-outlining-planning")
        kernels = []
        for item, out in zip(schedule.items, outline.outlines, strict=True):
            group = fusion.groups[item.group]
            if item.kind is not ScheduleKind.flat:
                op = group.outputs[0].op.value
                raise AccyError(f"work item {item.id}: no kernel lowering for {op} "
                                f"({item.kind.value} schedule) yet; only elementwise ops "
                                f"reach kernels in this version")
            kernels.append(flat_kernel(group, out, item.kind))
        return product.replace(kernels=tuple(kernels))
