"""The op set of accy's tensor IR, in commented groups.

Each op has a text name (used by the printer, parser, kernel entry names and rule names),
a kind that passes dispatch on, and an arity (``None`` for variadic ops).
"""

from __future__ import annotations

from enum import Enum

from accy.ir.types import DType


class OpKind(Enum):
    __hash__ = object.__hash__  # members are singletons: C-speed hashing (see Op)
    SOURCE = "source"  # parameters and constants
    UNARY = "unary"  # elementwise, one operand, same dtype out (activations included)
    BINARY = "binary"  # elementwise, two operands, broadcasting, same dtype out
    COMPARE = "compare"  # elementwise, two operands, bool out
    LOGICAL = "logical"  # elementwise on bools
    SELECT = "select"  # elementwise select(cond, a, b)
    CAST = "cast"  # elementwise dtype conversion
    REDUCE = "reduce"  # reductions over axes
    EINSUM = "einsum"  # N-ary contraction given by a spec
    MOVEMENT = "movement"  # reshape, transpose, broadcast, slice, concat
    INDEXING = "indexing"  # gather, scatter-add along an axis
    ROWWISE = "rowwise"  # softmax, log-softmax along an axis
    LOSS = "loss"  # cross-entropy over integer labels
    WINDOW = "window"  # conv2d, pools, constant pad: lowered by conv-lowering (tensor stage)


ELEMENTWISE_KINDS = frozenset(
    {OpKind.UNARY, OpKind.BINARY, OpKind.COMPARE, OpKind.LOGICAL, OpKind.SELECT, OpKind.CAST}
)


class Op(Enum):
    """Every op of the IR. ``Op.ADD.value == "add"`` is its text name."""

    # sources
    PARAM = "param"
    CONSTANT = "constant"
    # elementwise unary math
    NEG = "neg"
    ABS = "abs"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    SIN = "sin"
    COS = "cos"
    RECIPROCAL = "reciprocal"
    FLOOR = "floor"
    CEIL = "ceil"
    ERF = "erf"  # the error function (what exact gelu lowers to)
    # elementwise activations
    RELU = "relu"
    GELU = "gelu"  # exact form: x * Phi(x) with the error function
    GELU_TANH = "gelu_tanh"  # the tanh approximation of gelu (ONNX Gelu approximate="tanh")
    SIGMOID = "sigmoid"
    TANH = "tanh"
    # elementwise binary math (numpy broadcasting)
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    MAX = "max"
    MIN = "min"
    POW = "pow"
    # comparisons (bool result)
    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    # logical
    NOT = "not"
    AND = "and"
    OR = "or"
    # select and cast
    SELECT = "select"
    CAST = "cast"
    # reductions over axes (attrs: axes, keepdims)
    REDUCE_SUM = "reduce_sum"
    REDUCE_MAX = "reduce_max"
    REDUCE_MEAN = "reduce_mean"
    # contraction (attr: spec, e.g. "ij,jk->ik")
    EINSUM = "einsum"
    # movement
    RESHAPE = "reshape"  # attr: shape
    TRANSPOSE = "transpose"  # attr: perm
    BROADCAST = "broadcast"  # attr: shape (numpy broadcast_to)
    SLICE = "slice"  # attrs: starts, stops, steps
    CONCAT = "concat"  # attr: axis
    # indexing (numpy take / add.at semantics along attr axis)
    GATHER = "gather"  # (x, indices) -> take(x, indices, axis)
    SCATTER_ADD = "scatter_add"  # (x, indices, updates) -> x with updates added at indices
    # rowwise activations (attr: axis)
    SOFTMAX = "softmax"
    LOG_SOFTMAX = "log_softmax"
    # losses
    CROSS_ENTROPY = "cross_entropy"  # (logits[..., C], labels[...] int) -> mean NLL, scalar
    # sliding windows over NCHW tensors (pads: [top, left, bottom, right])
    CONV2D = "conv2d"  # (x[N,C,H,W], w[O,C/groups,KH,KW]); strides, pads, dilations, groups
    MAX_POOL2D = "max_pool2d"  # kernel, strides, pads (pads never win the max)
    AVG_POOL2D = "avg_pool2d"  # kernel, strides, pads, count_include_pad
    PAD = "pad"  # (x, value[] scalar) -> x padded by pads [before..., after...] with value

    # members are singletons compared by identity: hash them so too, at C speed (Enum's own
    # __hash__ is Python code hashing the name; Op.kind lookups ran ~40,000 times a prepare)
    __hash__ = object.__hash__

    @property
    def kind(self) -> OpKind:
        return _KIND[self]

    @property
    def arity(self) -> int | None:
        return _ARITY.get(self.kind, _ARITY_BY_OP.get(self))

    @property
    def is_elementwise(self) -> bool:
        return self.kind in ELEMENTWISE_KINDS

    @classmethod
    def parse(cls, text: str) -> Op:
        try:
            return cls(text)
        except ValueError:
            valid = ", ".join(o.value for o in cls)
            raise ValueError(f"unknown op {text!r}; valid ops: {valid}") from None


