"""The kernel IR: index expressions, loads, stores, arithmetic, accumulators, loops, barriers,
local memory. Generators build it; :mod:`accy.backends.opencl.render` prints it as OpenCL C.

The IR is backend-neutral: it speaks of work-items and work-groups (:class:`Id` with a
:data:`WORK_ITEM_KINDS` kind), barriers, group-shared (local) memory and math operations by
the names of :data:`MATH_OPS`; a renderer maps them to its language through its own tables
(as tinygrad's C-style renderers do). Unknown names are refused when a node is made. The one
exception is :class:`InlineAsm`, a target instruction written out verbatim: a capability of
the OpenCL renderer on NVIDIA targets (inline PTX), nothing else renders it.

Every node is a frozen dataclass, so equal kernels compare and hash equal and a kernel's
fingerprint is a hash of its structure.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from accy.ir.memo import memoized
from accy.ir.ops import Op
from accy.ir.types import DType
from accy.kernels.ir_text import ir_text, register
from accy.plans import LaunchGeometry, ScheduleKind

INDEX = DType.i64  # the dtype of index arithmetic (OpenCL long)

MATH_OPS: dict[str, tuple[int, str]] = {
    # name: (arity, meaning). C99 names where C has the function; every backend's renderer
    # maps each name (accy.backends.opencl.render.MATH_FUNCTIONS for OpenCL C)
    "exp": (1, "e**x"), "log": (1, "natural logarithm"), "sqrt": (1, "square root"),
    "rsqrt": (1, "1 / sqrt(x)"), "sin": (1, "sine"), "cos": (1, "cosine"),
    "tanh": (1, "hyperbolic tangent"), "erf": (1, "error function"),
    "floor": (1, "round down"), "ceil": (1, "round up"), "pow": (2, "x**y"),
    "fma": (3, "x * y + z, rounded once"), "fabs": (1, "|x| of a float"),
    "fmax": (2, "float maximum; a NaN operand gives the other (IEEE maxNum)"),
    "fmin": (2, "float minimum; a NaN operand gives the other (IEEE minNum)"),
    "abs": (1, "|x| of an integer (the result may be unsigned: cast it back)"),
    "max": (2, "integer (and index) maximum"), "min": (2, "integer (and index) minimum"),
    "clamp": (3, "min(max(x, lo), hi)"),
    "isnan": (1, "x is NaN (a truth value)"), "isinf": (1, "x is +-inf (a truth value)"),
    "isfinite": (1, "x is neither NaN nor infinite (a truth value)"),
    "bitcast_f32": (1, "the 32 bits of x read as an f32"),
    "bitcast_i32": (1, "the 32 bits of x read as an i32"),
    "bitcast_u32": (1, "the 32 bits of x read as an unsigned 32-bit integer"),
    "pack_half2": (2, "x and y rounded to f16 (nearest even), their bits in one i32: x in the "
                      "low 16, y in the high"),
}
"""The math operations :class:`Call` may name, with their arity."""

WORK_ITEM_KINDS = ("global", "local", "group", "global_size", "local_size", "num_groups")
"""What an :class:`Id` reads in a dimension: the work-item's global index, its index within
its work-group, the work-group's index; the global size, the work-group size, the number of
work-groups."""

BINARY_OPS = frozenset({"+", "-", "*", "/", "%", "<", "<=", ">", ">=", "==", "!=", "&&", "||",
                        "&", "|", "^", "<<", ">>"})
UNARY_OPS = frozenset({"-", "!"})

# the OpenCL C spellings the IR used before it was neutral, for a helpful error
_OLD_NAMES = {"get_global_id": "Id('global', d)", "get_local_id": "Id('local', d)",
              "get_group_id": "Id('group', d)", "get_global_size": "Id('global_size', d)",
              "get_local_size": "Id('local_size', d)", "get_num_groups": "Id('num_groups', d)",
              "as_float": "Call('bitcast_f32', ...)", "as_int": "Call('bitcast_i32', ...)",
              "as_uint": "Call('bitcast_u32', ...)"}


def _unknown(what: str, name: object, known) -> ValueError:
    hint = f"; write {_OLD_NAMES[name]}" if isinstance(name, str) and name in _OLD_NAMES else ""
    return ValueError(f"unknown kernel-IR {what} {name!r}{hint} (known: {', '.join(known)})")


# expressions ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Var:
    name: str


@dataclass(frozen=True)
class Lit:
    value: int | float | bool
    dtype: DType


@dataclass(frozen=True)
class Bin:
    op: str  # one of BINARY_OPS: + - * / % < <= > >= == != && ||
    a: Expr
    b: Expr

    def __post_init__(self) -> None:
        if self.op not in BINARY_OPS:
            raise _unknown("binary operator", self.op, sorted(BINARY_OPS))


@dataclass(frozen=True)
class Un:
    op: str  # - !
    a: Expr

    def __post_init__(self) -> None:
        if self.op not in UNARY_OPS:
            raise _unknown("unary operator", self.op, sorted(UNARY_OPS))


@dataclass(frozen=True)
class Call:
    """A math operation of :data:`MATH_OPS` on ``args`` (e.g. ``Call("exp", (x,))``)."""

    fn: str  # a name of MATH_OPS
    args: tuple[Expr, ...]

    def __post_init__(self) -> None:
        spec = MATH_OPS.get(self.fn)
        if spec is None:
            raise _unknown("math op", self.fn, MATH_OPS)
        if len(self.args) != spec[0]:
            raise ValueError(f"kernel-IR math op {self.fn!r} takes {spec[0]} operands, "
                             f"not {len(self.args)}")


@dataclass(frozen=True)
class Cond:  # c ? a : b
    c: Expr
    a: Expr
    b: Expr


@dataclass(frozen=True)
class Cast:
    dtype: DType
    a: Expr


@dataclass(frozen=True)
class Load:
    buf: str  # a kernel argument or a local array
    index: Expr


@dataclass(frozen=True)
class Id:
    """A work-item index or launch size in dimension ``dim`` (0, 1 or 2), as an index value:
    ``kind`` is one of :data:`WORK_ITEM_KINDS` (``Id("global", 0)``: the global index)."""

    kind: str
    dim: int = 0

    def __post_init__(self) -> None:
        if self.kind not in WORK_ITEM_KINDS:
            raise _unknown("work-item kind", self.kind, WORK_ITEM_KINDS)
        if self.dim not in (0, 1, 2):
            raise ValueError(f"work-item dimension {self.dim!r} is not 0, 1 or 2")


@dataclass(frozen=True)
class VectorLoad:
    """``lanes`` consecutive elements of ``buf`` from element ``index * lanes`` (``vloadN``):
    a vector value, bound by ``Let(..., lanes=N)``, its lanes read with :class:`Lane`."""

    buf: str
    index: Expr  # in units of whole vectors
    lanes: int


@dataclass(frozen=True)
class VectorLoadAt:
    """``lanes`` consecutive elements of ``buf`` from element ``at``, which need not be a
    multiple of ``lanes`` (``vloadN(0, buf + at)``): sliding windows of a row."""

    buf: str
    at: Expr  # in elements
    lanes: int


@dataclass(frozen=True)
class Lane:
    """Lane ``lane`` of a vector value (``v.s0`` ... ``v.sf``)."""

    vec: Expr
    lane: int


@dataclass(frozen=True)
class Splat:
    """A vector of ``lanes`` copies of the scalar ``value`` of ``dtype`` (``(float4)(x)``)."""

    dtype: DType
    lanes: int
    value: Expr


Expr = (Var | Lit | Bin | Un | Call | Cond | Cast | Load | Id | VectorLoad | VectorLoadAt | Lane
        | Splat)

VECTOR_LANES = (2, 3, 4, 8, 16)  # the vector widths OpenCL C has


# statements -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Let:
    """``const T var = expr;`` (``mutable`` drops the const: an accumulator); ``lanes > 1``
    declares a vector variable (``float4``), e.g. of a :class:`VectorLoad`."""

    var: str
    dtype: DType
    expr: Expr
    mutable: bool = False
    lanes: int = 1


@dataclass(frozen=True)
class Assign:  # var = expr;
    var: str
    expr: Expr


@dataclass(frozen=True)
class Store:
    buf: str
    index: Expr
    value: Expr


@dataclass(frozen=True)
class VectorStore:
    """Store ``values`` (one per lane, of ``dtype``) to ``len(values)`` consecutive elements of
    ``buf`` from element ``index * len(values)`` (``vstoreN``). Lanes of i32 into an f16
    buffer are each two halves' bits (``pack_half2``): ``2 len(values)`` halves from half
    ``2 index len(values)``; one such lane is a store of one word."""

    buf: str
    index: Expr  # in units of whole vectors
    dtype: DType
    values: tuple[Expr, ...]


@dataclass(frozen=True)
class VectorStoreAt:
    """Store ``values`` to ``len(values)`` consecutive elements of ``buf`` from element ``at``,
    which need not be a multiple of the lane count (``vstoreN(v, 0, buf + at)``)."""

    buf: str
    at: Expr  # in elements
    dtype: DType
    values: tuple[Expr, ...]


ATOMICS64 = frozenset({DType.i64, DType.f64})  # atomic adds that need cl_khr_int64_base_atomics


@dataclass(frozen=True)
class AtomicAdd:
    """Add ``value`` to element ``index`` of global buffer ``buf`` of ``dtype`` atomically
    (i32: ``atomic_add``; f32: a compare-and-exchange loop on the value's bits, since OpenCL
    1.2 has no float atomics; i64 and f64 likewise with ``cl_khr_int64_base_atomics``). The
    order of concurrent adds, hence float rounding, is not fixed. ``old`` (i32 only), where
    named, declares a variable holding the element before the add (a counter's ticket)."""

    buf: str
    index: Expr
    value: Expr
    dtype: DType
    old: str = ""


@dataclass(frozen=True)
class For:
    var: str  # an index variable (long)
    start: Expr
    stop: Expr
    body: tuple[Stmt, ...]
    step: int = 1


@dataclass(frozen=True)
class If:
    cond: Expr
    then: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...] = ()


