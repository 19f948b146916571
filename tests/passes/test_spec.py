"""Pipeline text: parse/print round trips, named pipelines, and the errors bad text gives."""

import re
import typing
from dataclasses import dataclass
from typing import Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accy.errors import PipelineError
from accy.ir.program import Stage
from accy.passes import registry
from accy.passes.base import Pass, option
from accy.passes.pipelines import PIPELINES
from accy.passes.registry import all_passes
from accy.passes.spec import Pipeline, parse_pipeline

PASSES = all_passes()


def non_default(info) -> object:
    """A value of ``info``'s type that differs from its default and is within its range."""
    t, default = info.type, info.default
    if typing.get_origin(t) is Literal:
        return next(c for c in typing.get_args(t) if c != default)
    if t is bool:
        return not default
    if t is int:
        candidates = [default * 2 + 1, default * 2, default + 1, default - 1]
    elif t is float:
        candidates = [default + 0.25, default / 2]
    elif t is str:
        candidates = [default + " x,{y}", *(info.choices or ())]
    elif info.is_list:
        sample = {str: ("a b",), int: (1,), float: (0.5,), bool: (True,)}
        if info.names is not None:  # names the rule registry must know
            sample = {str: ("canonical",) if info.names == "rule-sets" else ("neg-neg",)}
        candidates = [(), (info.choices or sample[info.element_type])[:1]]
    else:
        raise AssertionError(f"no non-default value for option type {t}")
    for value in candidates:
        try:
            info.check(value)
        except ValueError:
            continue
        if value != default:
            return value
    raise AssertionError(f"no non-default value in the range of {info.name}")


def round_trips(p: Pipeline) -> None:
    assert parse_pipeline(p.text()) == p
    assert parse_pipeline(p.text(full=True)) == p
    assert parse_pipeline(str(p)) == p


def parse_error(text: str) -> str:
    with pytest.raises(PipelineError) as info:
        parse_pipeline(text)
    return str(info.value)


def column_of(message: str) -> int:
    m = re.match(r"column (\d+): ", message)
    assert m, f"no column in {message!r}"
    return int(m.group(1))


def caret_column(message: str, text: str) -> int:
    """The 1-based column the caret line points at, checked against the echoed text."""
    lines = message.splitlines()
    assert lines[-2] == "  " + text, lines
    caret = lines[-1]
    assert caret.strip() == "^", caret
    return len(caret) - len("  ")


def assert_points_at(text: str, column: int) -> str:
    message = parse_error(text)
    assert column_of(message) == column, message
    assert caret_column(message, text) == column, message
    return message


# round trips ------------------------------------------------------------------------------


def test_registry_has_every_stage_pass() -> None:
    assert {
        "constant-fold", "fusion-planning", "schedule-planning", "bufferization-planning",
        "layout-planning", "kernel-outlining-planning", "kernelization", "backend-legalization",
    } <= set(PASSES)
    for name, cls in PASSES.items():
        assert cls.name == name
        assert name == name.lower() and "_" not in name
        assert isinstance(cls.stage, Stage)


@pytest.mark.parametrize("name", sorted(PASSES))
def test_round_trip_default_options(name: str) -> None:
    cls = PASSES[name]
    p = Pipeline((cls(),))
    assert p.text() == name  # defaults are not printed
    round_trips(p)
    full = p.text(full=True)
    for o in cls.options():
        assert f"{o.name}=" in full
    assert parse_pipeline(name) == p


@pytest.mark.parametrize("name", sorted(n for n, c in PASSES.items() if c.options()))
def test_round_trip_non_default_options(name: str) -> None:
    cls = PASSES[name]
    options = cls.options()
    for o in options:  # one option changed at a time
        p = Pipeline((cls(**{o.field: non_default(o)}),))
        assert p.text().startswith(name + "{" + o.name + "=")
        round_trips(p)
    every = cls(**{o.field: non_default(o) for o in options})
    p = Pipeline((every,))
    assert p.text() == p.text(full=True)
    round_trips(p)


def test_round_trip_all_passes_in_one_pipeline() -> None:
    passes = []
    for name in sorted(PASSES, key=lambda n: PASSES[n].stage.index):
        cls = PASSES[name]
        passes.append(cls(**{o.field: non_default(o) for o in cls.options()}))
    p = Pipeline(tuple(passes))
    round_trips(p)
    assert len(parse_pipeline(p.text())) == len(PASSES)


