"""The backend-neutral kernel IR and the OpenCL renderer's tables: every work-item kind and math
op the IR allows renders, unknown names are refused with the known ones, inline PTX only for
targets that built it."""

from __future__ import annotations

import dataclasses

import pytest

from accy.backends.opencl.render import MATH_FUNCTIONS, WORK_ITEM_FUNCTIONS, expr, render
from accy.errors import CapabilityMismatchError
from accy.ir.types import DType
from accy.kernels.ir import (
    BINARY_OPS,
    MATH_OPS,
    UNARY_OPS,
    WORK_ITEM_KINDS,
    Bin,
    Call,
    Id,
    InlineAsm,
    Kernel,
    KernelArg,
    Let,
    Store,
    Un,
    Var,
)
from accy.plans import LaunchGeometry, ScheduleKind
from accy.target import TF32_MMA, TargetProfile


def test_every_math_op_has_an_opencl_function() -> None:
    assert set(MATH_FUNCTIONS) == set(MATH_OPS)


def test_every_work_item_kind_has_an_opencl_function() -> None:
    assert set(WORK_ITEM_FUNCTIONS) == set(WORK_ITEM_KINDS)


@pytest.mark.parametrize("name", sorted(MATH_OPS))
def test_each_math_op_renders_through_the_table(name: str) -> None:
    arity = MATH_OPS[name][0]
    args = tuple(Var(f"x{i}") for i in range(arity))
    assert expr(Call(name, args)) == f"{MATH_FUNCTIONS[name]}({', '.join(a.name for a in args)})"


def test_the_opencl_spellings() -> None:
    """The table maps the neutral names to OpenCL C's (the kernel-diff snapshot pins the rest)."""
    assert expr(Id("global", 0)) == "(long)get_global_id(0)"
    assert expr(Id("local", 1)) == "(long)get_local_id(1)"
    assert expr(Id("group", 2)) == "(long)get_group_id(2)"
    assert expr(Id("local_size", 0)) == "(long)get_local_size(0)"
    assert expr(Id("num_groups", 0)) == "(long)get_num_groups(0)"
    assert expr(Id("global_size", 0)) == "(long)get_global_size(0)"
    assert expr(Call("bitcast_f32", (Var("b"),))) == "as_float(b)"
    assert expr(Call("bitcast_i32", (Var("f"),))) == "as_int(f)"
    assert expr(Call("min", (Var("a"), Var("b")))) == "min(a, b)"


@pytest.mark.parametrize("old,new", [("get_global_id", "Id('global', d)"),
                                     ("get_local_id", "Id('local', d)"),
                                     ("get_group_id", "Id('group', d)")])
def test_old_work_item_spellings_are_refused_with_the_new_one(old: str, new: str) -> None:
    with pytest.raises(ValueError, match=r"unknown kernel-IR work-item kind") as err:
        Id(old, 0)
    assert new in str(err.value) and "global, local, group" in str(err.value)


def test_unknown_math_op_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown kernel-IR math op 'expm1'.*exp, log"):
        Call("expm1", (Var("x"),))
    with pytest.raises(ValueError, match=r"write Call\('bitcast_f32'"):
        Call("as_float", (Var("x"),))


def test_math_op_arity_is_checked() -> None:
    with pytest.raises(ValueError, match="'fma' takes 3 operands, not 2"):
        Call("fma", (Var("a"), Var("b")))


def test_work_item_dimension_is_checked() -> None:
    with pytest.raises(ValueError, match="dimension 3 is not 0, 1 or 2"):
        Id("global", 3)


def test_operators_are_checked() -> None:
    assert {"+", "&&", "%", "<<", "&"} <= BINARY_OPS and UNARY_OPS == {"-", "!"}
    with pytest.raises(ValueError, match="unknown kernel-IR binary operator '\\*\\*'"):
        Bin("**", Var("a"), Var("b"))
    with pytest.raises(ValueError, match="unknown kernel-IR unary operator '~'"):
        Un("~", Var("a"))


def test_a_name_missing_from_the_render_table_is_a_clear_error(monkeypatch) -> None:
    from accy.backends.opencl import render as r

    monkeypatch.setattr(r, "MATH_FUNCTIONS", {k: v for k, v in MATH_FUNCTIONS.items()
                                              if k != "erf"})
    with pytest.raises(ValueError, match="OpenCL renderer has no form for the math op 'erf'"):
        r.expr(Call("erf", (Var("x"),)))


def _asm_kernel() -> Kernel:
    body = (Let("bits", DType.i32, Call("bitcast_i32", (Var("x"),)), True),
            InlineAsm("cvt.rna.tf32.f32 %0, %1;", (("=r", "bits"),), (("f", Var("x")),), False),
            Store("out0", Id("global", 0), Call("bitcast_f32", (Var("bits"),))))
    body = (Let("x", DType.f32, Var("in0_0")),) + body
    return Kernel("k", 0, ScheduleKind.flat, (1,),
                  (KernelArg("out0", DType.f32, True, 0),), body, LaunchGeometry((1,), (1,)))


def test_inline_ptx_renders_only_for_targets_that_built_it() -> None:
    k = _asm_kernel()
    nvidia = dataclasses.replace(TargetProfile(), tensor_cores=(TF32_MMA,))
    src = render(k, nvidia)
    assert 'asm("cvt.rna.tf32.f32 %0, %1;"' in src and src == render(k)
    with pytest.raises(CapabilityMismatchError, match="inline PTX.*tensor_cores"):
        render(k, TargetProfile())
    # a kernel without inline assembly renders for any target
    plain = dataclasses.replace(k, body=(Store("out0", Id("global", 0), Var("y")),))
    assert render(plain, TargetProfile()) == render(plain)


def test_a_local_named_as_an_argument_is_refused() -> None:
    k = _asm_kernel()
    shadow = dataclasses.replace(k, body=(Let("out0", DType.f32, Var("y")),
                                          Store("out0", Id("global", 0), Var("out0"))))
    with pytest.raises(ValueError, match="k: its body declares out0, the name of an argument"):
        render(shadow)