@dataclass(frozen=True)
class Return:
    pass


@dataclass(frozen=True)
class Barrier:
    """A work-group barrier: every work-item of the group waits here, and local memory written
    before it is visible to the whole group after it."""


@dataclass(frozen=True)
class Fence:
    """A device-scope fence on global memory: what this work-item stored before it is visible
    to a work-group that sees, by an atomic after it, that it ran (with a counter, the last
    work-group to arrive reads the others' stores; none waits: no deadlock)."""


@dataclass(frozen=True)
class LocalArray:
    """``__local T name[size];`` shared by a work-group; ``align`` (bytes, 0: the type's own)
    lets vector loads of it be aligned ones."""

    name: str
    dtype: DType
    size: int
    align: int = 0


@dataclass(frozen=True)
class InlineAsm:
    """``asm volatile("template" : outputs : inputs);``: one target instruction the IR has no
    node for (PTX ``mma.sync``, ``cvt.rna.tf32.f32`` on NVIDIA's OpenCL compiler). Not
    backend-neutral: a capability only the OpenCL renderer on NVIDIA targets renders (it
    refuses a target whose ``TargetProfile.tensor_cores`` is empty). Only generators that
    checked the target (``TargetProfile.tensor_cores``) emit it.

    ``outputs`` are (constraint, variable) pairs, e.g. ``("+f", "acc0")`` (read and written)
    or ``("=r", "bits")``; ``inputs`` are (constraint, expression) pairs, e.g.
    ``("r", Call("bitcast_u32", (x,)))``. Operands are numbered outputs first, as in GCC asm.
    ``volatile`` keeps the statement in place (``mma.sync``, as CUTLASS does); a pure
    instruction (``cvt``) leaves it False so the compiler may schedule or drop it.
    ``clobbers`` (e.g. ``("memory",)``) tell the compiler what else the instruction touches
    (``cp.async`` writes local memory behind its back).
    """

    template: str
    outputs: tuple[tuple[str, str], ...]
    inputs: tuple[tuple[str, Expr], ...]
    volatile: bool = True
    clobbers: tuple[str, ...] = ()


