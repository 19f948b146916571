"""Printed random programs and pipelines read back equal; mutated text only raises the
documented errors. (Arbitrary-text fuzzing of both parsers is in tests/ir and tests/passes.)"""

from __future__ import annotations

from diff_support import examples
from hypothesis import given
from hypothesis import strategies as st

from accy.errors import IRParseError, PipelineError
from accy.ir.parser import parse_program
from accy.ir.printer import print_program
from accy.passes.spec import parse_pipeline
from accy.testing import pipelines, programs


@examples(2.0)
@given(programs(functions=(1, 3), max_nodes=8, allow_nan=True))
def test_printed_programs_read_back_equal(program) -> None:
    text = print_program(program)
    again = parse_program(text)
    assert again == program
    assert again.fingerprint() == program.fingerprint()
    assert print_program(again) == text


def mutate(text: str, data: st.DataObject, vocabulary: list[str]) -> str:
    """Delete, insert, replace or duplicate short spans of ``text``."""
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text)))
        j = data.draw(st.integers(i, min(len(text), i + 12)))
        piece = data.draw(st.one_of(st.text(max_size=4), st.sampled_from(vocabulary)))
        kind = data.draw(st.sampled_from(["delete", "insert", "replace", "duplicate"]))
        text = {"delete": text[:i] + text[j:], "insert": text[:i] + piece + text[i:],
                "replace": text[:i] + piece + text[j:],
                "duplicate": text[:j] + text[i:j] + text[j:]}[kind]
    return text


IR_WORDS = ["%0", "%a", "(", ")", "{", "}", "[", "]", ",", ":", "=", "->", "f32[2]", "i64",
            "dense<[1.0]>", "axis=0", "spec", '"ij->j"', "return", "func @g", "\n", "-1", "nan"]


@examples(1.0)
@given(programs(functions=(1, 2)), st.data())
def test_mutated_program_text_raises_only_parse_errors(program, data) -> None:
    text = mutate(print_program(program), data, IR_WORDS)
    try:
        parsed = parse_program(text)
    except IRParseError:
        return
    assert parse_program(print_program(parsed)) == parsed


@examples(1.0)
@given(pipelines())
def test_printed_pipelines_read_back_equal(pipeline) -> None:
    assert parse_pipeline(pipeline.text()) == pipeline
    assert parse_pipeline(pipeline.text(full=True)) == pipeline


@examples(1.0)
@given(pipelines(), st.data())
def test_mutated_pipeline_text_raises_only_pipeline_errors(pipeline, data) -> None:
    text = mutate(pipeline.text(full=True), data, ["{", "}", ",", "=", '"', " ", "accy-default"])
    try:
        parsed = parse_pipeline(text)
    except PipelineError:
        return
    assert parse_pipeline(parsed.text()) == parsed