def test_mlir_option_syntax_and_whitespace() -> None:
    p = parse_pipeline(
        "  kernel-outlining-planning{ work-group-size=64   max-name-ops=3 } , "
        "fusion-planning{policy=multi-output}  "
    )
    assert p.text() == ("kernel-outlining-planning{work-group-size=64 max-name-ops=3},"
                        "fusion-planning{policy=multi-output}")
    (k, f) = p.passes
    assert (k.work_group_size, k.max_name_ops, f.policy) == (64, 3, "multi-output")
    assert parse_pipeline("bufferization-planning{reuse=false}").passes[0].reuse is False
    assert parse_pipeline("") == Pipeline(())
    assert parse_pipeline("   ") == Pipeline(())
    assert parse_pipeline("constant-fold{}") == Pipeline((PASSES["constant-fold"](),))


def test_option_order_in_text_is_declaration_order() -> None:
    p = parse_pipeline("kernel-outlining-planning{max-name-ops=2 work-group-size=32}")
    assert p.text() == "kernel-outlining-planning{work-group-size=32 max-name-ops=2}"


# named pipelines --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_named_pipeline_parses_and_expands(name: str) -> None:
    named = PIPELINES[name]
    p = parse_pipeline(name)
    assert p == parse_pipeline(named.text)
    assert all(isinstance(x, Pass) for x in p.passes)
    if named.stage is not None:
        assert all(x.stage is named.stage for x in p.passes)
    # expansion prints as its passes and reads back the same
    round_trips(p)


def test_default_pipeline_expands_in_stage_order() -> None:
    p = parse_pipeline("accy-default")
    names = [x.name for x in p.passes]
    assert names[0] == "constant-fold" and names[-1] == "backend-legalization"
    indices = [x.stage.index for x in p.passes]
    assert indices == sorted(indices)
    stage_pipelines = [n for n, q in PIPELINES.items() if q.stage is not None]
    expected = []
    for stage in Stage:
        for n in stage_pipelines:
            if PIPELINES[n].stage is stage:
                expected.extend(parse_pipeline(n).passes)
    assert list(p.passes) == expected


def test_named_pipelines_mix_with_passes() -> None:
    p = parse_pipeline("accy-contract,fusion-planning{policy=multi-output},schedule-planning")
    assert [x.name for x in p.passes] == ["constant-fold", "canonicalize", "fusion-planning",
                                          "schedule-planning"]
    assert p.passes[2].policy == "multi-output"


# errors -----------------------------------------------------------------------------------


def test_unknown_pass_lists_valid_names() -> None:
    message = assert_points_at("constant-fold,bogus-pass", 15)
    assert "bogus-pass" in message
    for name in PASSES:
        assert name in message
    for name in PIPELINES:
        assert name in message


def test_unknown_option_lists_options_and_types() -> None:
    message = assert_points_at("kernel-outlining-planning{nope=1}", 27)
    assert "'nope'" in message
    assert "work-group-size (int)" in message
    assert "max-name-ops (int)" in message
    message = assert_points_at("fusion-planning{strategy=x}", 17)
    assert "policy (single-output|multi-output)" in message
    message = parse_error("schedule-planning{x=1}")
    assert "none" in message  # a pass without options says so


def test_bad_literal_lists_allowed_values() -> None:
    message = assert_points_at("fusion-planning{policy=bogus}", 24)
    assert "'bogus'" in message
    assert "single-output" in message and "multi-output" in message
    assert "policy" in message


def test_bad_int() -> None:
    message = assert_points_at("constant-fold{max-elements=lots}", 28)
    assert "integer" in message and "'lots'" in message
    assert_points_at("layout-planning{alignment=1.5}", 27)


def test_bad_bool() -> None:
    message = assert_points_at("bufferization-planning{reuse=yes}", 30)
    assert "true or false" in message and "'yes'" in message
    assert_points_at("bufferization-planning{reuse=True}", 30)


def test_duplicate_option() -> None:
    message = assert_points_at("constant-fold{max-elements=1 max-elements=2}", 30)
    assert "twice" in message and "max-elements" in message


def test_missing_closing_brace() -> None:
    text = "constant-fold{max-elements=1"
    message = assert_points_at(text, len(text) + 1)
    assert "'}'" in message and "constant-fold" in message
    assert_points_at("constant-fold{", 15)


