"""Tensor sorts: one constructor per op, attribute encodings, types, named rules, Python calls."""

from __future__ import annotations

import pytest
from egglog import eq
from egraph_support import F32, T, func, mk, prog

from accy.egraph.convert import extract, from_egraph, to_egraph
from accy.egraph.driver import saturate
from accy.egraph.rules import RULES, RULESETS, RuleSet, infer_type, py_test, same_type
from accy.egraph.sorts import (
    MISSING_OPS,
    SIGNATURES,
    TYPE_RULES,
    Tensor,
    decode_attr,
    encode_attr,
    new_egraph,
    parse_type,
    tensors,
    types,
)
from accy.ir.ops import Op
from accy.ir.types import DType, TensorType


def test_every_op_has_a_constructor():
    assert MISSING_OPS == ()
    assert len({s.egg_name for s in SIGNATURES.values()}) == len(SIGNATURES)
    for op, sig in SIGNATURES.items():
        assert hasattr(Tensor, sig.method), op
        assert sig.operands == op.arity


@pytest.mark.parametrize("t", [TensorType((), DType.f32), TensorType((4, 8), DType.i64),
                               TensorType((0, 1), DType.bool), TensorType((3,), DType.f16)])
def test_type_text_roundtrip(t):
    assert parse_type(str(t)) == t
    with pytest.raises(ValueError, match="not a tensor type"):
        parse_type("f32(4)")


@pytest.mark.parametrize("kind,value", [
    ("int", -3), ("bool", True), ("text", "ij,jk->ik"), ("dtype", DType.f16),
    ("ints", (1, 0, 2)), ("ints", ()), ("bytes", b"\x00\xff"), ("bytes", b""),
])
def test_attribute_encoding_roundtrip(kind, value):
    assert decode_attr(kind, encode_attr(kind, value)) == value


def test_type_rules_fill_the_type_of_every_class():
    eg = new_egraph()
    a = Tensor.param(0, "f32[2,3]")
    s = Tensor.reduce_sum(a, "[1]", False, "f32[2]")
    eg.register(s)
    eg.run(TYPE_RULES)
    assert eg.check_bool(eq(s.ty).to("f32[2]"), eq(a.ty).to("f32[2,3]"))


def test_names_are_kebab_case_and_unique():
    rs = RuleSet("test-names", "names", register=False)
    (x,) = tensors("x")
    (t,) = types("t")
    rs.rewrite("neg-neg", Tensor.neg(Tensor.neg(x, t), t), x)
    with pytest.raises(ValueError, match="already registered"):
        rs.rewrite("neg-neg", Tensor.neg(Tensor.neg(x, t), t), x)
    with pytest.raises(ValueError, match="kebab-case"):
        rs.rewrite("Neg_Neg", Tensor.neg(Tensor.neg(x, t), t), x)
    with pytest.raises(ValueError, match="kebab-case"):
        RuleSet("Bad Name", "", register=False)


def test_registry_rejects_duplicates_across_rule_sets():
    (x,) = tensors("x")
    (t,) = types("t")
    try:
        first = RuleSet("test-registry-a", "first")
        first.rewrite("test-abs-abs", Tensor.abs(Tensor.abs(x, t), t), Tensor.abs(x, t))
        assert RULES["test-abs-abs"].ruleset == "test-registry-a"
        with pytest.raises(ValueError, match="already registered"):
            RuleSet("test-registry-a", "again")
        second = RuleSet("test-registry-b", "second")
        with pytest.raises(ValueError, match="in rule set 'test-registry-a'"):
            second.rewrite("test-abs-abs", Tensor.abs(x, t), x)
        with pytest.raises(ValueError, match="already registered"):
            second.rewrite("test-registry-a", Tensor.abs(x, t), x)  # a rule set's name
    finally:
        for name in ("test-registry-a", "test-registry-b"):
            RULESETS.pop(name, None)
        RULES.pop("test-abs-abs", None)


