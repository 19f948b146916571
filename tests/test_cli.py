"""The `accy` command: demo, passes, pipeline, prepare."""

import pytest

from accy.backends.opencl.runtime import select_device
from accy.cli import main
from accy.errors import DeviceError
from accy.passes.registry import all_passes

ADD_MUL = """\
func @add_mul(%a: f32[4], %b: f32[4], %c: f32[4]) -> (f32[4], f32[4]) {
  %0 = add(%a, %b) : f32[4]
  %1 = mul(%0, %c) : f32[4]
  return %0, %1
}
"""


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for command in ("demo", "passes", "pipeline", "prepare"):
        assert command in out


def test_passes_lists_every_pass_with_options(capsys):
    assert main(["passes"]) == 0
    out = capsys.readouterr().out
    for name, cls in all_passes().items():
        assert name in out
        for o in cls.options():
            assert f"{o.name}: {o.type_text}" in out
    assert "accy-default" in out


def test_pipeline_prints_canonical_text(capsys):
    assert main(["pipeline", " accy-dispatch , layout-planning{alignment=64}"]) == 0
    assert capsys.readouterr().out.strip() == "fusion-planning,schedule-planning,layout-planning"
    assert main(["pipeline", "fusion-planning{policy=multi-output}", "--full"]) == 0
    assert capsys.readouterr().out.strip() == "fusion-planning{policy=multi-output}"


def test_pipeline_error_points_at_column(capsys):
    assert main(["pipeline", "fusion-planning{policy=bogus}"]) == 2
    err = capsys.readouterr().err
    assert "column 24" in err and "allowed values: single-output, multi-output" in err


def test_prepare_with_instruments(tmp_path, capsys):
    path = tmp_path / "add_mul.accy"
    path.write_text(ADD_MUL)
    assert main(["prepare", str(path), "--print-ir-after-all", "--timing", "--statistics",
                 "--emit-source"]) == 0
    out = capsys.readouterr().out
    assert "// ----- IR after fusion-planning (stage dispatch) -----" in out
    assert "Pass execution timing report" in out
    assert "Pass statistics" in out and "slots: 5" in out
    assert "__kernel void add_kernel(" in out and "__kernel void mul_kernel(" in out


def test_prepare_reports_bad_ir(tmp_path, capsys):
    path = tmp_path / "bad.accy"
    path.write_text(ADD_MUL.replace("mul(", "mull("))
    assert main(["prepare", str(path)]) == 2
    assert "mull" in capsys.readouterr().err


def test_demo_runs_on_the_default_device(capsys):
    try:
        select_device()
    except DeviceError as e:
        pytest.skip(f"no OpenCL device: {e}")
    assert main(["demo", "--size", "4096", "--no-source"]) == 0
    out = capsys.readouterr().out
    assert "add_mul_sub_max" in out
    assert "worst relative error over all programs: 0" in out
