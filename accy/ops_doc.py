"""docs/OPS.md, the op reference, generated from the op table (``accy.ir.ops``: names, kinds,
arities, attributes, one line of meaning per op) and the builder spellings below.

``python -m accy.ops_doc`` rewrites docs/OPS.md; ``python -m accy.ops_doc --check`` exits 1
when it is stale (tests/test_ops_doc.py does the same check).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from accy.ir.ops import ATTRS, DOC, Op, OpKind
from accy.ir.shapes import FLOAT_ONLY
from accy.ir.types import DType

PATH = Path(__file__).resolve().parent.parent / "docs" / "OPS.md"
COMMAND = "python -m accy.ops_doc"

# how a traced program makes each op (x, a, b: traced Values; accy.f: the top-level function)
BUILDER: dict[Op, str] = {
    Op.PARAM: "a parameter of `@accy.function` / `accy.trace`",
    Op.CONSTANT: "`accy.constant(v)`, `accy.arange(n)`; numbers next to a Value",
    Op.NEG: "`-x`", Op.ABS: "`abs(x)`, `accy.abs(x)`",
    Op.ADD: "`a + b`", Op.SUB: "`a - b`", Op.MUL: "`a * b`", Op.DIV: "`a / b`",
    Op.MAX: "`accy.maximum(a, b)`", Op.MIN: "`accy.minimum(a, b)`", Op.POW: "`a ** b`",
    Op.EQ: "`a == b`", Op.NE: "`a != b`", Op.LT: "`a < b`", Op.LE: "`a <= b`",
    Op.GT: "`a > b`", Op.GE: "`a >= b`",
    Op.NOT: "`~c`", Op.AND: "`c & d`", Op.OR: "`c | d`",
    Op.SELECT: "`accy.where(c, a, b)`, `accy.select(c, a, b)`",
    Op.CAST: "`x.astype(dtype)`, `accy.astype(x, dtype)`",
    Op.GELU: "`accy.gelu(x)`, `x.gelu()`",
    Op.GELU_TANH: "`accy.gelu(x, approximate=\"tanh\")`, `x.gelu(approximate=\"tanh\")`",
    Op.REDUCE_SUM: "`accy.sum(x, axes)`, `x.sum(axes)`",
    Op.REDUCE_MAX: "`accy.max(x, axes)`, `x.max(axes)`",
    Op.REDUCE_MEAN: "`accy.mean(x, axes)`, `x.mean(axes)`",
    Op.EINSUM: "`accy.einsum(\"ij,jk->ik\", a, b)`, `accy.einsum(a, [0, 1], b, [1, 2])`, "
               "`a @ b`, `accy.matmul(a, b)`",
    Op.RESHAPE: "`accy.reshape(x, shape)`, `x.reshape(*shape)`",
    Op.TRANSPOSE: "`accy.transpose(x, perm)`, `x.transpose(*perm)`, `x.T`",
    Op.BROADCAST: "`accy.broadcast_to(x, shape)`, `x.broadcast_to(*shape)`",
    Op.SLICE: "`x[a:b:c, ...]`",
    Op.CONCAT: "`accy.concat([a, b], axis)`",
    Op.GATHER: "`accy.gather(x, indices, axis)`",
    Op.SCATTER_ADD: "`accy.scatter_add(x, indices, updates, axis)`",
    Op.SOFTMAX: "`accy.softmax(x, axis)`, `x.softmax(axis)`",
    Op.LOG_SOFTMAX: "`accy.log_softmax(x, axis)`, `x.log_softmax(axis)`",
    Op.CROSS_ENTROPY: "`accy.cross_entropy(logits, labels)`",
    Op.CONV2D: "`accy.conv2d(x, w, stride=, padding=, dilation=, groups=)`",
    Op.MAX_POOL2D: "`accy.max_pool2d(x, kernel_size, stride, padding)`",
    Op.AVG_POOL2D: "`accy.avg_pool2d(x, kernel_size, stride, padding, count_include_pad)`",
    Op.PAD: "`accy.pad(x, pads, value)`",
}
for _op in (Op.EXP, Op.LOG, Op.SQRT, Op.RSQRT, Op.SIN, Op.COS, Op.RECIPROCAL, Op.FLOOR,
            Op.CEIL, Op.ERF, Op.RELU, Op.SIGMOID, Op.TANH):
    BUILDER[_op] = f"`accy.{_op.value}(x)`, `x.{_op.value}()`"

_KIND_TEXT = {
    OpKind.SOURCE: "Sources", OpKind.UNARY: "Elementwise unary ops and activations",
    OpKind.BINARY: "Elementwise binary ops", OpKind.COMPARE: "Comparisons",
    OpKind.LOGICAL: "Logical ops", OpKind.SELECT: "Select", OpKind.CAST: "Cast",
    OpKind.REDUCE: "Reductions", OpKind.EINSUM: "Contraction", OpKind.MOVEMENT: "Movement",
    OpKind.INDEXING: "Indexing", OpKind.ROWWISE: "Rowwise activations", OpKind.LOSS: "Losses",
    OpKind.WINDOW: "Sliding windows (NCHW)",
}
_SHAPE_BY_KIND = {
    OpKind.UNARY: "the operand's", OpKind.BINARY: "numpy broadcasting",
    OpKind.COMPARE: "numpy broadcasting", OpKind.SELECT: "numpy broadcasting of all three",
    OpKind.CAST: "the operand's", OpKind.ROWWISE: "the operand's (rank >= 1)",
}
_SHAPE = {
    Op.PARAM: "the declared parameter type", Op.CONSTANT: "the constant's",
    Op.NOT: "the operand's", Op.AND: "numpy broadcasting", Op.OR: "numpy broadcasting",
    Op.REDUCE_SUM: "`axes` removed (size 1 with `keepdims`)",
    Op.REDUCE_MAX: "`axes` removed (size 1 with `keepdims`)",
    Op.REDUCE_MEAN: "`axes` removed (size 1 with `keepdims`)",
    Op.EINSUM: "the sizes of the output letters (a letter has one size everywhere)",
    Op.RESHAPE: "`shape` (same element count)", Op.TRANSPOSE: "operand dims in `perm` order",
    Op.BROADCAST: "`shape`", Op.SLICE: "len(range(start, stop, step)) per dimension",
    Op.CONCAT: "the operands' (equal but at `axis`), sizes at `axis` summed",
    Op.GATHER: "x.shape[:axis] + indices.shape + x.shape[axis+1:]",
    Op.SCATTER_ADD: "x's (updates: x.shape[:axis] + indices.shape + x.shape[axis+1:])",
    Op.CROSS_ENTROPY: "a scalar (labels: logits.shape[:-1])",
    Op.CONV2D: "[N, O, OH, OW], OH = (H + top + bottom - dilation*(KH-1) - 1) // stride + 1",
    Op.MAX_POOL2D: "[N, C, OH, OW], OH = (H + top + bottom - KH) // stride + 1",
    Op.AVG_POOL2D: "[N, C, OH, OW], OH = (H + top + bottom - KH) // stride + 1",
    Op.PAD: "each dimension grown by its before and after pads",
}
_DTYPES = {
    Op.PARAM: "any", Op.CONSTANT: "any", Op.CAST: "any -> `dtype`",
    Op.SELECT: "cond bool; a, b one dtype -> theirs",
    Op.REDUCE_SUM: "numeric -> same", Op.REDUCE_MAX: "numeric -> same",
    Op.REDUCE_MEAN: "float -> same", Op.EINSUM: "one numeric dtype -> same",
    Op.GATHER: "x any, indices i32/i64 -> x's", Op.SCATTER_ADD: "x, updates numeric; "
    "indices i32/i64 -> x's", Op.CROSS_ENTROPY: "logits float, labels i32/i64 -> logits'",
    Op.CONV2D: "x, w one float dtype -> same", Op.PAD: "x and the scalar one dtype -> same",
}


def _dtypes(op: Op) -> str:
    if op in _DTYPES:
        return _DTYPES[op]
    kind = op.kind
    if op in FLOAT_ONLY or kind in (OpKind.ROWWISE, OpKind.WINDOW):
        return "float -> same" if op.arity == 1 else "one float dtype -> same"
    if kind is OpKind.COMPARE:
        return ("one dtype -> bool" if op in (Op.EQ, Op.NE)
                else "one numeric dtype -> bool")
    if kind is OpKind.LOGICAL:
        return "bool -> bool"
    if kind in (OpKind.UNARY, OpKind.BINARY):
        return "numeric -> same" if op.arity == 1 else "one numeric dtype -> same"
    return "any -> same"  # movement


def _shape(op: Op) -> str:
    return _SHAPE.get(op) or _SHAPE_BY_KIND.get(op.kind) or "see the attributes"


def _attrs(op: Op) -> str:
    names = {int: "int", bool: "bool", str: "str", tuple: "ints", bytes: "bytes",
             DType: "dtype"}
    attrs = ATTRS.get(op, {})
    return ", ".join(f"`{k}`: {names[t]}" for k, t in attrs.items()) or "-"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    """The text of docs/OPS.md."""
    missing = [op.value for op in Op if op not in BUILDER]
    if missing:
        raise ValueError(f"accy/ops_doc.py: BUILDER has no spelling for {missing}")
    dtypes = ", ".join(d.value for d in DType)
    lines = [
        "# accy ops",
        "",
        f"<!-- generated from accy/ir/ops.py and accy/ops_doc.py by `{COMMAND}`; "
        "do not edit by hand -->",
        "",
        "Every op of accy's tensor IR: its text name (as the printer writes it), operand "
        "count, attributes, dtype rule, result shape, meaning, and how a traced program "
        "makes it. `accy.interpret` (accy/ir/interpret.py) is the executable definition; "
        "shape and dtype rules live in accy/ir/shapes.py and are checked when an op is built, "
        "so a mistake is reported at the line that made it.",
        "",
        f"Dtypes: {dtypes}. *numeric* is any but bool; *float* is f16, f32 or f64. "
        "Operands of one op must share a dtype unless the rule says otherwise: cast one "
        "explicitly (`x.astype(accy.DType.f32)`). A Python number next to a traced Value "
        "becomes a constant of the Value's dtype.",
        "",
        "Notes:",
        "",
        "- **GELU**: `gelu` is the exact form with the error function; `gelu_tanh` is the "
        "tanh approximation. `accy.gelu(x, approximate=\"tanh\")` makes the second, named as "
        "ONNX's Gelu and torch name it; the ONNX importer passes the attribute through.",
        "- **einsum past 52 indices**: a spec may use any non-ASCII character as an index "
        "(opt_einsum's `get_symbol(i)` scheme), and `accy.einsum(a, [0, 1], b, [1, 2], "
        "[0, 2])` (numpy's sublist form) takes integer indices, any number of them.",
        "- **Comparisons** (`==`, `!=`, `<`, ...) on traced values build bool tensors, so a "
        "traced value has no truth value: use `accy.where`.",
        "- `accy.one_hot(indices, depth)` is built from `eq` of the indices and an `arange` "
        "constant, cast to the result dtype; `accy.arange` and `accy.constant` make "
        "`constant` nodes in the function being traced (or in `like=`'s).",
        "",
    ]
    for kind in OpKind:
        ops = [op for op in Op if op.kind is kind]
        lines += [f"## {_KIND_TEXT[kind]}", "",
                  "| op | operands | attributes | dtypes | result shape | meaning | built by |",
                  "|---|---|---|---|---|---|---|"]
        for op in ops:
            arity = "n >= 1" if op.arity is None else str(op.arity)
            row = [f"`{op.value}`", arity, _attrs(op), _dtypes(op), _shape(op), DOC[op],
                   BUILDER[op]]
            lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 if {PATH.name} differs from the generated text")
    parser.add_argument("--out", type=Path, default=PATH, help="where to write")
    args = parser.parse_args(argv)
    text = markdown()
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is stale: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
