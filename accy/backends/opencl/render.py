"""Render a kernel (:mod:`accy.kernels.ir`) as OpenCL C. A pure function of the kernel (and,
where given, its target: inline PTX renders only for targets whose probe built it).

The kernel IR names work-items and math ops neutrally; :data:`WORK_ITEM_FUNCTIONS` and
:data:`MATH_FUNCTIONS` map them to OpenCL C's built-in functions (every name the IR allows
has an entry, tests/backends/test_render_tables.py checks).

f16 needs no ``cl_khr_fp16``: f16 buffers are read and written with ``vload_half``/
``vstore_half`` (core OpenCL C since 1.0), f16 values live in ``float`` registers, and every
value the kernel binds or stores as f16 (a ``let``, an assignment, a cast to f16, a store) is
rounded to f16 on the way (round to nearest even). One f16 op on f16 operands therefore gives
the correctly rounded f16 result, as numpy's and ``interpret``'s f16 arithmetic do; an
expression the generator nests without binding keeps float precision in between.

A vector load or store at a vector index (:class:`~accy.kernels.ir.VectorLoad`,
:class:`~accy.kernels.ir.VectorStore`) of a kernel argument, or of a local array aligned to the
vector, is a dereference of a vector pointer, not ``vloadN`` / ``vstoreN``: those promise only
the element's alignment, and NVIDIA's compiler splits them into scalar accesses where it cannot
prove more (arguments are aligned to :data:`BUFFER_ALIGN`, so only vectors of up to 16 bytes).
A vector of 2, 4 or 8 halves of an f16 argument is likewise read or written as one vector of
32-bit words, converted in private memory (``accy_unpack_halfN`` / ``accy_pack_halvesN``:
``vload_halfN`` / ``vstore_halfN`` there, the same rounding): NVIDIA's compiler makes each
``vload_halfN`` of global memory N 2-byte loads.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable

from accy.errors import CapabilityMismatchError
from accy.ir.types import DType
from accy.ir.walk import Pending, evaluate
from accy.kernels.ir import (
    ATOMICS64,
    INDEX,
    VECTOR_LANES,
    Assign,
    AtomicAdd,
    Barrier,
    Bin,
    Call,
    Cast,
    Cond,
    Expr,
    Fence,
    For,
    Id,
    If,
    InlineAsm,
    Kernel,
    KernelArg,
    Lane,
    Let,
    Lit,
    Load,
    LocalArray,
    Return,
    Splat,
    Stmt,
    Store,
    Un,
    Var,
    VectorLoad,
    VectorLoadAt,
    VectorStore,
    VectorStoreAt,
    declared,
    per_body,
    walk_stmts,
)
from accy.target import TargetProfile

C_TYPE = {  # register (and local-memory) types; f16 buffers are ``half*`` (see the docstring)
    DType.f16: "float", DType.f32: "float", DType.f64: "double",
    DType.i32: "int", DType.i64: "long", DType.bool: "uchar",
}


WORK_ITEM_FUNCTIONS = {  # Id.kind -> the OpenCL C function reading it (one per kind)
    "global": "get_global_id", "local": "get_local_id", "group": "get_group_id",
    "global_size": "get_global_size", "local_size": "get_local_size",
    "num_groups": "get_num_groups",
}

MATH_FUNCTIONS = {  # Call.fn (accy.kernels.ir.MATH_OPS) -> the OpenCL C built-in
    "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "sin": "sin", "cos": "cos",
    "tanh": "tanh", "erf": "erf", "floor": "floor", "ceil": "ceil", "pow": "pow",
    "fma": "fma", "fabs": "fabs", "fmax": "fmax", "fmin": "fmin", "abs": "abs", "max": "max",
    "min": "min", "clamp": "clamp", "isnan": "isnan", "isinf": "isinf",
    "isfinite": "isfinite", "bitcast_f32": "as_float", "bitcast_i32": "as_int",
    "bitcast_u32": "as_uint", "pack_half2": "accy_pack_half2",
}
HELPERS = {  # the renderer's own functions (MATH_FUNCTIONS, NaN constants), defined where used
    "accy_pack_half2": "static inline int accy_pack_half2(float lo, float hi) { uint u; "
                       "vstore_half2((float2)(lo, hi), 0, (__private half*)&u); "
                       "return as_int(u); }",
}
# erf on CPU targets (render's ``cpu``): PoCL's erf of a vector is a scalar call a lane, most of
# a GELU epilogue's cost (papers/kernels.md, "Thirty-fifth session"); this one is vector code
# within 1 ulp of float64's erf over f32 on PoCL (tests/backends/
# test_erf_cpu.py sweeps it), a polynomial in x^2 times x for |x| up to 0.927734375, else
# 1 - exp of a polynomial in |x| (N. Juffa's erff), overloaded for float and its vectors;
# f64 keeps the built-in
ERF_WIDTHS = ("", "2", "3", "4", "8", "16")
_ERF_BODY = (
    "{t} t = fabs(a), s = a * a; "
    "{t} r = fma(({t})(-1.72853470e-5f), t, ({t})(3.83197126e-4f)); "
    "{t} u = fma(({t})(-3.88396438e-3f), t, ({t})(2.42546219e-2f)); "
    "r = fma(r, s, u); r = fma(r, t, ({t})(-1.06777877e-1f)); "
    "r = fma(r, t, ({t})(-6.34846687e-1f)); r = fma(r, t, ({t})(-1.28717512e-1f)); "
    "r = fma(r, t, -t); {t} big = copysign(({t})(1.0f) - exp(r), a); "
    "{t} q = fma(({t})(-5.96761703e-4f), s, ({t})(4.99119423e-3f)); "
    "q = fma(q, s, ({t})(-2.67681349e-2f)); q = fma(q, s, ({t})(1.12819925e-1f)); "
    "q = fma(q, s, ({t})(-3.76125336e-1f)); q = fma(q, s, ({t})(1.28379166e-1f)); "
    "q = fma(q, a, a); return select(q, big, t > ({t})(0.927734375f));")
HELPERS["accy_erf"] = " ".join(
    f"__attribute__((overloadable)) static inline float{n} accy_erf(float{n} a) {{ "
    + _ERF_BODY.format(t=f"float{n}") + " }" for n in ERF_WIDTHS)
# NaN constants, read from a volatile so that the compiler cannot fold math of them (_Half.literal)
NAN_HELPERS = {dtype: (name, f"static inline {C_TYPE[dtype]} {name}(void) {{ volatile "
                             f"{C_TYPE[dtype]} v = NAN; return v; }}")
               for dtype, name in ((DType.f32, "accy_nanf"), (DType.f64, "accy_nan"))}
HELPERS.update(NAN_HELPERS.values())


def _function(table: dict[str, str], name: str, what: str) -> str:
    fn = table.get(name)
    if fn is None:
        raise ValueError(f"the OpenCL renderer has no form for the {what} {name!r} "
                         f"(it renders: {', '.join(table)})")
    return fn


def _work_item(e: Id) -> str:
    return f"(long){_function(WORK_ITEM_FUNCTIONS, e.kind, 'work-item kind')}({e.dim})"


def literal(value: float | int | bool, dtype: DType) -> str:
    if dtype is DType.bool:
        return "(uchar)1" if value else "(uchar)0"
    if dtype is INDEX:
        return f"{int(value)}L"
    if dtype.is_int:
        return f"(({C_TYPE[dtype]}){int(value)})"
    v = float(value)
    if dtype is DType.f16:  # the nearest f16, held as a float
        v = _nearest_half(v)
        dtype = DType.f32
    if math.isnan(v):
        text = "NAN"
    elif math.isinf(v):
        text = "INFINITY" if v > 0 else "(-INFINITY)"
    elif dtype is DType.f64:
        text = repr(v)
    else:
        text = repr(v) + "f"
    return text if dtype is DType.f32 and text[0] != "(" else f"(({C_TYPE[dtype]}){text})"


def _nearest_half(v: float) -> float:
    try:
        return struct.unpack("e", struct.pack("e", v))[0]
    except OverflowError:  # beyond the largest f16 (65504, rounding up from 65520)
        return math.copysign(math.inf, v)


def _vector_store(buf: str, dtype: DType, values: tuple[Expr, ...], half: _Half
                  ) -> tuple[str, str]:
    """The vstore function (half-precision buffers: vstore_half) and the vector literal of a
    store of ``values``."""
    vec = f"({vector_type(dtype, len(values))})({', '.join(expr(v, half) for v in values)})"
    fn = "vstore_half" if buf in half.buffers else "vstore"
    return f"{fn}{_lanes(len(values))}", vec


Views = tuple[tuple[str, str, DType, int], ...]  # (array, address space, element type, alignment)
# bytes a kernel argument's base is aligned to: device buffers are whole (OpenCL aligns them to
# CL_DEVICE_MEM_BASE_ADDR_ALIGN, at least 128 bytes), host arrays used in place are aligned to
# this or copied (accy.backends.opencl.executable)
BUFFER_ALIGN = 16


def _lanes(lanes: int) -> int:
    if lanes not in VECTOR_LANES:
        raise ValueError(f"OpenCL C has no vectors of {lanes} lanes (only {VECTOR_LANES})")
    return lanes


def vector_type(dtype: DType, lanes: int = 1) -> str:
    """``float`` or ``float4``: the C type of ``lanes`` values of ``dtype``."""
    return C_TYPE[dtype] if lanes == 1 else f"{C_TYPE[dtype]}{_lanes(lanes)}"


ATOMIC_ADD = {  # what an AtomicAdd of each dtype calls
    DType.i32: "atomic_add",
    DType.i64: "atom_add",  # cl_khr_int64_base_atomics
    DType.f32: "accy_atomic_add_f32",
    DType.f64: "accy_atomic_add_f64",  # cl_khr_int64_base_atomics
}


def _float_atomic_add(dtype: DType) -> str:
    """Float atomic add from compare-and-exchange on the value's bits (compared as bits, so
    a NaN sum still ends the loop)."""
    f, i, cas, bits, back = (("float", "int", "atomic_cmpxchg", "as_int", "as_float")
                             if dtype is DType.f32 else
                             ("double", "long", "atom_cmpxchg", "as_long", "as_double"))
    return (f"static inline void {ATOMIC_ADD[dtype]}(volatile __global {f}* p, {f} v) {{ "
            f"volatile __global {i}* q = (volatile __global {i}*)p; {i} seen = *q, want; "
            f"do {{ want = seen; seen = {cas}(q, want, {bits}({back}(want) + v)); }} "
            f"while (seen != want); }}")


class _Half:
    """What rendering f16 needs: the f16 buffers and variables, and the rounding helpers used;
    and the arrays a vector may be read from or written to through a vector pointer."""

    def __init__(self, buffers: frozenset[str], aligned: Views = (), cpu: bool = False,
                 ptx: bool = False) -> None:
        self.buffers = buffers  # f16 kernel arguments (``half*``)
        self.cpu = cpu  # a CPU target: erf as the vector helper ``accy_erf``
        self.ptx = ptx  # a target running inline PTX: Fence as PTX's (device scope)
        # arrays whose base is aligned to any vector: (name, address space, element type, bytes)
        self.aligned = {name: (space, dtype, align) for name, space, dtype, align in aligned}
        self.local: set[str] = set()  # f16 local arrays (``float``, holding f16 values)
        self.variables: set[str] = set()  # f16 variables (``float``, holding f16 values)
        self.rounding: set[int] = set()  # lane counts whose rounding helper the kernel calls
        self.called: set[str] = set()  # HELPERS the kernel calls
        self.packed: set[int] = set()  # lane counts of f16 vectors read or written as words

    def vectors(self, buf: str, lanes: int, dtype: DType | None = None) -> str | None:
        """``buf`` as a pointer to vectors of ``lanes`` (of ``dtype``, else its own elements),
        where its base is known aligned to them."""
        if buf not in self.aligned or (buf in self.buffers and dtype is not DType.i32):
            return None  # f16 buffers: vload_half / vstore_half, or words of two halves
        space, own, align = self.aligned[buf]
        dtype = dtype or own
        if align < dtype.itemsize * lanes:
            return None
        return f"(({space} {vector_type(dtype, lanes)}*){buf})"

    def words(self, buf: str, lanes: int) -> str | None:
        """An f16 argument as a pointer to vectors of 32-bit words holding ``lanes`` halves
        (2, 4 or 8: ``uint``, ``uint2``, ``uint4``), where its base is aligned to them; the
        helpers converting such a vector are noted as called."""
        if buf not in self.buffers or buf not in self.aligned or lanes not in (2, 4, 8):
            return None
        space, _, align = self.aligned[buf]
        if align < 2 * lanes:
            return None
        self.packed.add(lanes)
        return f"(({space} {'uint' if lanes == 2 else f'uint{lanes // 2}'}*){buf})"

    def check_store(self, buf: str, dtype: DType) -> None:
        """Refuse a vector of ``dtype`` stored to an array of other elements (but f16 buffers,
        which take floats through vstore_half): C would convert the pointer, with only a
        warning, and write past the array."""
        if buf in self.aligned and buf not in self.buffers:
            own = self.aligned[buf][1]
            if C_TYPE[own] != C_TYPE[dtype]:
                raise TypeError(f"a vector store of {dtype.value} values to {buf}, an array "
                                f"of {own.value}")

    def round(self, text: str, lanes: int = 1) -> str:
        self.rounding.add(lanes)
        return f"accy_half{_suffix(lanes)}({text})"

    def call(self, name: str) -> str:
        """The OpenCL C function of math op ``name``, noting the helpers called."""
        fn = _function(MATH_FUNCTIONS, name, "math op")
        if fn == "erf" and self.cpu:
            fn = "accy_erf"
        if fn in HELPERS:
            self.called.add(fn)
        return fn

    def literal(self, value: float | int | bool, dtype: DType) -> str:
        """:func:`literal`, but a float NaN read through :data:`NAN_HELPERS`: PoCL's ``exp``
        and ``tanh`` of a NaN the compiler can see (a literal, even behind a select) gave
        arbitrary finite values, of one it cannot see NaN."""
        if dtype.is_float and math.isnan(float(value)):
            fn = NAN_HELPERS[DType.f64 if dtype is DType.f64 else DType.f32][0]
            self.called.add(fn)
            return f"{fn}()"
        return literal(value, dtype)

    def helpers(self) -> list[str]:
        """``accy_halfN``: round N floats to f16 and back, through a private half buffer; and
        the :data:`HELPERS` called."""
        out = [HELPERS[fn] for fn in sorted(self.called)]
        for lanes in sorted(self.rounding):
            n, t = _suffix(lanes), vector_type(DType.f32, lanes)
            out.append(f"static inline {t} accy_half{n}({t} x) {{ ushort b[{lanes}]; "
                       f"vstore_half{n}(x, 0, (__private half*)b); "
                       f"return vload_half{n}(0, (__private const half*)b); }}")
        for lanes in sorted(self.packed):
            t, w = vector_type(DType.f32, lanes), "uint" if lanes == 2 else f"uint{lanes // 2}"
            out.append(f"static inline {t} accy_unpack_half{lanes}({w} w) {{ "
                       f"return vload_half{lanes}(0, (__private const half*)&w); }}")
            out.append(f"static inline {w} accy_pack_halves{lanes}({t} x) {{ {w} w; "
                       f"vstore_half{lanes}(x, 0, (__private half*)&w); return w; }}")
        return out


def _suffix(lanes: int) -> str:
    return "" if lanes == 1 else str(_lanes(lanes))


def _exact_half(e: Expr, half: _Half) -> bool:
    """Whether ``e`` holds an f16 value already: a load of f16 memory, a cast to f16, an f16
    literal or variable (or a lane or splat of one)."""
    match e:
        case Load(buf, _) | VectorLoad(buf, _, _) | VectorLoadAt(buf, _, _):
            return buf in half.buffers or buf in half.local
        case Cast(dtype, _) | Lit(_, dtype):
            return dtype is DType.f16
        case Lane(Var(name), _) | Var(name):
            return name in half.variables
        case Splat(_, _, value):
            return _exact_half(value, half)
    return False


def expr(e: Expr, half: _Half | None = None) -> str:
    """OpenCL C of ``e``; ``half`` tells which buffers and variables hold f16 (none if None).

    Iterative (:func:`accy.ir.walk.evaluate`), so deep expressions render too."""
    half = half or _Half(frozenset())
    try:
        return _direct(e, half)
    except (RecursionError, _Unknown):  # a deep expression, or none of ours: the long way
        return evaluate(_open(e, half))


class _Unknown(Exception):
    pass


def _direct(e: Expr, half: _Half) -> str:
    """What ``evaluate(_open(e, half))`` gives, by plain recursion: kernel expressions are
    shallow (the generators bind values to variables), and the iterative walk's pending
    records cost most of rendering (0.5 s for the 408 kernels of a 1,000-op transformer)."""
    t = type(e)
    if t is Var:
        return e.name
    if t is Lit:
        return half.literal(e.value, e.dtype)
    if t is Bin:
        return f"({_direct(e.a, half)} {e.op} {_direct(e.b, half)})"
    if t is Un:
        return f"({e.op}{_direct(e.a, half)})"
    if t is Call:
        fn = half.call(e.fn)
        return f"{fn}({', '.join([_direct(a, half) for a in e.args])})"
    if t is Cond:
        return f"({_direct(e.c, half)} ? {_direct(e.a, half)} : {_direct(e.b, half)})"
    if t is Cast:
        a = _direct(e.a, half)
        if e.dtype == DType.f16:
            return half.round(f"((float){a})")
        return f"(({C_TYPE[e.dtype]}){a})"
    if t is Load:
        i = _direct(e.index, half)
        return f"vload_half({i}, {e.buf})" if e.buf in half.buffers else f"{e.buf}[{i}]"
    if t is Id:
        return _work_item(e)
    if t is VectorLoad:
        return _vector_load(e.buf, _direct(e.index, half), e.lanes, half)
    if t is VectorLoadAt:
        fn = "vload_half" if e.buf in half.buffers else "vload"
        return f"{fn}{_lanes(e.lanes)}(0, {e.buf} + {_direct(e.at, half)})"
    if t is Lane:
        v = _direct(e.vec, half)
        return (v if isinstance(e.vec, Var) else f"({v})") + f".s{e.lane:x}"
    if t is Splat:
        v = _direct(e.value, half)
        return f"(({vector_type(e.dtype, e.lanes)})({v}))"
    raise _Unknown


def _open(e: Expr, half: _Half) -> str | Pending:
    """The text of ``e``, or its operands to render first and how to join their texts."""

    def then(operands: tuple[Expr, ...], finish: Callable[[list[str]], str]) -> Pending:
        return Pending([(a, half) for a in operands], _open, finish)

    match e:
        case Var(name):
            return name
        case Lit(value, dtype):
            return half.literal(value, dtype)
        case Bin(op, a, b):
            return then((a, b), lambda t: f"({t[0]} {op} {t[1]})")
        case Un(op, a):
            return then((a,), lambda t: f"({op}{t[0]})")
        case Call(name, args):
            fn = half.call(name)
            return then(args, lambda t: f"{fn}({', '.join(t)})")
        case Cond(c, a, b):
            return then((c, a, b), lambda t: f"({t[0]} ? {t[1]} : {t[2]})")
        case Cast(DType.f16, a):
            return then((a,), lambda t: half.round(f"((float){t[0]})"))
        case Cast(dtype, a):
            return then((a,), lambda t: f"(({C_TYPE[dtype]}){t[0]})")
        case Load(buf, index) if buf in half.buffers:
            return then((index,), lambda t: f"vload_half({t[0]}, {buf})")
        case Load(buf, index):
            return then((index,), lambda t: f"{buf}[{t[0]}]")
        case Id():
            return _work_item(e)
        case VectorLoad(buf, index, lanes):
            return then((index,), lambda t: _vector_load(buf, t[0], lanes, half))
        case VectorLoadAt(buf, at, lanes):
            fn = "vload_half" if buf in half.buffers else "vload"
            return then((at,), lambda t: f"{fn}{_lanes(lanes)}(0, {buf} + {t[0]})")
        case Lane(vec, lane):
            wrap = not isinstance(vec, Var)
            return then((vec,), lambda t: (f"({t[0]})" if wrap else t[0]) + f".s{lane:x}")
        case Splat(dtype, lanes, value):
            return then((value,), lambda t: f"(({vector_type(dtype, lanes)})({t[0]}))")
    raise TypeError(f"cannot render expression {e!r}")


def _vector_load(buf: str, index: str, lanes: int, half: _Half) -> str:
    if buf in half.buffers:
        words = half.words(buf, lanes)
        return (f"accy_unpack_half{lanes}({words}[{index}])" if words else
                f"vload_half{_lanes(lanes)}({index}, {buf})")
    view = half.vectors(buf, lanes)
    return f"{view}[{index}]" if view else f"vload{_lanes(lanes)}({index}, {buf})"


def _value(e: Expr, dtype: DType, half: _Half, lanes: int = 1) -> str:
    """``e`` as the value of a binding of ``dtype``: rounded to f16 unless it is one already."""
    text = expr(e, half)
    return half.round(text, lanes) if dtype is DType.f16 and not _exact_half(e, half) else text


def stmts(body: tuple[Stmt, ...], indent: str, half: _Half | None = None) -> list[str]:
    half = half or _Half(frozenset())
    out = []
    for s in body:
        match s:
            case Let(var, dtype, value, mutable, lanes):
                if dtype is DType.f16:
                    half.variables.add(var)
                const = "" if mutable else "const "
                out.append(f"{indent}{const}{vector_type(dtype, lanes)} {var} = "
                           f"{_value(value, dtype, half, lanes)};")
            case Assign(var, value):
                dtype = DType.f16 if var in half.variables else DType.f32
                out.append(f"{indent}{var} = {_value(value, dtype, half)};")
            case Store(buf, index, value) if buf in half.buffers:
                out.append(f"{indent}vstore_half({expr(value, half)}, {expr(index, half)}, {buf});")
            case Store(buf, index, value):
                dtype = DType.f16 if buf in half.local else DType.f32
                out.append(f"{indent}{buf}[{expr(index, half)}] = {_value(value, dtype, half)};")
            case VectorStore(buf, index, DType.i32, values) if buf in half.buffers:
                # the halves' bits, a word (two halves) a lane
                n, at = len(values), expr(index, half)
                vec = expr(values[0], half) if n == 1 else _vector_store("", DType.i32, values,
                                                                          half)[1]
                view = half.vectors(buf, n, DType.i32)
                out.append(f"{indent}{view}[{at}] = {vec};" if view else
                           f"{indent}vstore{n}({vec}, {at}, ((__global int *){buf}));")
            case VectorStore(buf, index, dtype, values) if (
                    words := half.words(buf, len(values))):  # f16: a vector of words
                vec = _vector_store(buf, dtype, values, half)[1]
                out.append(f"{indent}{words}[{expr(index, half)}] = "
                           f"accy_pack_halves{len(values)}({vec});")
            case VectorStore(buf, index, dtype, values):
                half.check_store(buf, dtype)
                store, vec = _vector_store(buf, dtype, values, half)
                view = half.vectors(buf, len(values), dtype)
                out.append(f"{indent}{view}[{expr(index, half)}] = {vec};" if view else
                           f"{indent}{store}({vec}, {expr(index, half)}, {buf});")
            case VectorStoreAt(buf, at, dtype, values):
                half.check_store(buf, dtype)
                store, vec = _vector_store(buf, dtype, values, half)
                out.append(f"{indent}{store}({vec}, 0, {buf} + {expr(at, half)});")
            case AtomicAdd(buf, index, value, dtype, old):
                if dtype not in ATOMIC_ADD or old and dtype is not DType.i32:
                    raise TypeError(f"no atomic add of {dtype.value} (only "
                                    f"{', '.join(d.value for d in ATOMIC_ADD)}; keeping the "
                                    "old value, i32)")
                keep = f"int {old} = " if old else ""
                out.append(f"{indent}{keep}{ATOMIC_ADD[dtype]}(&{buf}[{expr(index, half)}], "
                           f"{expr(value, half)});")
            case For(var, start, stop, body_, step):
                out.append(f"{indent}for (long {var} = {expr(start, half)}; {var} < "
                           f"{expr(stop, half)}; {var} += {step}) {{")
                out.extend(stmts(body_, indent + "  ", half))
                out.append(f"{indent}}}")
            case If(cond, then, orelse):
                out.append(f"{indent}if ({expr(cond, half)}) {{")
                out.extend(stmts(then, indent + "  ", half))
                if orelse:
                    out.append(f"{indent}}} else {{")
                    out.extend(stmts(orelse, indent + "  ", half))
                out.append(f"{indent}}}")
            case Return():
                out.append(f"{indent}return;")
            case Barrier():
                out.append(f"{indent}barrier(CLK_LOCAL_MEM_FENCE);")
            case Fence() if half.ptx:  # NVIDIA's mem_fence is membar.cta (work-group scope)
                out.append(f'{indent}asm volatile("fence.acq_rel.gpu;" ::: "memory");')
            case Fence():
                out.append(f"{indent}mem_fence(CLK_GLOBAL_MEM_FENCE);")
            case LocalArray(name, dtype, size, align):
                if dtype is DType.f16:
                    half.local.add(name)
                elif align:
                    half.aligned[name] = ("__local", dtype, align)
                attr = f" __attribute__((aligned({align})))" if align else ""
                out.append(f"{indent}__local {C_TYPE[dtype]} {name}[{size}]{attr};")
            case InlineAsm(template, outputs, inputs, volatile, clobbers):
                outs = ", ".join(f'"{c}"({v})' for c, v in outputs)
                ins = ", ".join(f'"{c}"({expr(v, half)})' for c, v in inputs)
                asm = "asm volatile" if volatile else "asm"
                tail = (" : " + ", ".join(f'"{c}"' for c in clobbers)) if clobbers else ""
                out.append(f'{indent}{asm}("{template}" : {outs} : {ins}{tail});')
            case _:
                raise TypeError(f"cannot render statement {s!r}")
    return out


def _render_body(body: tuple, halves: frozenset[str], args: Views, cpu: bool = False,
                 ptx: bool = False):
    """(atomic dtypes, whether inline assembly, helper lines, body lines) of a kernel body
    whose f16 arguments are ``halves`` and other arguments ``args``: what :func:`render` needs
    of the body, made once per body object (:func:`accy.kernels.ir.per_body`)."""
    atomics, asm = set(), False
    for s in walk_stmts(body):
        if isinstance(s, AtomicAdd):
            atomics.add(s.dtype)
        elif isinstance(s, InlineAsm):
            asm = True
    half = _Half(halves, args, cpu, ptx)
    lines = stmts(body, "  ", half)
    return frozenset(atomics), asm, tuple(half.helpers()), tuple(lines)


def _space(arg: KernelArg) -> str:
    if arg.space == "constant":
        return "__constant"
    return "__global" if arg.is_output else "__global const"


def render(kernel: Kernel, target: TargetProfile | None = None) -> str:
    """OpenCL C source of ``kernel``. With a ``target``, a kernel holding inline assembly
    (:class:`~accy.kernels.ir.InlineAsm`, NVIDIA PTX) is refused unless the target's device
    probe built it (``TargetProfile.tensor_cores``): a CapabilityMismatchError."""
    lines = ["#pragma OPENCL FP_CONTRACT OFF"]
    if DType.f64 in kernel.dtypes:
        lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    shadowed = per_body("declared", kernel.body, lambda: declared(kernel.body)) & {
        a.name for a in kernel.args}
    if shadowed:  # C would take the local for the buffer: a type error, or a wrong read
        raise ValueError(f"{kernel.entry}: its body declares {', '.join(sorted(shadowed))}, "
                         "the name of an argument")
    halves = frozenset(a.name for a in kernel.args if a.dtype is DType.f16)
    args = tuple((a.name, _space(a), a.dtype, BUFFER_ALIGN) for a in kernel.args)
    # erf through accy_erf on CPUs, but in f64 kernels (its overloads are float's)
    cpu = (target is not None and target.device_type == "cpu"
           and DType.f64 not in kernel.dtypes)
    ptx = target is not None and bool(target.tensor_cores)
    atomics, asm, helpers, body = per_body(
        ("opencl", halves, args, cpu, ptx), kernel.body,
        lambda: _render_body(kernel.body, halves, args, cpu, ptx))
    if asm and target is not None and not target.tensor_cores:
        raise CapabilityMismatchError(
            f"{kernel.entry} holds inline PTX (InlineAsm), which the OpenCL renderer emits only "
            f"for NVIDIA targets whose device probe built it (TargetProfile.tensor_cores); "
            f"target {target.device} has none")
    if atomics & ATOMICS64:
        lines.append("#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable")
    params = []
    slots = [a.slot for a in kernel.args if not a.is_scratch]
    for a in kernel.args:
        # an output written in place over an input aliases it: no restrict on either
        alias = not a.is_scratch and slots.count(a.slot) > 1
        restrict = "" if alias else " restrict"
        ctype = "half" if a.dtype is DType.f16 else C_TYPE[a.dtype]
        params.append(f"{_space(a)} {ctype}*{restrict} {a.name}")
    attrs = ""
    if kernel.fixed_local_size:
        dims = (*kernel.geometry.local_size, 1, 1)[:3]
        attrs = f"__attribute__((reqd_work_group_size({dims[0]}, {dims[1]}, {dims[2]}))) "
    lines.extend(helpers)
    lines.extend(_float_atomic_add(d) for d in (DType.f32, DType.f64) if d in atomics)
    lines.append(f"__kernel {attrs}void {kernel.entry}({', '.join(params)}) {{")
    lines.extend(body)
    lines.append("}")
    return "\n".join(lines) + "\n"