_GROUPS: dict[OpKind, tuple[Op, ...]] = {
    OpKind.SOURCE: (Op.PARAM, Op.CONSTANT),
    OpKind.UNARY: (
        Op.NEG, Op.ABS, Op.EXP, Op.LOG, Op.SQRT, Op.RSQRT, Op.SIN, Op.COS, Op.RECIPROCAL,
        Op.FLOOR, Op.CEIL, Op.ERF, Op.RELU, Op.GELU, Op.GELU_TANH, Op.SIGMOID,
        Op.TANH,
    ),
    OpKind.BINARY: (Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.MAX, Op.MIN, Op.POW),
    OpKind.COMPARE: (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE),
    OpKind.LOGICAL: (Op.NOT, Op.AND, Op.OR),
    OpKind.SELECT: (Op.SELECT,),
    OpKind.CAST: (Op.CAST,),
    OpKind.REDUCE: (Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MEAN),
    OpKind.EINSUM: (Op.EINSUM,),
    OpKind.MOVEMENT: (Op.RESHAPE, Op.TRANSPOSE, Op.BROADCAST, Op.SLICE, Op.CONCAT),
    OpKind.INDEXING: (Op.GATHER, Op.SCATTER_ADD),
    OpKind.ROWWISE: (Op.SOFTMAX, Op.LOG_SOFTMAX),
    OpKind.LOSS: (Op.CROSS_ENTROPY,),
    OpKind.WINDOW: (Op.CONV2D, Op.MAX_POOL2D, Op.AVG_POOL2D, Op.PAD),
}
_KIND = {op: kind for kind, ops in _GROUPS.items() for op in ops}
_ARITY = {
    OpKind.UNARY: 1, OpKind.BINARY: 2, OpKind.COMPARE: 2, OpKind.SELECT: 3, OpKind.CAST: 1,
    OpKind.REDUCE: 1, OpKind.ROWWISE: 1, OpKind.LOSS: 2,
}
_ARITY_BY_OP = {
    Op.PARAM: 0, Op.CONSTANT: 0, Op.NOT: 1, Op.AND: 2, Op.OR: 2,
    Op.EINSUM: None, Op.CONCAT: None,
    Op.RESHAPE: 1, Op.TRANSPOSE: 1, Op.BROADCAST: 1, Op.SLICE: 1,
    Op.GATHER: 2, Op.SCATTER_ADD: 3,
    Op.CONV2D: 2, Op.MAX_POOL2D: 1, Op.AVG_POOL2D: 1, Op.PAD: 2,
}

# The attributes each op carries, with their Python types (checked when a node is made).
ATTRS: dict[Op, dict[str, type]] = {
    Op.PARAM: {"index": int},
    Op.CONSTANT: {"value": bytes},
    Op.CAST: {"dtype": DType},
    Op.REDUCE_SUM: {"axes": tuple, "keepdims": bool},
    Op.REDUCE_MAX: {"axes": tuple, "keepdims": bool},
    Op.REDUCE_MEAN: {"axes": tuple, "keepdims": bool},
    Op.EINSUM: {"spec": str},
    Op.RESHAPE: {"shape": tuple},
    Op.TRANSPOSE: {"perm": tuple},
    Op.BROADCAST: {"shape": tuple},
    Op.SLICE: {"starts": tuple, "stops": tuple, "steps": tuple},
    Op.CONCAT: {"axis": int},
    Op.GATHER: {"axis": int},
    Op.SCATTER_ADD: {"axis": int},
    Op.SOFTMAX: {"axis": int},
    Op.LOG_SOFTMAX: {"axis": int},
    Op.CONV2D: {"strides": tuple, "pads": tuple, "dilations": tuple, "groups": int},
    Op.MAX_POOL2D: {"kernel": tuple, "strides": tuple, "pads": tuple},
    Op.AVG_POOL2D: {"kernel": tuple, "strides": tuple, "pads": tuple, "count_include_pad": bool},
    Op.PAD: {"pads": tuple},
}

assert set(_KIND) == set(Op), "every op belongs to exactly one group"

