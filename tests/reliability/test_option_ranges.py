"""Every option of every registered pass is checked when pipeline text is read and when a pass
is constructed in Python (issue #12 item 5): a value outside its declared range is refused up
front, the message naming the pass, the option, the value and the range, with the column of the
value; never later when an e-graph happens to be built or a kernel launched."""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass
from typing import Any, Literal

import pytest

from accy.cli import main
from accy.errors import OptionError, PipelineError
from accy.ir.program import Stage
from accy.passes.base import COUNT_MAX, OptionInfo, Pass, option
from accy.passes.registry import all_passes
from accy.passes.spec import format_value, parse_pipeline
from accy.passes.tensor.einsum_lowering import EinsumLowering
from accy.passes.tensor.indexing_lowering import IndexingLowering

PASSES = all_passes()
OPTIONS = [(name, o) for name, cls in sorted(PASSES.items()) for o in cls.options()]


def bad_values(o: OptionInfo) -> list[Any]:
    """Values of ``o``'s type (as Python values) that its declaration must refuse."""
    t = o.element_type
    out: list[Any] = []
    if t is int or t is float:
        if o.minimum is not None:
            out.append(o.minimum - 1 if t is int else o.minimum - 0.5)
        if o.above is not None:
            out.append(t(o.above))
        if o.maximum is not None:
            out.append(int(o.maximum) + 1 if t is int else o.maximum * 2)
        if t is float:
            out += [float("nan"), float("inf"), float("-inf")]
        if o.power_of_two:
            out += [3, 48]
        out = [int(v) if t is int else float(v) for v in out]
    elif typing.get_origin(t) is Literal or o.choices is not None:
        out.append("no-such-choice")
    elif t is str and o.nonempty:
        out.append("")
    if o.is_list:
        out = [(v,) for v in out] + ([()] if o.nonempty else [])
    return out


CASES = [(name, o, v) for name, o in OPTIONS for v in bad_values(o)]


def case_id(case: tuple[str, OptionInfo, Any]) -> str:
    name, o, v = case
    return f"{name}.{o.name}={format_value(v)}"


def column_of(message: str) -> int:
    m = re.match(r"column (\d+): ", message)
    assert m, message
    return int(m.group(1))


def test_every_numeric_option_has_a_range() -> None:
    """A registry walk: an int or float option (or list of them) is bounded on both sides, and
    every float option must be finite; every default is within its own range."""
    numeric = [(name, o) for name, o in OPTIONS if o.is_numeric]
    assert len(numeric) >= 20  # the walk saw the passes' counts and limits
    for name, o in numeric:
        assert o.has_range, f"{name}: option {o.name} has no declared range"
        if o.element_type is float:
            assert o.finite, f"{name}: float option {o.name} may be infinite"
        assert o.range_text, (name, o.name)
    for cls in PASSES.values():
        cls()  # every default is allowed by its declaration
        for o in cls.options():
            o.check(o.default)


def test_cases_cover_every_bounded_option() -> None:
    covered = {(name, o.name) for name, o, _ in CASES}
    for name, o in OPTIONS:
        if o.is_numeric or o.choices is not None or o.nonempty:
            assert (name, o.name) in covered, (name, o.name)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_bad_value_is_refused_at_parse_naming_pass_option_value(case) -> None:
    name, o, value = case
    shown = format_value(value)
    text = f"{name}{{{o.name}={shown}}}"
    with pytest.raises(PipelineError) as info:
        parse_pipeline(text)
    message = str(info.value)
    first = message.splitlines()[0]
    assert name in first and o.name in first, message
    item = value[0] if isinstance(value, tuple) and value else value
    assert repr(item) in first or str(item) in first or (value == () and "empty" in first), \
        message
    if o.is_numeric or o.choices is not None or o.nonempty:
        allowed = o.choices if typing.get_origin(o.element_type) is Literal else None
        assert (o.range_text in first) or (allowed and all(str(c) in first for c in allowed)), \
            message
    # the caret points at the value, just after '='
    assert column_of(message) == len(name) + len(o.name) + 3, message
    caret = message.splitlines()[-1]
    assert caret.index("^") - 2 == column_of(message) - 1, message


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_bad_value_is_refused_by_the_python_constructor(case) -> None:
    """The API and the text agree: the same value fails when the pass is made in Python."""
    name, o, value = case
    with pytest.raises(OptionError) as info:
        PASSES[name](**{o.field: value})
    message = str(info.value)
    assert f"pass {name}" in message and f"option {o.name}" in message, message
    assert isinstance(info.value, ValueError)  # callers catching ValueError still do


@pytest.mark.parametrize("text", [
    "saturate{iterations=-1}", "saturate{node-limit=0}", "saturate{time-limit=nan}",
    "saturate{max-elements=-1}", "canonicalize{time-limit=inf}", "constant-fold{node-limit=0}",
    "saturate{match-limit=-1}", "saturate{cost=\"\"}", "canonicalize{iterations=-1}",
    "constant-fold{time-limit=-1}", "constant-fold{max-elements=-1}",
    "indexing-lowering{gather-thread-blocks=4294967296}",
    "indexing-lowering{scatter-thread-blocks=2147483648}",
    "loss-lowering{row-sparse-cross-entropy-thread-blocks=4294967296}",
    "kernel-outlining-planning{work-group-size=0}", "layout-planning{alignment=3}",
    "einsum-lowering{beam-width=0}", "activation-lowering{ops=relu,swish}",
])
def test_issue_examples_are_refused_without_building_anything(text: str) -> None:
    with pytest.raises(PipelineError, match="allowed"):
        parse_pipeline("accy-contract," + text)


def test_wrong_python_types_are_refused() -> None:
    with pytest.raises(OptionError, match="expected int, got float"):
        IndexingLowering(gather_thread_blocks=1e20)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="expected int, got bool"):
        EinsumLowering(beam_width=True)
    with pytest.raises(OptionError, match="expected a tuple"):
        PASSES["saturate"](disable="mul-one")  # a str is not a list of rules
    # an int is a fine float
    assert PASSES["saturate"](time_limit=3).time_limit == 3


def test_limits_at_the_edges_are_allowed() -> None:
    p = parse_pipeline(f"indexing-lowering{{gather-thread-blocks={COUNT_MAX}}},"
                       "saturate{iterations=1 time-limit=0.001 match-limit=0}")
    assert p.passes[0].gather_thread_blocks == COUNT_MAX
    assert p.passes[1].iterations == 1


def test_subclass_post_init_still_checks_options() -> None:
    """A pass with its own __post_init__ gets the base check first, even without super()."""

    @dataclass(frozen=True)
    class Checked(Pass):
        name = "own-post-init"
        stage = Stage.contract

        n: int = option(1, "a count", minimum=1, maximum=9)

        def __post_init__(self) -> None:  # no super() call
            object.__setattr__(self, "seen", True)

    assert Checked(n=9).seen  # type: ignore[attr-defined]
    with pytest.raises(OptionError, match="option n: got 0; allowed: 1 <= n <= 9"):
        Checked(n=0)


def test_accy_passes_shows_ranges(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["passes"]) == 0
    out = capsys.readouterr().out
    assert "iterations: int [1 <= iterations <= 2147483647] = 12" in out
    assert "gather-thread-blocks: int [0 <= gather-thread-blocks <= 2147483647]" in out
    assert "extract-time-limit: float [0 < extract-time-limit <= 86400, finite]" in out
    assert "time-limit: float [0 <= time-limit <= 86400, finite] = 0.0" in out
    assert "alignment: int [1 <= alignment <= 4096, a power of two]" in out
