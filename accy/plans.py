"""The plans later stages attach to a product: immutable, pointing back at program nodes.

tensor: :class:`LaunchPlan`; dispatch: :class:`FusionPlan`, :class:`SchedulePlan`; memory:
:class:`BufferPlan`, :class:`MemorySpacePlan`, :class:`LayoutPlan`; kernel:
:class:`OutlinePlan` and the kernels (:mod:`accy.kernels.ir`); target:
:class:`LegalityReport`. Fingerprints use node digests and indices, never names.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

import numpy as np

from accy.ir.memo import memoized
from accy.ir.node import Node
from accy.ir.ops import Op
from accy.target import KernelStatus, LimitExcess


def digest_of(*parts: object) -> str:
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        h.update(p.digest if isinstance(p, Node) else repr(p).encode())
        h.update(b"|")
    return h.hexdigest()


def is_inlined(node: Node) -> bool:
    """Finite single-element constants are written into kernel source, not passed in a buffer.

    Non-finite ones stay in buffers: PoCL 3.1 (LLVM 15) folds e.g. ``floor(x + NAN)`` to
    garbage at compile time, while the same value read from memory computes correctly.
    """
    if node.op is not Op.CONSTANT or node.type.size != 1:
        return False
    return not node.type.dtype.is_float or bool(np.isfinite(node.value).all())


def check_thread_blocks(option: str, value: int) -> int:
    """``value`` of a thread-blocks option, or a ValueError naming ``option``."""
    if value < 0:
        raise ValueError(f"{option} must be 0 (the generator chooses) or a positive count, "
                         f"got {value}")
    return value


@dataclass(frozen=True)
class LaunchPlan:
    """Work-groups ("thread blocks", the seed's word) the tensor stage asks of the kernels of
    some ops, applied by ``kernel-outlining-planning`` to each group whose one heavy op is that
    op: ``indexing-lowering``'s ``gather-thread-blocks`` (the gather kernel) and
    ``scatter-thread-blocks`` (the scatter-add's atomic-add kernel), ``loss-lowering``'s
    ``row-sparse-cross-entropy-thread-blocks`` (the cross-entropy row-loss kernel). N > 0
    launches N work-groups walking the elements (rows) in a grid-stride loop; 0 leaves it to
    the generator. Each pass sets its own fields and keeps the others."""

    gather: int = 0
    scatter_add: int = 0
    cross_entropy: int = 0

    def __post_init__(self) -> None:
        for name in ("gather", "scatter_add", "cross_entropy"):
            check_thread_blocks(f"thread blocks of {name}", getattr(self, name))

    def thread_blocks(self, op: Op) -> int:
        """The work-groups asked of the kernel of ``op`` (0 for ops the plan does not cover)."""
        return {Op.GATHER: self.gather, Op.SCATTER_ADD: self.scatter_add,
                Op.CROSS_ENTROPY: self.cross_entropy}.get(op, 0)

    @memoized
    def fingerprint(self) -> str:
        return digest_of(self.gather, self.scatter_add, self.cross_entropy)


class ScheduleKind(Enum):
    flat = "flat"  # one work-item per output element, elementwise
    reduction = "reduction"
    contraction = "contraction"
    indexed = "indexed"
    rowwise = "rowwise"
    movement = "movement"


def outside_inputs(nodes: Iterable[Node]) -> tuple[Node, ...]:
    """The values ``nodes`` read that none of them computes, in order of first use: a fusion
    group's inputs."""
    nodes = list(nodes)
    inside = set(nodes)
    found: dict[Node, None] = {}
    for n in nodes:
        for s in n.srcs:
            if s not in inside:
                found.setdefault(s)
    return tuple(found)


@dataclass(frozen=True)
class FusionGroup:
    """Nodes computed together in one kernel; ``outputs`` are the ones written to memory."""

    function: int
    nodes: tuple[Node, ...]  # operands before users
    outputs: tuple[Node, ...]
    inputs: tuple[Node, ...]  # values read from memory: params, constants, other groups' outputs
    kind: ScheduleKind
    boundary: str  # why the group ends at its outputs

    @property
    def domain(self) -> tuple[int, ...]:
        return self.outputs[0].type.shape

    @memoized
    def fingerprint(self) -> str:
        return digest_of(self.function, *self.nodes, "out", *self.outputs, "in", *self.inputs,
                         self.kind.value)


@dataclass(frozen=True)
class FusionPlan:
    policy: str
    groups: tuple[FusionGroup, ...]

    @memoized
    def fingerprint(self) -> str:
        return digest_of(self.policy, *(g.fingerprint() for g in self.groups))


@dataclass(frozen=True)
class WorkItem:
    """One unit of scheduled work: a fusion group over its iteration domain."""

    id: int
    function: int
    group: int
    kind: ScheduleKind
    domain: tuple[int, ...]


@dataclass(frozen=True)
class SchedulePlan:
    items: tuple[WorkItem, ...]  # in execution order

    @memoized
    def fingerprint(self) -> str:
        return digest_of(*(vars(i) for i in self.items))

    def item(self, work_item: int) -> WorkItem:
        found = self._by_id().get(work_item)
        if found is None:
            raise KeyError(work_item)
        return found

    @memoized
    def _by_id(self) -> dict[int, WorkItem]:
        """Work items by id (the first of an id), kept: legalization asks once per kernel."""
        out: dict[int, WorkItem] = {}
        for it in self.items:
            out.setdefault(it.id, it)
        return out


class SlotRole(Enum):
    input = "input"
    constant = "constant"
    output = "output"
    intermediate = "intermediate"


@dataclass(frozen=True)
class BufferSlot:
    id: int
    function: int
    role: SlotRole
    nbytes: int
    values: tuple[Node, ...]  # every value that lives in this slot over time


@dataclass(frozen=True)
class BufferPlan:
    """Buffer slots per function; intermediates share slots when their lifetimes do not overlap.

    ``allocated_bytes`` is what holding every slot at once costs (what the executable does);
    ``peak_bytes`` is the most bytes live at one point of the schedule of any function, where
    inputs and constants live throughout, an output from its write on, and an intermediate slot
    from the write of one of its values to that value's last read.
    """

    slots: tuple[BufferSlot, ...]
    peak_bytes: int
    bytes_moved: int  # bytes read plus written by every work item
    allocated_bytes: int = 0
    in_place: int = 0  # outputs written over an input of their own kernel

    def slot_of(self, function: int, node: Node) -> BufferSlot:
        for s in self.slots:
            if s.function == function and any(v is node for v in s.values):
                return s
        raise KeyError(f"no buffer slot holds {node!r}")

    @memoized
    def fingerprint(self) -> str:
        return digest_of(*((s.id, s.function, s.role.value, s.nbytes, *s.values)
                           for s in self.slots))

    def __len__(self) -> int:
        return len(self.slots)


MEMORY_SPACES = ("global", "constant")


@dataclass(frozen=True)
class SlotSpace:
    """The OpenCL address space kernels see one buffer slot in, and why."""

    slot: int
    space: str  # one of MEMORY_SPACES
    reason: str


@dataclass(frozen=True)
class MemorySpacePlan:
    """Per buffer slot its memory space: ``global`` unless a read-only slot fits ``constant``."""

    spaces: tuple[SlotSpace, ...]

    def space_of(self, slot: int) -> str:
        return self._by_slot().get(slot, "global")

    @memoized
    def _by_slot(self) -> dict[int, str]:
        """Spaces by slot (the first entry of a slot), kept: kernelization asks per argument."""
        out: dict[int, str] = {}
        for s in self.spaces:
            out.setdefault(s.slot, s.space)
        return out

    @memoized
    def fingerprint(self) -> str:
        return digest_of(*((s.slot, s.space) for s in self.spaces))

    def __len__(self) -> int:
        return len(self.spaces)


@dataclass(frozen=True)
class SlotLayout:
    slot: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements, row-major
    alignment: int  # bytes
    vector_width: int = 1  # widest of 1, 2, 4, 8, 16 the innermost extent and alignment allow


@dataclass(frozen=True)
class LayoutPlan:
    layouts: tuple[SlotLayout, ...]

    @memoized
    def fingerprint(self) -> str:
        return digest_of(*self.layouts)


@dataclass(frozen=True)
class LaunchGeometry:
    global_size: tuple[int, ...]
    local_size: tuple[int, ...]


@dataclass(frozen=True)
class KernelOutline:
    """Where a work item becomes a kernel: its entry name, arguments (slots) and launch.

    ``thread_blocks`` > 0 asks the generator for that many work-groups walking the elements
    (rows) in a grid-stride loop (:class:`LaunchPlan`); 0 leaves the launch to it.
    """

    work_item: int
    entry: str
    input_slots: tuple[int, ...]
    output_slots: tuple[int, ...]
    geometry: LaunchGeometry
    thread_blocks: int = 0


@dataclass(frozen=True)
class OutlinePlan:
    outlines: tuple[KernelOutline, ...]

    @memoized
    def fingerprint(self) -> str:
        return digest_of(*self.outlines)


@dataclass(frozen=True)
class KernelLegality:
    """One kernel's verdict; ``limits``: each limit it exceeds (``exceeds_limits``)."""

    kernel: int
    status: KernelStatus
    detail: str
    limits: tuple[LimitExcess, ...] = ()


@dataclass(frozen=True)
class LegalityReport:
    """Per-kernel legality against the product's target profile."""

    target_fingerprint: str
    kernels: tuple[KernelLegality, ...]

    @property
    def is_legal(self) -> bool:
        return all(k.status is KernelStatus.legal for k in self.kernels)

    def first_illegal(self) -> KernelLegality | None:
        return next((k for k in self.kernels if k.status is not KernelStatus.legal), None)

    @memoized
    def fingerprint(self) -> str:
        return digest_of(self.target_fingerprint, *self.kernels)