# One line of meaning per op: docs/OPS.md is generated from it and the tables above
# (``python -m accy.ops_doc``); accy.ir.interpret is the executable definition.
DOC: dict[Op, str] = {
    Op.PARAM: "The function's parameter number `index`.",
    Op.CONSTANT: "A constant tensor; `value` holds its elements' bytes in row-major order.",
    Op.NEG: "-x.",
    Op.ABS: "|x|.",
    Op.EXP: "e ** x.",
    Op.LOG: "The natural logarithm (-inf at 0, NaN below).",
    Op.SQRT: "The square root (NaN below 0).",
    Op.RSQRT: "1 / sqrt(x).",
    Op.SIN: "The sine (radians).",
    Op.COS: "The cosine (radians).",
    Op.RECIPROCAL: "1 / x.",
    Op.FLOOR: "Rounding toward -inf.",
    Op.CEIL: "Rounding toward +inf.",
    Op.ERF: "The error function erf(x) = 2/sqrt(pi) * integral of exp(-t^2) from 0 to x.",
    Op.RELU: "max(x, 0); NaN stays NaN.",
    Op.GELU: "GELU, exact form with the error function: 0.5 x (1 + erf(x / sqrt 2)) "
             "(torch's and ONNX's default, approximate='none').",
    Op.GELU_TANH: "GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) "
                  "(ONNX Gelu / torch approximate='tanh').",
    Op.SIGMOID: "1 / (1 + exp(-x)), computed without overflow.",
    Op.TANH: "The hyperbolic tangent.",
    Op.ADD: "a + b.",
    Op.SUB: "a - b.",
    Op.MUL: "a * b.",
    Op.DIV: "a / b: true division for floats; for integers C division (truncating toward 0; "
            "dividing by 0 is an error in the interpreter).",
    Op.MAX: "The elementwise maximum (numpy.maximum: a NaN operand gives NaN).",
    Op.MIN: "The elementwise minimum (numpy.minimum: a NaN operand gives NaN).",
    Op.POW: "a ** b (numpy.power).",
    Op.EQ: "a == b.",
    Op.NE: "a != b.",
    Op.LT: "a < b.",
    Op.LE: "a <= b.",
    Op.GT: "a > b.",
    Op.GE: "a >= b.",
    Op.NOT: "Logical not.",
    Op.AND: "Logical and.",
    Op.OR: "Logical or.",
    Op.SELECT: "a where cond is true, else b (numpy.where(cond, a, b)).",
    Op.CAST: "x converted to `dtype` as numpy's astype (floats to ints truncate toward 0; "
             "out-of-range values are undefined; to bool is x != 0).",
    Op.REDUCE_SUM: "The sum over `axes` (removed, or kept as size 1 with `keepdims`).",
    Op.REDUCE_MAX: "The maximum over `axes`; an empty axis gives the dtype's lowest value.",
    Op.REDUCE_MEAN: "The mean over `axes`; an empty axis gives NaN.",
    Op.EINSUM: "Einstein summation by `spec` (\"ij,jk->ik\"): letters, or any non-ASCII "
               "character for indices past the 52 letters (opt_einsum.get_symbol's scheme); "
               "no ellipsis; contracted in the order opt_einsum finds.",
    Op.RESHAPE: "The same elements in row-major order with shape `shape` (one -1 is inferred).",
    Op.TRANSPOSE: "Axes permuted: result axis i is operand axis perm[i].",
    Op.BROADCAST: "numpy.broadcast_to(x, shape).",
    Op.SLICE: "x[starts:stops:steps] per dimension (positive steps; bounds as Python slices).",
    Op.CONCAT: "The operands joined along `axis`.",
    Op.GATHER: "numpy.take(x, indices, axis); indices outside [0, size) are errors.",
    Op.SCATTER_ADD: "A copy of x with `updates` added at `indices` along `axis` "
                    "(numpy.add.at: repeated indices accumulate).",
    Op.SOFTMAX: "exp(x) / sum(exp(x)) along `axis`, the row maximum subtracted first.",
    Op.LOG_SOFTMAX: "x - log(sum(exp(x))) along `axis`, the row maximum subtracted first.",
    Op.CROSS_ENTROPY: "The mean over label positions of -log_softmax(logits)[..., label] "
                      "(NaN with no labels); labels outside [0, classes) are errors.",
    Op.CONV2D: "2-d cross-correlation of x[N, C, H, W] with w[O, C/groups, KH, KW] "
               "(ONNX Conv without bias; zero padding).",
    Op.MAX_POOL2D: "The maximum over each window of x[N, C, H, W]; padding never wins.",
    Op.AVG_POOL2D: "The mean over each window of x[N, C, H, W]; padding counts in the divisor "
                   "only with `count_include_pad`.",
    Op.PAD: "x padded with the scalar operand: `pads` = [befores..., afters...] "
            "(numpy.pad with a constant).",
}
assert set(DOC) == set(Op), "every op has a line of meaning"
