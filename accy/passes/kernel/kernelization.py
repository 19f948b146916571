"""kernelization: turn each outlined work item into kernels (accy.kernels.ir)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Stage
from accy.kernels.generators import GENERATORS, choose, load_built_ins
from accy.kernels.ir import Kernel
from accy.passes.base import Pass, option
from accy.passes.registry import register
from accy.plans import FusionGroup, KernelOutline, MemorySpacePlan, ScheduleKind
from accy.target import PRECISIONS, TargetProfile, resolve_precision


@register
@dataclass(frozen=True)
class Kernelization(Pass):
    """Build each work item's kernels with the best generator that takes its group."""

    name = "kernelization"
    stage = Stage.kernel
    preserves = frozenset({"uses", "liveness", "slot-map"})

    disable: tuple[str, ...] = option((), "kernel generators not to use (the loop nest stays)")
    precision: Literal["f32", "ieee", "tf32", "3xtf32"] = option(
        "f32", "f32 contraction precision: f32 (default: f32 accuracy, 3xtf32 where the target "
        "recorded TF32 tensor cores, else ieee), ieee (f32 products), tf32 (TF32 operands on "
        "tensor cores, opt-in), 3xtf32 (split TF32, ~f32 accuracy); tensor cores only where "
        "the target recorded them", choices=PRECISIONS)
    reuse: bool = option(
        True, "give a work item the kernels built for an earlier one of the same local "
        "structure (local_key: the repeated blocks of a model), renamed and rebound to its "
        "slots, instead of building them again; false builds every one (the same kernels)")

    def run(self, ctx, product):
        fusion = product.require("fusion", self.name, "fusion-planning")
        schedule = product.require("schedule", self.name, "schedule-planning")
        outline = product.require("outline", self.name, "kernel-outlining-planning")
        load_built_ins()
        unknown = sorted(set(self.disable) - set(GENERATORS))
        if unknown:
            raise ValueError(f"unknown kernel generators {unknown}; known: "
                             f"{', '.join(GENERATORS)}")
        target = product.target or TargetProfile()
        precision = resolve_precision(self.precision, target)
        kernels = []
        used: dict[str, int] = {}
        built: dict[tuple, Built] = {}
        reused = 0
        for item, out in zip(schedule.items, outline.outlines, strict=True):
            group = fusion.groups[item.group]
            key = local_key(group, out, item.kind)
            earlier = built.get(key) if self.reuse else None
            made = None if earlier is None else earlier.rebind(out)
            if made is None:
                gen = choose(group, target, frozenset(self.disable), precision)
                made, name = gen.build(group, out, item.kind, target), gen.name
                built.setdefault(key, Built(name, out, made))
            else:
                name, reused = earlier.generator, reused + 1
            used[name] = used.get(name, 0) + 1
            kernels.extend(made)
        for name, count in used.items():
            ctx.stat(f"generator {name}", count)
        ctx.stat("work items reusing an earlier one's kernels", reused)
        if product.spaces is not None:
            kernels = [with_spaces(k, product.spaces) for k in kernels]
        return product.replace(kernels=tuple(kernels))


@dataclass(frozen=True)
class Built:
    """The kernels a generator built for one work item, kept to be reused by work items of
    the same :func:`local_key`."""

    generator: str
    outline: KernelOutline
    kernels: tuple[Kernel, ...]

    def rebind(self, out: KernelOutline) -> tuple[Kernel, ...] | None:
        """These kernels for the work item of ``out``: its entry name, work item and slots
        (the key equated the slots' pattern), or None where a kernel's entry or slots do not
        follow the outline (built afresh then)."""
        old = self.outline
        slots = dict(zip(old.input_slots + old.output_slots,
                         out.input_slots + out.output_slots, strict=True))
        made = []
        for k in self.kernels:
            if not k.entry.startswith(old.entry) or any(
                    a.slot not in slots for a in k.args if not a.is_scratch):
                return None
            args = tuple(a if a.is_scratch else dataclasses.replace(a, slot=slots[a.slot])
                         for a in k.args)
            made.append(dataclasses.replace(k, entry=out.entry + k.entry[len(old.entry):],
                                            work_item=out.work_item, args=args))
        return tuple(made)


def local_key(group: FusionGroup, out: KernelOutline, kind: ScheduleKind) -> tuple:
    """What a generator's kernels for ``group`` depend on, with every name and number that
    places the group in its program left out: the group's nodes with operands named by
    position (inputs by their place in ``group.inputs``), the inputs' types (and the op
    and attributes of inputs that are not parameters: constants are inlined by value), the
    launch asked for, and which slots are the same buffer. Work items of equal keys get the
    same kernels up to entry names, work items and slots (the blocks of a stacked model)."""
    place: dict[Node, object] = {n: ("in", i) for i, n in enumerate(group.inputs)}
    inputs = tuple((n.type,) if n.op is Op.PARAM else (n.op, n.type, n.attrs)
                   for n in group.inputs)
    nodes = []
    for j, n in enumerate(group.nodes):
        nodes.append((n.op, n.type, n.attrs, tuple(place.get(s, s) for s in n.srcs)))
        place[n] = j
    slots = out.input_slots + out.output_slots
    first = {}
    return (kind, group.kind, group.boundary, inputs, tuple(nodes),
            tuple(place[n] for n in group.outputs), out.geometry, out.thread_blocks,
            len(out.input_slots), tuple(first.setdefault(s, i) for i, s in enumerate(slots)))


def with_spaces(kernel: Kernel, spaces: MemorySpacePlan) -> Kernel:
    """``kernel`` with each input argument in its slot's memory space (outputs, scratch and
    ``kernel.global_args`` stay global)."""
    args = tuple(a if a.is_output or a.is_scratch or a.name in kernel.global_args else
                 dataclasses.replace(a, space=spaces.space_of(a.slot)) for a in kernel.args)
    return kernel if args == kernel.args else dataclasses.replace(kernel, args=args)
