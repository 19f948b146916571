"""Reads the text form written by ``accy.ir.printer`` back into a ``Program``.

``parse_program(print_program(p)) == p`` for every program whose attributes are normalized
(as ``shapes.infer`` leaves them). Every node is rebuilt through ``Node(...)`` after its op's
type rule (``shapes.infer``) has checked it: the type written after ``:`` must equal the
inferred type. Whitespace (newlines included) only separates tokens; ``//`` starts a comment
that runs to the end of the line. Parentheses after an op with no operands may be left out,
and a single result type needs no parentheses.

Any malformed input raises ``IRParseError`` (and nothing else) with a message
``line L, column C: <what was wrong>`` followed by the source line and a caret under the
column; the exception also carries ``line`` and ``column`` attributes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import numpy as np

from accy.errors import IRParseError, ShapeError
from accy.ir.node import Node
from accy.ir.ops import ATTRS, Op
from accy.ir.printer import format_name, values_to_bytes
from accy.ir.program import Function, Program
from accy.ir.shapes import infer
from accy.ir.types import DType, TensorType

__all__ = ["parse_program"]

_STR = r'"(?:[^"\\]|\\["\\])*"'
_ID = r"[A-Za-z_][A-Za-z0-9_.]*"
_TOKEN_RE = re.compile(
    rf"""(?P<skip>(?:[ \t\r\n]+|//[^\n]*)+)
    |(?P<punct>->|[(){{}}\[\],=:<>])
    |(?P<num>-(?:inf|nan)(?![A-Za-z0-9_.])|0x[0-9A-Fa-f]*
        |[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)
    |(?P<ident>{_ID})
    |(?P<val>%(?:{_ID}|[0-9]+|{_STR}))
    |(?P<fn>@(?:{_ID}|{_STR}))
    |(?P<str>{_STR})""",
    re.VERBOSE | re.ASCII,
)
_INT_RE = re.compile(r"[-+]?[0-9]{1,40}", re.ASCII)  # 40 digits: far beyond int64
_INT64 = (-(2**63), 2**63 - 1)
_MAX_DEPTH = 16  # nesting of [...] in attribute values
_T = TypeVar("_T")
Env = dict[tuple[bool, str], Node]


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # punct, num, ident, val, fn, str, eof
    text: str  # the source text (val/fn/str: the decoded name or string)
    pos: int
    numeric: bool = False  # a %name spelled with digits (kept apart from quoted names)


@dataclass(frozen=True, slots=True)
class _Dense:
    elems: list[_Tok]


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text[1:-1], flags=re.DOTALL)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.ahead: _Tok | None = None
        self.open_fn: tuple[str, int] | None = None  # name and position of the open function

    # ---- errors and tokens --------------------------------------------------------------

    def where(self, pos: int) -> tuple[int, int]:
        return self.text.count("\n", 0, pos) + 1, pos - self.text.rfind("\n", 0, pos)

    def fail(self, pos: int, msg: str) -> NoReturn:
        line, col = self.where(pos)
        start = pos - col + 1
        end = self.text.find("\n", pos)
        src = self.text[start:] if end < 0 else self.text[start:end]
        caret = "".join(c if c == "\t" else " " for c in src[: col - 1]) + "^"
        err = IRParseError(f"line {line}, column {col}: {msg}\n{src.rstrip(chr(13))}\n{caret}")
        err.line, err.column = line, col  # type: ignore[attr-defined]
        raise err

    def unexpected(self, tok: _Tok, what: str, prefix: str = "") -> NoReturn:
        if tok.kind == "eof" and self.open_fn is not None:
            name, pos = self.open_fn
            line, col = self.where(pos)
            self.fail(tok.pos, f"unterminated function {format_name('@', name)} (opened at "
                               f"line {line}, column {col}): reached end of input, "
                               f"expected {what}")
        self.fail(tok.pos, f"{prefix}expected {what}, got {self.describe(tok)}")

    def describe(self, tok: _Tok) -> str:
        if tok.kind == "eof":
            return "end of input"
        return repr(self.text[tok.pos : self.tok_end(tok)] or tok.text)

    def tok_end(self, tok: _Tok) -> int:
        m = _TOKEN_RE.match(self.text, tok.pos)
        return m.end() if m else tok.pos + 1

    def peek(self) -> _Tok:
        if self.ahead is None:
            self.ahead = self._lex()
        return self.ahead

    def _lex(self) -> _Tok:
        while True:
            if self.pos >= len(self.text):
                return _Tok("eof", "", len(self.text))
            m = _TOKEN_RE.match(self.text, self.pos)
            if m is None:
                c = self.text[self.pos]
                if c in '"%@':
                    self.fail(self.pos, "bad name or string: expected an identifier or a "
                                        'quoted string (escapes allowed: \\" and \\\\)')
                self.fail(self.pos, f"unexpected character {c!r}")
            pos, self.pos = self.pos, m.end()
            kind, text = m.lastgroup or "", m.group()
            if kind == "skip":
                continue
            if kind in ("val", "fn"):
                name = text[1:]
                quoted = name.startswith('"')
                return _Tok(kind, _unquote(name) if quoted else name, pos,
                            numeric=not quoted and name[0].isdigit())
            return _Tok(kind, _unquote(text) if kind == "str" else text, pos)

    def next(self) -> _Tok:
        tok = self.peek()
        self.ahead = None
        return tok

    def at(self, kind: str, text: str | None = None) -> bool:
        tok = self.peek()
        return tok.kind == kind and (text is None or tok.text == text)

    def expect(self, kind: str, text: str | None, what: str) -> _Tok:
        tok = self.next()
        if tok.kind != kind or (text is not None and tok.text != text):
            self.unexpected(tok, what)
        return tok

    def items(self, close: str, item: Callable[[], _T], what: str) -> list[_T]:
        """Comma-separated ``item``s up to and including the ``close`` symbol."""
        out: list[_T] = []
        if self.at("punct", close):
            self.next()
            return out
        while True:
            out.append(item())
            tok = self.next()
            if tok.kind == "punct" and tok.text == close:
                return out
            if tok.kind != "punct" or tok.text != ",":
                self.unexpected(tok, f"',' or {close!r} in {what}")

    # ---- grammar ------------------------------------------------------------------------

    def program(self) -> Program:
        functions: dict[str, Function] = {}
        while not self.at("eof"):
            tok = self.next()
            if tok.kind != "ident" or tok.text != "func":
                self.unexpected(tok, "'func' or end of input (trailing garbage after the last "
                                     "function)" if functions else "a function ('func @name')")
            name = self.expect("fn", None, "a function name ('@name')")
            if name.text in functions:
                self.fail(name.pos, f"duplicate function name {self.describe(name)}")
            self.open_fn = (name.text, tok.pos)
            functions[name.text] = self.function(name.text)
            self.open_fn = None
        if not functions:
            self.fail(len(self.text), "expected at least one function, got end of input")
        return Program(tuple(functions.values()))

    def function(self, name: str) -> Function:
        env: Env = {}
        params: list[Node] = []
        names: list[str] = []

        def param() -> None:
            tok = self.expect("val", None, "a parameter name ('%name')")
            if (tok.numeric, tok.text) in env:
                self.fail(tok.pos, f"duplicate name {self.describe(tok)}")
            self.expect("punct", ":", "':' and the parameter's type")
            p = Node(Op.PARAM, self.type(), (), {"index": len(params)})
            env[(tok.numeric, tok.text)] = p
            params.append(p)
            names.append(tok.text)

        self.expect("punct", "(", "'(' to open the parameter list")
        self.items(")", param, "the parameter list")
        self.expect("punct", "->", "'->' and the result types")
        if self.at("punct", "("):
            self.next()
            result_types = self.items(")", self.located_type, "the result types")
        else:
            result_types = [self.located_type()]
        self.expect("punct", "{", "'{' to open the function body")
        while not self.at("ident", "return"):
            tok = self.peek()
            if tok.kind == "punct" and tok.text == "}":
                self.fail(tok.pos, "function body ends without a 'return'")
            if tok.kind != "val":
                self.unexpected(tok, "a statement ('%name = op(...) : type') or 'return'")
            self.statement(env)
        ret = self.next()
        results = [self.lookup(env)]
        while self.at("punct", ","):
            self.next()
            results.append(self.lookup(env))
        if len(results) != len(result_types):
            self.fail(ret.pos, f"return gives {len(results)} values but the header declares "
                               f"{len(result_types)} result types")
        for i, (r, (t, pos)) in enumerate(zip(results, result_types, strict=True)):
            if r.type != t:
                self.fail(pos, f"type mismatch: the header says result {i} is {t} "
                               f"but the returned value has type {r.type}")
        self.expect("punct", "}", "'}' to close the function")
        return Function(name, tuple(params), tuple(names), tuple(results))

    def lookup(self, env: Env) -> Node:
        tok = self.expect("val", None, "a value ('%name')")
        node = env.get((tok.numeric, tok.text))
        if node is None:
            self.fail(tok.pos, f"unknown value {self.describe(tok)} (not a parameter and not "
                               "defined by an earlier statement)")
        return node

    def located_type(self) -> tuple[TensorType, int]:
        pos = self.peek().pos
        return self.type(), pos

    def type(self) -> TensorType:
        tok = self.next()
        if tok.kind != "ident":
            self.unexpected(tok, "a type like f32[4,8]", "bad type: ")
        try:
            dtype = DType.parse(tok.text)
        except ValueError as e:
            self.fail(tok.pos, f"bad type: {e}")
        self.expect("punct", "[", f"'[' after the dtype (a type like {tok.text}[4,8])")
        return TensorType(tuple(self.items("]", self.dim, "the shape")), dtype)

    def dim(self) -> int:
        d = self.next()
        if d.kind != "num" or not d.text.isdigit():
            self.unexpected(d, "a dimension (a non-negative integer)", "bad type: ")
        if len(d.text) > 18:
            self.fail(d.pos, f"bad type: dimension {d.text} is too large")
        return int(d.text)

    def statement(self, env: Env) -> None:
        name = self.next()
        if (name.numeric, name.text) in env:
            self.fail(name.pos, f"duplicate name {self.describe(name)}")
        self.expect("punct", "=", "'=' after the value name")
        op_tok = self.expect("ident", None, "an op name")
        try:
            op = Op.parse(op_tok.text)
        except ValueError as e:
            self.fail(op_tok.pos, str(e))
        if op is Op.PARAM:
            self.fail(op_tok.pos, "param nodes cannot be defined in a body; declare parameters "
                                  "in the function header")
        srcs: list[Node] = []
        if self.at("punct", "("):
            self.next()
            srcs = self.items(")", lambda: self.lookup(env), "the operand list")
        attrs_pos = self.peek().pos
        attrs: dict[str, tuple[Any, int]] = {}
        if self.at("punct", "{"):
            self.next()
            self.items("}", lambda: self.attr(attrs), "the attributes")
        self.expect("punct", ":", "':' and the result type")
        typ, type_pos = self.located_type()
        self.check_attrs(op, attrs, attrs_pos)
        if op is Op.CONSTANT:
            if srcs:
                self.fail(op_tok.pos, f"constant takes no operands, got {len(srcs)}")
            env[(name.numeric, name.text)] = self.constant(typ, *attrs["value"])
            return
        src_types = tuple(s.type for s in srcs)
        sig = f"{op.value}({', '.join(str(t) for t in src_types)})"
        try:
            inferred, norm = infer(op, src_types, {k: v for k, (v, _) in attrs.items()})
            if inferred != typ:
                self.fail(type_pos, f"type mismatch: the text says {typ} but {sig} "
                                    f"infers {inferred}")
            env[(name.numeric, name.text)] = Node(op, inferred, srcs, norm)
        except ShapeError as e:
            self.fail(op_tok.pos, str(e))
        except (ValueError, TypeError, LookupError, ArithmeticError) as e:
            self.fail(op_tok.pos, f"{sig}: {e}")

    def attr(self, attrs: dict[str, tuple[Any, int]]) -> None:
        key = self.expect("ident", None, "an attribute name")
        if key.text in attrs:
            self.fail(key.pos, f"bad attribute: {key.text!r} is given twice")
        self.expect("punct", "=", f"'=' after the attribute name {key.text!r}")
        pos = self.peek().pos
        attrs[key.text] = (self.attr_value(0), pos)

    def attr_value(self, depth: int) -> Any:
        tok = self.next()
        t = tok.text
        if tok.kind == "punct" and t == "[":
            if depth >= _MAX_DEPTH:
                self.fail(tok.pos, "bad attribute: lists nested too deeply")
            return tuple(self.items("]", lambda: self.attr_value(depth + 1), "the list"))
        if tok.kind == "str":
            return t
        if tok.kind == "num" and t.startswith("0x"):
            if len(t) % 2:
                self.fail(tok.pos, "bad attribute: hex bytes need an even number of digits")
            return bytes.fromhex(t[2:])
        if tok.kind == "num" and _INT_RE.fullmatch(t):
            if not _INT64[0] <= int(t) <= _INT64[1]:
                self.fail(tok.pos, f"bad attribute: {t} does not fit in 64 bits")
            return int(t)
        if tok.kind == "num" and t in ("-inf", "-nan"):
            return -float(t[1:])
        if tok.kind == "num" and len(t) <= 64 and "x" not in t:
            return float(t)
        if tok.kind == "ident":
            if t in ("true", "false", "inf", "nan"):
                return t == "true" if t in ("true", "false") else float(t)
            if t == "dense":
                self.expect("punct", "<", "'<' after dense")
                self.expect("punct", "[", "'[' after dense<")
                elems = self.items("]", self.next, "the dense elements")
                self.expect("punct", ">", "'>' to close dense<[...]>")
                return _Dense(elems)
            if t in DType._value2member_map_:
                return DType(t)
        self.unexpected(tok, "an attribute value (a number, string, list, true/false, "
                             "a dtype or dense<[...]>)", "bad attribute: ")

    def check_attrs(self, op: Op, attrs: dict[str, tuple[Any, int]], pos: int) -> None:
        expected = ATTRS.get(op, {})
        if set(attrs) != set(expected):
            self.fail(pos, f"bad attribute: {op.value} takes attributes {sorted(expected)}, "
                           f"got {sorted(attrs)}")
        for key, (value, vpos) in attrs.items():
            want = expected[key]
            vals = value if want is tuple and isinstance(value, tuple) else (value,)
            elem = int if want is tuple else bytes | _Dense if want is bytes else want
            if not all(isinstance(v, elem) and (elem is bool or not isinstance(v, bool))
                       for v in vals):
                kind = {tuple: "a list of integers", bytes: "dense<[...]> or 0x<hex bytes>"}.get(
                    want, want.__name__)
                self.fail(vpos, f"bad attribute: {op.value} attribute {key!r} must be {kind}")

    def constant(self, typ: TensorType, value: bytes | _Dense, pos: int) -> Node:
        if isinstance(value, _Dense):
            elems = value.elems
            if len(elems) != typ.size:
                self.fail(pos, f"bad attribute: constant of type {typ} needs {typ.size} "
                               f"elements, got {len(elems)}")
            vals = [self.element(tok, typ.dtype) for tok in elems]
            value = values_to_bytes(vals, typ.dtype)
            if typ.dtype.is_float:
                arr = np.frombuffer(value, dtype=typ.dtype.numpy)
                bad = np.isinf(arr) & ~np.isinf(np.array(vals, dtype=np.float64))
                if bad.any():
                    tok = elems[int(np.argmax(bad))]
                    self.fail(tok.pos, f"bad attribute: {tok.text} overflows {typ.dtype.value}")
        if len(value) != typ.nbytes:
            self.fail(pos, f"bad attribute: constant of type {typ} needs {typ.nbytes} bytes, "
                           f"got {len(value)}")
        return Node(Op.CONSTANT, typ, (), {"value": value})

    def element(self, tok: _Tok, dtype: DType) -> float | int | bool:
        t = tok.text
        if dtype is DType.bool and tok.kind == "ident" and t in ("true", "false"):
            return t == "true"
        if dtype.is_float and tok.kind in ("num", "ident") and t.lstrip("-") in ("inf", "nan"):
            return -float(t[1:]) if t[0] == "-" else float(t)
        if dtype.is_float and tok.kind == "num" and len(t) <= 64 and "x" not in t:
            if math.isinf(float(t)):
                self.fail(tok.pos, f"bad attribute: {t} overflows f64")
            return float(t)
        if dtype.is_int and tok.kind == "num" and _INT_RE.fullmatch(t):
            info = np.iinfo(dtype.numpy)
            if not info.min <= int(t) <= info.max:
                self.fail(tok.pos, f"bad attribute: {t} is out of range for {dtype.value}")
            return int(t)
        self.unexpected(tok, f"a {dtype.value} element", "bad attribute: ")


def parse_program(text: str) -> Program:
    """The program written in ``text``; raises ``IRParseError`` (only) on malformed input."""
    if not isinstance(text, str):
        raise IRParseError(f"line 1, column 1: expected program text (str), got "
                           f"{type(text).__name__}")
    return _Parser(text).program()