def test_birewrite_is_one_name_for_both_directions():
    a, b = tensors("a b")
    (t,) = types("t")
    rs = RuleSet("test-bi", "", register=False)
    r = rs.birewrite("sub-as-add-neg", Tensor.sub(a, b, t), Tensor.add(a, Tensor.neg(b, t), t))
    assert r.egg_names == ("sub-as-add-neg", "sub-as-add-neg<-")
    v = T(F32, 4)
    p = prog(func("f", [v, v], lambda x, y: mk(Op.ADD, x, mk(Op.NEG, y))))
    peg = to_egraph(p)
    report = saturate(peg, rs)
    assert report.matches() == {"sub-as-add-neg": 2}  # one match each way, one name
    assert from_egraph(peg).function().results[0].op is Op.SUB  # one op beats two


def test_infer_type_gives_new_nodes_their_types():
    # factor a common operand where b and c broadcast: b + c has neither a's nor the
    # result's type, so the rule asks shapes.infer for it
    a, b, c = tensors("a b c")
    t, tb, tc = types("t tb tc")
    rs = RuleSet("test-infer", "", register=False)
    rs.rewrite("factor-broadcast",
               Tensor.add(Tensor.mul(a, b, t), Tensor.mul(a, c, t), t),
               Tensor.mul(a, Tensor.add(b, c, infer_type("add", tb, tc)), t),
               eq(tb).to(b.ty), eq(tc).to(c.ty))
    p = prog(func("f", [T(F32, 1024), T(F32, 1), T(F32, 1)], lambda x, y, z: mk(
        Op.ADD, mk(Op.MUL, x, y), mk(Op.MUL, x, z))))
    peg = to_egraph(p)
    saturate(peg, rs)
    out = extract(peg).program.function().results[0]
    assert out.op is Op.MUL and out.srcs[1].type == T(F32, 1)


def test_py_test_conditions_a_rule():
    (x,) = tensors("x")
    (t,) = types("t")
    rs = RuleSet("test-py", "", register=False)
    rs.rewrite("relu-relu-small", Tensor.relu(Tensor.relu(x, t), t), Tensor.relu(x, t),
               py_test(_is_small, t))
    small = prog(func("f", [T(F32, 4)], lambda a: mk(Op.RELU, mk(Op.RELU, a))))
    large = prog(func("f", [T(F32, 4096)], lambda a: mk(Op.RELU, mk(Op.RELU, a))))
    assert saturate(to_egraph(small), rs).matches()["relu-relu-small"] >= 1
    assert saturate(to_egraph(large), rs).matches() == {"relu-relu-small": 0}


def _is_small(type_text: str) -> bool:
    return parse_type(type_text).size <= 16


def test_same_type_filters_on_looked_up_types():
    a, b, c = tensors("a b c")
    t, tb, tc = types("t tb tc")
    rs = RuleSet("test-same", "", register=False)
    rs.rewrite("factor-same", Tensor.add(Tensor.mul(a, b, t), Tensor.mul(a, c, t), t),
               Tensor.mul(a, Tensor.add(b, c, tb), t),
               eq(tb).to(b.ty), eq(tc).to(c.ty), same_type(tb, tc))
    v, w = T(F32, 4), T(F32, 1)

    def body(x, y, z):
        return mk(Op.ADD, mk(Op.MUL, x, y), mk(Op.MUL, x, z))
    same, mixed = prog(func("f", [v, w, w], body)), prog(func("f", [v, w, v], body))
    assert saturate(to_egraph(same), rs).matches() == {"factor-same": 1}
    assert saturate(to_egraph(mixed), rs).matches() == {"factor-same": 0}


def test_infer_type_checks_attributes_and_takes_reductions():
    (t,) = types("t")
    with pytest.raises(TypeError, match="takes attributes"):
        infer_type(Op.REDUCE_SUM, t, axes="[0]")
    eg = new_egraph()
    x = Tensor.param(0, "f32[2,3]")
    eg.register(x)
    eg.run(TYPE_RULES)
    inferred = infer_type("reduce_sum", "f32[2,3]", axes="[1]", keepdims=True)
    assert eg.check_bool(eq(inferred).to("f32[2,1]"))