def test_options_on_named_pipeline() -> None:
    message = assert_points_at("accy-dispatch{policy=multi-output}", 14)
    assert "accy-dispatch" in message and "no options" in message


def test_trailing_garbage() -> None:
    message = assert_points_at("constant-fold junk", 15)
    assert "','" in message
    assert_points_at("constant-fold}", 14)
    assert_points_at("constant-fold{max-elements=1}x", 30)
    assert_points_at("constant-fold,", 15)  # a name must follow the comma
    assert_points_at(",constant-fold", 1)


def test_missing_equals_and_unterminated_quote() -> None:
    assert "'='" in assert_points_at("constant-fold{max-elements}", 27)
    assert "unterminated" in assert_points_at('constant-fold{max-elements="1}', 28)


def test_error_is_single_pipelineerror_class() -> None:
    with pytest.raises(PipelineError):
        parse_pipeline("accy-default,,")


# a pass with every option type (registered for the test only) -----------------------------


@dataclass(frozen=True)
class _Toy(Pass):
    """A test-only pass with every option type pipeline text supports."""

    name = "toy-options"
    stage = Stage.contract

    label: str = option("x", "a label")
    scale: float = option(1.0, "a float", finite=False)  # inf and nan round-trip too
    sizes: tuple[int, ...] = option((1, 2), "ints")
    modes: tuple[Literal["p", "q"], ...] = option(("p",), "choices")
    words: tuple[str, ...] = option(("a",), "strings")


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> type[_Toy]:
    monkeypatch.setitem(registry.PASSES, _Toy.name, _Toy)
    return _Toy


@pytest.mark.parametrize("kwargs", [
    {"label": "a b"}, {"label": ""}, {"label": 'q"u{o}t,e'}, {"label": "back\\slash"},
    {"label": "true"}, {"label": " lead"}, {"scale": 1e-7}, {"scale": -2.5},
    {"scale": float("inf")}, {"sizes": ()}, {"sizes": (5,)}, {"sizes": (3, -1, 0)},
    {"modes": ("q", "p")}, {"modes": ()}, {"words": ("b", "c")}, {"words": ()},
])
def test_round_trip_every_option_type(toy, kwargs) -> None:
    round_trips(Pipeline((toy(**kwargs),)))


def test_list_option_errors(toy) -> None:
    assert "allowed values: p, q" in parse_error("toy-options{modes=p,r}")
    assert "integer" in parse_error("toy-options{sizes=1,x}")
    assert "number" in parse_error("toy-options{scale=abc}")
    assert "list of int" in parse_error("toy-options{zzz=1}")


@pytest.mark.parametrize("words", [("a b", "c"), ("a,b",), ("",)])
def test_round_trip_list_of_str_with_special_items(toy, words) -> None:
    round_trips(Pipeline((toy(words=words),)))


@pytest.mark.parametrize("label", ["a\tb", "a\nb", "tail\t"])
def test_round_trip_str_with_other_whitespace(toy, label) -> None:
    round_trips(Pipeline((toy(label=label),)))
    round_trips(Pipeline((toy(words=(label,)),)))


# fuzzing ----------------------------------------------------------------------------------

_TOKENS = st.sampled_from([
    *PASSES, *PIPELINES, "max-elements", "policy", "reuse", "alignment", "work-group-size",
    "max-name-ops", "{", "}", ",", "=", " ", '"', "\\", "1", "-1", "true", "false",
    "multi-output", "1e3", "1_0", "\t", "\n", "\u00e9", "\x00",
])


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.text(max_size=40), st.lists(_TOKENS, max_size=20).map("".join)))
def test_parse_raises_only_pipelineerror(text: str) -> None:
    try:
        p = parse_pipeline(text)
    except PipelineError:
        return
    round_trips(p)


def test_replacing_changes_one_pass_of_a_named_pipeline():
    base = parse_pipeline("accy-default")
    changed = base.replacing("loss-lowering{kernel-library=disabled},kernelization{disable="
                             "loop-nest}")
    assert len(changed) == len(base)
    differ = [(a.name, b) for a, b in zip(base.passes, changed.passes, strict=True) if a != b]
    assert [name for name, _ in differ] == ["loss-lowering", "kernelization"]
    assert "loss-lowering{kernel-library=disabled}" in changed.text()
    assert parse_pipeline(changed.text()) == changed
    with pytest.raises(PipelineError, match="runs no such pass"):
        parse_pipeline("accy-tensor").replacing("kernelization")
