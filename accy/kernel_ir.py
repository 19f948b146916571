"""A small kernel IR: what kernelization produces and the OpenCL renderer prints.

A kernel computes one point of its iteration ``domain`` per work-item. Its body is straight-line
statements over named values: loads through affine index maps (offset + coordinate strides, so
broadcasts need no copy), elementwise computations, constants and stores.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from accy.ir.ops import Op
from accy.ir.types import DType
from accy.plans import LaunchGeometry, ScheduleKind


@dataclass(frozen=True)
class KernelArg:
    name: str  # in0, in1, out0 ...
    dtype: DType
    is_output: bool
    slot: int


@dataclass(frozen=True)
class Load:
    var: str
    arg: int  # index into Kernel.args
    offset: int
    strides: tuple[int, ...]  # element stride per domain coordinate (0 = broadcast)


@dataclass(frozen=True)
class Const:
    var: str
    value: float | int | bool
    dtype: DType


@dataclass(frozen=True)
class Compute:
    var: str
    op: Op
    operands: tuple[str, ...]
    dtype: DType  # result dtype
    operand_dtype: DType  # dtype of the (first non-condition) operand


@dataclass(frozen=True)
class Store:
    arg: int
    var: str


Stmt = Load | Const | Compute | Store


@dataclass(frozen=True)
class Kernel:
    entry: str
    work_item: int
    schedule_kind: ScheduleKind
    domain: tuple[int, ...]
    args: tuple[KernelArg, ...]
    body: tuple[Stmt, ...]
    geometry: LaunchGeometry

    @property
    def argument_count(self) -> int:
        return len(self.args)

    @property
    def dtypes(self) -> frozenset[DType]:
        out = {a.dtype for a in self.args}
        for s in self.body:
            if isinstance(s, Const | Compute):
                out.add(s.dtype)
        return frozenset(out)

    @property
    def ops(self) -> tuple[Op, ...]:
        return tuple(s.op for s in self.body if isinstance(s, Compute))

    def body_fingerprint(self) -> str:
        """Hash of what the kernel computes: domain, argument types and body (not its name)."""
        text = repr((self.schedule_kind.value, self.domain,
                     [(a.dtype.value, a.is_output) for a in self.args], self.body))
        return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()

    def fingerprint(self) -> str:
        return hashlib.blake2b(
            repr((self.entry, self.work_item, self.body_fingerprint(), self.geometry,
                  [a.slot for a in self.args])).encode(), digest_size=16).hexdigest()
