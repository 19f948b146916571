"""The canonical text form of programs.

One function prints as::

    func @add_mul(%a: f32[4], %b: f32[4], %c: f32[4]) -> (f32[4], f32[4]) {
      %0 = add(%a, %b) : f32[4]
      %1 = mul(%0, %c) : f32[4]
      return %0, %1
    }

Nodes print in ``Function.nodes()`` order, numbered ``%0, %1, ...`` per function; parameters
are referred to by name and not printed as ops. Attributes print as ``{key=value, ...}`` with
keys sorted, values in ``attr_text`` form, except a constant's value, which prints as
``dense<[e0, e1, ...]>``: the elements in C order (floats as ``repr(float(x))`` so that every
f16/f32/f64 value reads back exactly, ``nan``/``-nan``/``inf``/``-inf``; ints as ints; bools as
``true``/``false``). A constant whose bytes that form would not reproduce exactly (a NaN with a
payload, a bool byte other than 0/1, a wrong byte count) prints its raw bytes as ``0x...``.

Names that are not plain identifiers (``[A-Za-z_][A-Za-z0-9_.]*``) print quoted, e.g.
``%"my param"``, so a parameter can never be confused with a numbered value. Functions are
separated by one blank line and the text ends with a newline. ``accy.ir.parser.parse_program``
reads this form back: ``parse_program(print_program(p)) == p``.
"""

from __future__ import annotations

import math
import re

import numpy as np

from accy.ir.node import Node, attr_text
from accy.ir.ops import Op
from accy.ir.program import Function, Program
from accy.ir.types import DType

__all__ = [
    "constant_text", "dense_elements", "element_value", "format_name", "print_function",
    "print_program", "values_to_bytes",
]

IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*", re.ASCII)


def format_name(sigil: str, name: str) -> str:
    """``sigil`` + ``name``, quoting the name when it is not a plain identifier."""
    if IDENT_RE.fullmatch(name):
        return sigil + name
    return sigil + '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _float_text(x: float) -> str:
    if math.isnan(x):
        return "-nan" if math.copysign(1.0, x) < 0 else "nan"
    return repr(x)


def dense_elements(value: np.ndarray) -> list[str]:
    """The text of each element of ``value`` in C order, as used inside ``dense<[...]>``."""
    flat = np.ascontiguousarray(value).reshape(-1)
    kind = flat.dtype.kind
    if kind == "f":
        return [_float_text(float(x)) for x in flat.tolist()]
    if kind == "b":
        return ["true" if x else "false" for x in flat.tolist()]
    return [str(int(x)) for x in flat.tolist()]


def element_value(text: str, dtype: DType) -> float | int | bool:
    """The Python value of one ``dense`` element as printed by ``dense_elements``."""
    if dtype is DType.bool:
        return {"true": True, "false": False}[text]
    if dtype.is_float:
        if text in ("nan", "-nan"):
            return -math.nan if text[0] == "-" else math.nan
        return float(text)
    return int(text)


def values_to_bytes(values: list[float | int | bool], dtype: DType) -> bytes:
    """The constant bytes (C order, ``dtype``) of element values; floats round from f64."""
    if dtype.is_float:
        with np.errstate(all="ignore"):
            return np.array(values, dtype=np.float64).astype(dtype.numpy).tobytes()
    return np.array(values, dtype=dtype.numpy).tobytes()


def constant_text(node: Node) -> str:
    """The attribute text of a constant node's value: ``dense<[...]>`` or raw ``0x...``."""
    raw = node.attr("value")
    if len(raw) == node.type.nbytes:
        elements = dense_elements(node.value)
        dtype = node.type.dtype
        if values_to_bytes([element_value(e, dtype) for e in elements], dtype) == raw:
            return "dense<[" + ", ".join(elements) + "]>"
    return attr_text(raw)


def _attrs_text(node: Node) -> str:
    if not node.attrs:
        return ""
    parts = []
    for key, value in node.attrs:  # nodes keep their attributes sorted by key
        text = constant_text(node) if node.op is Op.CONSTANT and key == "value" else attr_text(
            value)
        parts.append(f"{key}={text}")
    return " {" + ", ".join(parts) + "}"


def print_function(fn: Function) -> str:
    """The text of one function (ends with a newline)."""
    names: dict[Node, str] = {}
    for p, pname in zip(fn.params, fn.param_names, strict=True):
        names[p] = format_name("%", pname)
    header_params = ", ".join(f"{names[p]}: {p.type}" for p in fn.params)
    result_types = ", ".join(str(r.type) for r in fn.results)
    lines = [f"func {format_name('@', fn.name)}({header_params}) -> ({result_types}) {{"]
    counter = 0
    for node in fn.nodes():
        if node.op is Op.PARAM:
            if node not in names:
                raise ValueError(
                    f"function {fn.name}: uses parameter node #{node.attr('index')} "
                    f"of type {node.type} that is not among its parameters"
                )
            continue
        missing = [s for s in node.srcs if s not in names]
        if missing:  # cannot happen for nodes() order; guards hand-made functions
            raise ValueError(f"function {fn.name}: operand of {node!r} printed out of order")
        name = f"%{counter}"
        counter += 1
        args = ", ".join(names[s] for s in node.srcs)
        lines.append(f"  {name} = {node.op.value}({args}){_attrs_text(node)} : {node.type}")
        names[node] = name
    lines.append("  return " + ", ".join(names[r] for r in fn.results))
    lines.append("}")
    return "\n".join(lines) + "\n"


def print_program(program: Program) -> str:
    """The canonical text of ``program``: its functions in order, one blank line between."""
    return "\n".join(print_function(f) for f in program.functions)
