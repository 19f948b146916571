"""Printer and parser: golden text, round trips for every op, errors, and fuzzing."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accy.errors import IRParseError
from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.parser import parse_program
from accy.ir.printer import print_function, print_program
from accy.ir.program import Function, Program
from accy.ir.shapes import infer
from accy.ir.types import DType, TensorType

F32, I32, I64, BOOL = DType.f32, DType.i32, DType.i64, DType.bool


def T(dtype: DType, *shape: int) -> TensorType:
    return TensorType(shape, dtype)


def mk(op: Op, *srcs: Node, **attrs) -> Node:
    typ, norm = infer(op, tuple(s.type for s in srcs), attrs)
    return Node(op, typ, srcs, norm)


def const(arr: np.ndarray) -> Node:
    arr = np.asarray(arr)
    return Node(Op.CONSTANT, TensorType(arr.shape, DType.from_numpy(arr.dtype)), (),
                {"value": arr.tobytes()})


def func(name: str, types: list[TensorType], body, names: list[str] | None = None) -> Function:
    params = tuple(Node(Op.PARAM, t, (), {"index": i}) for i, t in enumerate(types))
    names = names or [chr(ord("a") + i) for i in range(len(types))]
    results = body(*params)
    results = results if isinstance(results, tuple) else (results,)
    return Function(name, params, tuple(names), results)


def prog(*fns: Function) -> Program:
    return Program(tuple(fns))


UNARY_FLOAT = [Op.NEG, Op.ABS, Op.EXP, Op.LOG, Op.SQRT, Op.RSQRT, Op.SIN, Op.COS, Op.RECIPROCAL,
               Op.FLOOR, Op.CEIL, Op.ERF, Op.RELU, Op.GELU, Op.GELU_TANH, Op.SIGMOID,
               Op.TANH]
BINARY = [Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.MAX, Op.MIN, Op.POW]
COMPARE = [Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE]


def op_case(op: Op) -> Program:
    """One small, valid program that uses ``op``."""
    x23, v3 = T(F32, 2, 3), T(F32, 3)
    if op is Op.PARAM:
        return prog(func("f", [x23], lambda a: a))
    if op is Op.CONSTANT:
        return prog(func("f", [], lambda: const(np.array([[1.5, -2.0]], np.float32))))
    if op in UNARY_FLOAT:
        return prog(func("f", [x23], lambda a: mk(op, a)))
    if op in BINARY:
        return prog(func("f", [x23, v3], lambda a, b: mk(op, a, b)))
    if op in COMPARE:
        return prog(func("f", [x23, v3], lambda a, b: mk(op, a, b)))
    if op is Op.NOT:
        return prog(func("f", [T(BOOL, 4)], lambda a: mk(op, a)))
    if op in (Op.AND, Op.OR):
        return prog(func("f", [T(BOOL, 4), T(BOOL, 1)], lambda a, b: mk(op, a, b)))
    if op is Op.SELECT:
        return prog(func("f", [T(BOOL, 2, 3), x23, v3], lambda c, a, b: mk(op, c, a, b)))
    if op is Op.CAST:
        return prog(func("f", [x23], lambda a: mk(op, a, dtype=I32)))
    if op in (Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MEAN):
        return prog(func("f", [T(F32, 2, 3, 4)], lambda a: (
            mk(op, a, axes=(-1,), keepdims=True), mk(op, a, axes=(0, 2), keepdims=False))))
    if op is Op.EINSUM:
        return prog(func("f", [x23, T(F32, 3, 4)], lambda a, b: mk(op, a, b, spec="ij,jk->ik")))
    if op is Op.RESHAPE:
        return prog(func("f", [x23], lambda a: mk(op, a, shape=(3, -1))))
    if op is Op.TRANSPOSE:
        return prog(func("f", [x23], lambda a: mk(op, a, perm=(1, 0))))
    if op is Op.BROADCAST:
        return prog(func("f", [T(F32, 1, 3)], lambda a: mk(op, a, shape=(4, 2, 3))))
    if op is Op.SLICE:
        return prog(func("f", [T(F32, 4, 5)], lambda a: mk(
            op, a, starts=(1, 0), stops=(-1, 5), steps=(1, 2))))
    if op is Op.CONCAT:
        return prog(func("f", [x23, T(F32, 2, 2)], lambda a, b: mk(op, a, b, axis=-1)))
    if op is Op.GATHER:
        return prog(func("f", [T(F32, 5, 3), T(I32, 2, 2)], lambda x, i: mk(op, x, i, axis=0)))
    if op is Op.SCATTER_ADD:
        return prog(func("f", [T(F32, 5, 3), T(I64, 4), T(F32, 5, 4)],
                         lambda x, i, u: mk(op, x, i, u, axis=1)))
    if op in (Op.SOFTMAX, Op.LOG_SOFTMAX):
        return prog(func("f", [x23], lambda a: mk(op, a, axis=-1)))
    if op is Op.CROSS_ENTROPY:
        return prog(func("f", [T(F32, 4, 5), T(I32, 4)], lambda lg, lb: mk(op, lg, lb)))
    if op is Op.CONV2D:
        return prog(func("f", [T(F32, 1, 4, 5, 5), T(F32, 6, 2, 3, 3)], lambda x, w: mk(
            op, x, w, strides=(2, 1), pads=(1, 0, 1, 2), dilations=(1, 2), groups=2)))
    if op in (Op.MAX_POOL2D, Op.AVG_POOL2D):
        extra = {"count_include_pad": True} if op is Op.AVG_POOL2D else {}
        return prog(func("f", [T(F32, 1, 2, 5, 5)], lambda x: mk(
            op, x, kernel=(3, 2), strides=(2, 1), pads=(1, 0, 0, 1), **extra)))
    if op is Op.PAD:
        return prog(func("f", [x23], lambda x: mk(
            op, x, const(np.array(-1.5, np.float32)), pads=(1, 0, 0, 2))))
    raise AssertionError(f"no case for {op}")


def roundtrip(p: Program) -> str:
    text = print_program(p)
    q = parse_program(text)
    assert q == p
    assert print_program(q) == text
    return text


# ---- printing -----------------------------------------------------------------------------

ADD_MUL = """\
func @add_mul(%a: f32[4], %b: f32[4], %c: f32[4]) -> (f32[4], f32[4]) {
  %0 = add(%a, %b) : f32[4]
  %1 = mul(%0, %c) : f32[4]
  return %0, %1
}
"""


def add_mul() -> Program:
    def body(a, b, c):
        s = mk(Op.ADD, a, b)
        return s, mk(Op.MUL, s, c)

    return prog(func("add_mul", [T(F32, 4)] * 3, body))


def test_golden_add_mul():
    p = add_mul()
    assert print_program(p) == ADD_MUL
    assert print_function(p.functions[0]) == ADD_MUL
    assert parse_program(ADD_MUL) == p


def test_attributes_sorted_and_normalized():
    p = prog(func("r", [T(F32, 3)], lambda a: mk(Op.REDUCE_SUM, mk(Op.EXP, a), axes=(-1,),
                                                  keepdims=False)))
    text = roundtrip(p)
    assert "  %1 = reduce_sum(%0) {axes=[0], keepdims=false} : f32[]\n" in text
    assert "  return %1\n" in text


def test_param_result_and_no_params():
    text = roundtrip(prog(func("id", [T(F32, 2)], lambda a: (a, a))))
    assert text == "func @id(%a: f32[2]) -> (f32[2], f32[2]) {\n  return %a, %a\n}\n"
    text = roundtrip(prog(func("k", [], lambda: const(np.array(3, np.int32)))))
    assert text.startswith("func @k() -> (i32[]) {\n")
    assert "constant() {value=dense<[3]>} : i32[]" in text


@pytest.mark.parametrize("op", [op for op in Op], ids=lambda op: op.value)
def test_roundtrip_every_op(op):
    text = roundtrip(op_case(op))
    if op is not Op.PARAM:
        assert f"= {op.value}(" in text


def test_roundtrip_multi_function_multi_result():
    p = prog(add_mul(). functions[0],
             func("g", [T(F32, 2, 3), T(I32, 2, 3)], lambda x, n: (
                 mk(Op.SOFTMAX, x, axis=0), mk(Op.ADD, n, n), mk(Op.CAST, n, dtype=F32), x)),
             func("h", [], lambda: const(np.arange(6, dtype=np.int64).reshape(2, 3))))
    text = roundtrip(p)
    assert text.count("\n\n") == 2 and text.endswith("}\n") and not text.endswith("\n\n")
    # shared structure across functions stays shared after parsing
    q = parse_program(text)
    assert q.functions[0].params[0] is p.functions[0].params[0]


@pytest.mark.parametrize("dtype", list(DType), ids=lambda d: d.value)
def test_constants_every_dtype(dtype):
    if dtype.is_float:
        vals = np.array([0.0, -0.0, 1.0, 2.5, -3.25, 1e-7, 6.0e4, np.nan, np.inf, -np.inf],
                        dtype.numpy)
    elif dtype.is_int:
        info = np.iinfo(dtype.numpy)
        vals = np.array([0, 1, -1, info.min, info.max, 12345], dtype.numpy)
    else:
        vals = np.array([True, False, True], np.bool_)
    vals = vals.reshape(-1, 1) if vals.size % 2 else vals.reshape(2, -1)
    p = prog(func("c", [], lambda: (const(vals), const(vals[:0]), const(vals.ravel()[0]))))
    text = roundtrip(p)
    assert "dense<[" in text and "0x" not in text
    if dtype.is_float:
        assert "nan, inf, -inf]>" in text
    if dtype is DType.bool:
        assert "dense<[true, false, true]>" in text


def test_constant_text_examples():
    text = roundtrip(prog(func("c", [], lambda: const(np.array([1.0, 2.5], np.float32)))))
    assert "{value=dense<[1.0, 2.5]>}" in text
    f32 = roundtrip(prog(func("c", [], lambda: const(np.array([0.1], np.float32)))))
    assert f"dense<[{float(np.float32(0.1))!r}]>" in f32


def test_every_f16_bit_pattern_roundtrips():
    bits = np.arange(2**16, dtype=np.uint16).view(np.float16)
    p = prog(func("c", [], lambda: const(bits)))
    q = parse_program(print_program(p))
    assert q == p
    assert q.functions[0].results[0].attr("value") == bits.tobytes()


def test_random_f32_and_f64_bits_roundtrip():
    rng = np.random.default_rng(0)
    f32 = rng.integers(0, 2**32, 2000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    f64 = rng.integers(0, 2**63, 2000, dtype=np.int64).view(np.float64)
    roundtrip(prog(func("c", [], lambda: (const(f32), const(-f64)))))


def test_negative_nan_and_raw_bytes_fallback():
    neg_nan = np.array([-np.nan], np.float32)
    assert np.signbit(neg_nan[0])
    assert "dense<[-nan]>" in roundtrip(prog(func("c", [], lambda: const(neg_nan))))
    payload = np.array([0x7FC00001], np.uint32).view(np.float32)
    assert "{value=0x0100c07f}" in roundtrip(prog(func("c", [], lambda: const(payload))))


def test_quoted_names_roundtrip():
    p = prog(func("f-1", [T(F32, 2), T(F32, 2)], lambda a, b: mk(Op.ADD, a, b),
                  names=['my "param"', "0"]),
             func("", [T(F32, 2)], lambda a: a, names=["back\\slash"]))
    text = roundtrip(p)
    assert 'func @"f-1"(%"my \\"param\\"": f32[2], %"0": f32[2])' in text
    assert '%0 = add(%"my \\"param\\"", %"0")' in text


def test_parser_leniency():
    text = ("// comment\nfunc @f(%x: f32[4]) -> f32[4] { %t = neg(%x) : f32[4]\n"
            " %u = exp(%t) : f32[4] return %u }")
    fn = parse_program(text).function("f")
    assert fn.param_names == ("x",) and fn.results[0].op is Op.EXP
    # -> both spellings of a zero-operand op
    assert parse_program("func @k() -> (i32[]) { %0 = constant {value=dense<[3]>} : i32[] "
                         "return %0 }") == prog(func("k", [], lambda: const(np.array(3, np.int32))))


def test_raw_bytes_constant_accepted():
    arr = np.array([1.5, -2.0], np.float32)
    text = f"func @k() -> (f32[2]) {{ %0 = constant() {{value=0x{arr.tobytes().hex()}}} : f32[2]" \
           " return %0 }"
    assert parse_program(text) == prog(func("k", [], lambda: const(arr)))


# ---- errors -------------------------------------------------------------------------------

HEAD = "func @f(%a: f32[4]) -> (f32[4]) {\n"
ERRORS = [
    ("unknown op", HEAD + "  %0 = frob(%a) : f32[4]\n  return %0\n}\n", 2, 8,
     "unknown op 'frob'; valid ops: param, constant, neg"),
    ("unknown value", HEAD + "  %0 = add(%a, %b) : f32[4]\n  return %0\n}\n", 2, 16,
     "unknown value '%b'"),
    ("unknown result", HEAD + "  return %7\n}\n", 2, 10, "unknown value '%7'"),
    ("duplicate name", HEAD + "  %0 = neg(%a) : f32[4]\n  %0 = neg(%0) : f32[4]\n"
     "  return %0\n}\n", 3, 3, "duplicate name '%0'"),
    ("duplicate param", "func @f(%a: f32[4], %a: f32[4]) -> (f32[4]) {\n  return %a\n}\n",
     1, 21, "duplicate name '%a'"),
    ("duplicate function", ADD_MUL + "\n" + ADD_MUL, 7, 6, "duplicate function name '@add_mul'"),
    ("bad dtype", "func @f(%a: q32[4]) -> (f32[4]) {\n  return %a\n}\n", 1, 13,
     "bad type: unknown dtype 'q32'"),
    ("bad dim", "func @f(%a: f32[4,x]) -> (f32[4]) {\n  return %a\n}\n", 1, 19, "bad type:"),
    ("negative dim", "func @f(%a: f32[-4]) -> (f32[4]) {\n  return %a\n}\n", 1, 17,
     "bad type:"),
    ("bad attribute value", HEAD + "  %0 = cast(%a) {dtype=f33} : i32[4]\n  return %0\n}\n", 2,
     24, "bad attribute: expected an attribute value"),
    ("wrong attribute type", "func @f(%a: f32[4]) -> (f32[]) {\n  %0 = reduce_sum(%a) "
     "{axes=[0], keepdims=1} : f32[]\n  return %0\n}\n", 2, 43, "keepdims' must be bool"),
    ("missing attribute", HEAD + "  %0 = softmax(%a) : f32[4]\n  return %0\n}\n", 2, 20,
     "softmax takes attributes ['axis'], got []"),
    ("extra attribute", HEAD + "  %0 = neg(%a) {axis=0} : f32[4]\n  return %0\n}\n", 2, 16,
     "neg takes attributes [], got ['axis']"),
    ("repeated attribute", HEAD + "  %0 = softmax(%a) {axis=0, axis=0} : f32[4]\n"
     "  return %0\n}\n", 2, 29, "'axis' is given twice"),
    ("constant count", "func @k() -> (f32[2]) {\n  %0 = constant() {value=dense<[1.0]>} : f32[2]"
     "\n  return %0\n}\n", 2, 26, "needs 2 elements, got 1"),
    ("constant range", "func @k() -> (i32[1]) {\n  %0 = constant() {value=dense<[3000000000]>} "
     ": i32[1]\n  return %0\n}\n", 2, 33, "out of range for i32"),
    ("constant overflow", "func @k() -> (f16[1]) {\n  %0 = constant() {value=dense<[1e10]>} "
     ": f16[1]\n  return %0\n}\n", 2, 33, "1e10 overflows f16"),
    ("type mismatch", HEAD + "  %0 = add(%a, %a) : f32[5]\n  return %0\n}\n", 2, 22,
     "type mismatch: the text says f32[5] but add(f32[4], f32[4]) infers f32[4]"),
    ("shape error", HEAD + "  %0 = reshape(%a) {shape=[3]} : f32[3]\n  return %0\n}\n", 2, 8,
     "reshape(f32[4]): cannot reshape 4 elements to [3]"),
    ("result type mismatch", HEAD + "  %0 = eq(%a, %a) : bool[4]\n  return %0\n}\n", 1, 25,
     "type mismatch: the header says result 0 is f32[4] but the returned value has type "
     "bool[4]"),
    ("result count", HEAD + "  return %a, %a\n}\n", 2, 3, "return gives 2 values"),
    ("unterminated", HEAD + "  %0 = neg(%a) : f32[4]\n  return %0\n", 4, 1,
     "unterminated function @f (opened at line 1, column 1)"),
    ("unterminated mid-statement", HEAD + "  %0 = neg(%a", 2, 14, "unterminated function @f"),
    ("no return", HEAD + "  %0 = neg(%a) : f32[4]\n}\n", 3, 1, "without a 'return'"),
    ("trailing garbage", ADD_MUL + "junk\n", 6, 1, "trailing garbage"),
    ("garbage after brace", ADD_MUL[:-1] + " }\n", 5, 3, "trailing garbage"),
    ("bad character", HEAD + "  %0 = neg(%a) ; f32[4]\n", 2, 16, "unexpected character ';'"),
    ("unterminated string", 'func @"f(%a: f32[4])', 1, 6, "bad name or string"),
    ("empty", "", 1, 1, "expected at least one function"),
    ("not a function", "%0 = add", 1, 1, "expected a function"),
    ("param as statement", HEAD + "  %0 = param() {index=0} : f32[4]\n  return %0\n}\n", 2, 8,
     "param nodes cannot be defined in a body"),
]


@pytest.mark.parametrize("kind,text,line,col,fragment", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors(kind, text, line, col, fragment):
    with pytest.raises(IRParseError) as info:
        parse_program(text)
    msg = str(info.value)
    first, src, caret = msg.split("\n")[:3] if msg.count("\n") >= 2 else (msg, "", "")
    assert first.startswith(f"line {line}, column {col}: "), msg
    assert fragment in first, msg
    assert (info.value.line, info.value.column) == (line, col)
    assert src == text.split("\n")[line - 1]
    assert caret == " " * (col - 1) + "^"


def test_caret_keeps_tabs():
    with pytest.raises(IRParseError) as info:
        parse_program(HEAD + "\t%0 = frob(%a) : f32[4]\n")
    assert info.value.args[0].split("\n")[2] == "\t     ^"


# ---- fuzzing ------------------------------------------------------------------------------

SAMPLES = [print_program(op_case(op)) for op in Op] + [
    ADD_MUL,
    print_program(prog(func("c", [], lambda: const(np.array([1.5, np.nan, -np.inf], np.float16))),
                       func("q", [T(F32, 2)], lambda a: a, names=["a b"]))),
]
VOCAB = ["func", "@f", "@g", "%a", "%0", "%1", '%"x"', "(", ")", "{", "}", "[", "]", ",", "=",
         ":", "->", "<", ">", "return", "f32[4]", "f32", "i32", "bool", "4", "-1", "1.5", "nan",
         "-inf", "0x00", "0x0", "true", "dense", "add", "constant", "reduce_sum", "axes",
         "keepdims", "value", "shape", "reshape", "cast", "dtype", "einsum", "spec", '"ij->j"',
         "\n", "//c\n", "99999999999999999999999999999999999999999999", "1e999", "param",
         "index"]

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


def only_parse_errors(text: str) -> None:
    try:
        p = parse_program(text)
    except IRParseError as e:
        assert re.match(r"line \d+, column \d+: ", str(e)), str(e)
    else:  # whatever parses must print and parse back to itself
        assert parse_program(print_program(p)) == p


@FUZZ
@given(st.text())
def test_fuzz_arbitrary_text(text):
    only_parse_errors(text)


@FUZZ
@given(st.lists(st.sampled_from(VOCAB), max_size=60))
def test_fuzz_token_soup(tokens):
    only_parse_errors(" ".join(tokens))


@FUZZ
@given(st.sampled_from(SAMPLES), st.data())
def test_fuzz_mutations(text, data):
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text)))
        j = data.draw(st.integers(i, min(len(text), i + 12)))
        kind = data.draw(st.sampled_from(["delete", "insert", "replace", "duplicate"]))
        piece = data.draw(st.one_of(st.text(max_size=4), st.sampled_from(VOCAB)))
        if kind == "delete":
            text = text[:i] + text[j:]
        elif kind == "insert":
            text = text[:i] + piece + text[i:]
        elif kind == "replace":
            text = text[:i] + piece + text[j:]
        else:
            text = text[:j] + text[i:j] + text[j:]
    only_parse_errors(text)


def test_deep_nesting_and_long_input_do_not_crash():
    for text in [HEAD + "  %0 = softmax(%a) {axis=" + "[" * 10000,
                 HEAD + "  %0 = neg(%a) : f32[4]\n" * 3000 + "  return %0\n}\n",
                 "%" * 100000, '"' + "\\" * 100001]:
        with pytest.raises(IRParseError):
            parse_program(text)