Stmt = (Let | Assign | Store | VectorStore | VectorStoreAt | AtomicAdd | For | If | Return | Barrier
        | Fence | LocalArray | InlineAsm)


# kernels ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelArg:
    """A buffer argument: a buffer slot of the plan, or scratch memory of the work item.

    Scratch (``scratch_elems > 0``, ``slot == -1``) is allocated by the runtime once per work
    item and argument name, zero-filled when allocated, and shared by the work item's kernels
    (e.g. the partial sums of a two-pass reduction). A kernel that uses scratch as a counter
    must leave it as it found it.

    ``space`` is the OpenCL address space the kernel sees the buffer in: ``global``, or
    ``constant`` for a read-only slot that memory-space-planning placed in constant memory
    (kernelization fills it from the plan; generators leave the default).
    """

    name: str  # in0, in1, out0, scratch0 ...
    dtype: DType
    is_output: bool
    slot: int
    scratch_elems: int = 0
    space: str = "global"

    @property
    def is_scratch(self) -> bool:
        return self.scratch_elems > 0


@dataclass(frozen=True)
class Kernel:
    """One kernel: arguments (buffer slots), a body, a launch geometry.

    ``ops`` lists the tensor ops the body implements with their operand dtypes (what
    legalization checks); ``domain`` is the iteration space the work item covers.
    """

    entry: str
    work_item: int
    schedule_kind: ScheduleKind
    domain: tuple[int, ...]
    args: tuple[KernelArg, ...]
    body: tuple[Stmt, ...]
    geometry: LaunchGeometry
    ops: tuple[tuple[Op, DType], ...] = field(default=())
    fixed_local_size: bool = False  # built for exactly geometry.local_size (reqd_work_group_size)
    # inputs whose global addresses the body hands to instructions (cp.async): they stay in
    # global memory whatever memory-space planning chose (kernelization.with_spaces)
    global_args: frozenset[str] = field(default=frozenset(), repr=False)

    @property
    def argument_count(self) -> int:
        return len(self.args)

    @property
    def dtypes(self) -> frozenset[DType]:
        """Every dtype the kernel stores, loads or computes in (index arithmetic excluded)."""
        return self.body_facts()[0]

    @property
    def atomics64(self) -> bool:
        """Whether the kernel adds 64-bit values atomically (``cl_khr_int64_base_atomics``)."""
        return self.body_facts()[1]

    def body_facts(self) -> tuple[frozenset[DType], bool]:
        """(dtypes, atomics64) from one walk of the body (legalization asks for both), kept
        per body object (:func:`per_body`), not on the kernel: a frozenset of enum members
        kept on each kernel made loading a saved job of 1,000 ops take 10x the collector's
        passes (256 instead of 22 per load)."""
        inner, atomics64 = per_body("facts", self.body, lambda: _body_facts(self.body))
        return inner | {a.dtype for a in self.args}, atomics64

    def body_fingerprint(self) -> str:
        """Hash of what the kernel computes: argument types and body (not its name)."""
        # memoized on the (immutable) kernel: product fingerprints ask for it after every pass;
        # the body's own hash per body object, which the kernels kernelization reuses for
        # several work items share (the text of a 20,000-statement body takes a second)
        cached = self.__dict__.get("_body_fingerprint")
        if cached is None:
            body = per_body("digest", self.body, lambda: hashlib.blake2b(
                ir_text(self.body).encode(), digest_size=16).digest())
            head = repr((self.schedule_kind.value, self.domain,
                         [(a.dtype.value, a.is_output, a.space) for a in self.args]))
            cached = hashlib.blake2b(head.encode() + body, digest_size=16).hexdigest()
            object.__setattr__(self, "_body_fingerprint", cached)
        return cached

    @memoized
    def fingerprint(self) -> str:
        return hashlib.blake2b(
            repr((self.entry, self.work_item, self.body_fingerprint(), self.geometry,
                  [a.slot for a in self.args])
                 + (("fixed_local_size",) if self.fixed_local_size else ())).encode(),
            digest_size=16).hexdigest()


