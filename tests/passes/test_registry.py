"""Registry conformance: every pass, pipeline and analysis is well formed."""

import dataclasses
import inspect
import pathlib

import pytest

from accy.ir.program import Stage
from accy.passes.analysis import ANALYSES
from accy.passes.base import Pass
from accy.passes.pipelines import PIPELINES
from accy.passes.registry import all_passes, lookup, register
from accy.passes.spec import parse_pipeline


@pytest.mark.parametrize("name", sorted(all_passes()))
def test_pass_is_well_formed(name):
    cls = all_passes()[name]
    assert cls.name == name and name == name.lower() and "_" not in name
    assert isinstance(cls.stage, Stage) and cls.stage is not Stage.semantic
    assert cls.summary(), f"{name} needs a docstring whose first line is its summary"
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    # one name per concept: the module file is the pass name in snake_case, under its stage
    path = pathlib.Path(inspect.getfile(cls))
    assert path.stem == name.replace("-", "_") and path.parent.name == cls.stage.value
    for o in cls.options():
        assert o.doc, f"option {o.name} of {name} needs a doc"
        assert getattr(cls(), o.field) == o.default
    for analysis in cls.preserves:
        assert analysis in ANALYSES, f"{name} preserves unknown analysis {analysis}"


def test_duplicate_pass_names_are_errors():
    existing = all_passes()["constant-fold"]
    with pytest.raises(ValueError, match="already registered"):
        register(type("Again", (existing,), {}))


def test_unknown_pass_lists_valid_ones():
    with pytest.raises(KeyError, match="valid passes: .*constant-fold"):
        lookup("no-such-pass")


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_named_pipeline_expands_in_stage_order(name):
    pipeline = parse_pipeline(name)
    stages = [p.stage.index for p in pipeline.passes]
    assert stages == sorted(stages)
    stage = PIPELINES[name].stage
    if stage is not None:
        assert all(p.stage is stage for p in pipeline.passes)


def test_default_pipeline_runs_every_registered_pass():
    default = {p.name for p in parse_pipeline("accy-default").passes}
    assert default == set(all_passes())


def test_pass_base_is_not_registered():
    assert Pass not in all_passes().values()