register(Var, Lit, Bin, Un, Call, Cond, Cast, Load, Id, VectorLoad, VectorLoadAt, Lane, Splat,
         Let, Assign, Store, VectorStore, VectorStoreAt, AtomicAdd, For, If, Return, Barrier,
         Fence, LocalArray, InlineAsm)


_PER_BODY: dict[tuple[Hashable, int], tuple[tuple[Stmt, ...], Any]] = {}
PER_BODY_KEPT = 64  # bodies whose derived values are kept (oldest dropped first)
_PER_BODY_LOCK = threading.Lock()


def per_body[T](kind: Hashable, body: tuple[Stmt, ...], compute: Callable[[], T]) -> T:
    """``compute()``, a value derived from ``body`` alone, kept per body *object* for the
    last :data:`PER_BODY_KEPT` bodies asked about: the kernels kernelization reuses for the
    repeated blocks of a model (``local_key``) share one body, so its hash, facts and
    rendered text are made once. ``kind`` names the value (with whatever else it depends on,
    e.g. the renderer's options)."""
    key = (kind, id(body))
    hit = _PER_BODY.get(key)
    if hit is not None and hit[0] is body:
        return hit[1]
    value = compute()
    with _PER_BODY_LOCK:  # threads prepare jobs at once (issue #12): one writer at a time
        while len(_PER_BODY) >= PER_BODY_KEPT:
            _PER_BODY.pop(next(iter(_PER_BODY)), None)
        _PER_BODY[key] = (body, value)
    return value


def _body_facts(body: tuple[Stmt, ...]) -> tuple[frozenset[DType], bool]:
    found: set[DType] = set()
    atomics64 = False
    for s in walk_stmts(body):
        if isinstance(s, LocalArray) or isinstance(s, Let) and s.dtype is not INDEX:
            found.add(s.dtype)
        elif isinstance(s, AtomicAdd) and s.dtype in ATOMICS64:
            atomics64 = True
    return frozenset(found), atomics64


def declared(body: tuple[Stmt, ...]) -> frozenset[str]:
    """The names ``body`` declares: lets, local arrays, loop variables, atomics' old values."""
    kept = {Let: "var", For: "var", LocalArray: "name", AtomicAdd: "old"}
    return frozenset(getattr(s, kept[type(s)]) for s in walk_stmts(body) if type(s) in kept) - {""}


def walk_stmts(body: tuple[Stmt, ...]):
    """Every statement of ``body``, nested ones included (pre-order, without recursion)."""
    stack: list[Stmt] = list(reversed(body))
    while stack:
        s = stack.pop()
        yield s
        if isinstance(s, For):
            stack.extend(reversed(s.body))
        elif isinstance(s, If):
            stack.extend(reversed(s.orelse))
            stack.extend(reversed(s.then))


def free_vars(e: Expr) -> frozenset[str]:
    """The variable names an expression reads (an explicit stack: expressions may be deep)."""
    names: set[str] = set()
    stack = [e]
    while stack:
        e = stack.pop()
        if isinstance(e, Var):
            names.add(e.name)
        elif isinstance(e, Lit | Id):
            pass
        elif isinstance(e, Bin):
            stack += (e.a, e.b)
        elif isinstance(e, Un | Cast):
            stack.append(e.a)
        elif isinstance(e, Call):
            stack.extend(e.args)
        elif isinstance(e, Cond):
            stack += (e.c, e.a, e.b)
        elif isinstance(e, Load | VectorLoad):
            stack.append(e.index)
        elif isinstance(e, VectorLoadAt):
            stack.append(e.at)
        elif isinstance(e, Lane):
            stack.append(e.vec)
        elif isinstance(e, Splat):
            stack.append(e.value)
        else:
            raise TypeError(f"not an expression: {e!r}")
    return frozenset(names)


# index arithmetic helpers that fold constants (keeps generated source readable)
def idx(value: int) -> Lit:
    return Lit(int(value), INDEX)


def all_of(conds: list[Expr], op: str = "&&") -> Expr | None:
    """The conjunction (``&&``; ``op="||"``: the disjunction) of ``conds``; None for none (no
    guard)."""
    out = None
    for c in conds:
        out = c if out is None else Bin(op, out, c)
    return out


def add(a: Expr, b: Expr) -> Expr:
    if isinstance(a, Lit) and a.value == 0:
        return b
    if isinstance(b, Lit) and b.value == 0:
        return a
    if isinstance(a, Lit) and isinstance(b, Lit):
        return idx(a.value + b.value)
    return Bin("+", a, b)


def mul(a: Expr, b: Expr) -> Expr:
    if isinstance(a, Lit) and isinstance(b, Lit):
        return idx(a.value * b.value)
    for x, y in ((a, b), (b, a)):
        if isinstance(x, Lit) and x.value == 1:
            return y
        if isinstance(x, Lit) and x.value == 0:
            return idx(0)
    return Bin("*", a, b)


def div(a: Expr, n: int) -> Expr:
    if n == 1:
        return a
    if isinstance(a, Lit):
        return idx(a.value // n)
    return Bin("/", a, idx(n))


def mod(a: Expr, n: int) -> Expr:
    if n == 1:
        return idx(0)
    if isinstance(a, Lit):
        return idx(a.value % n)
    return Bin("%", a, idx(n))


def linear(coords: tuple[Expr, ...], strides: tuple[int, ...], offset: int = 0) -> Expr:
    """``offset + sum(coord * stride)``."""
    out: Expr = idx(offset)
    for c, s in zip(coords, strides, strict=True):
        if s:
            out = add(out, mul(c, idx(s)))
    return out


def row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a contiguous row-major tensor of ``shape``."""
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


def delinearize(flat: Expr, shape: tuple[int, ...]) -> tuple[Expr, ...]:
    """Row-major coordinates of element ``flat`` in ``shape`` (no modulo on the outermost)."""
    return tuple(div(flat, s) if i == 0 else mod(div(flat, s), max(d, 1))
                 for i, (s, d) in enumerate(zip(row_major(shape), shape, strict=True)))
