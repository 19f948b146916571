"""The `accy` command: demo, passes, pipeline, prepare, explain, target."""

import json

import pytest

from accy.backends.opencl.runtime import select_device
from accy.cli import main
from accy.errors import DeviceError
from accy.passes.registry import all_passes
from accy.target import CP_ASYNC, TF32_MMA, TF32_SATFINITE, TargetProfile

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
    assert capsys.readouterr().out.strip() == (
        "fusion-planning{policy=multi-output max-ops=1000 row-fusion=true attention=auto "
        "horizontal=true horizontal-max-args=64}")


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


TRANSPOSE_TWICE = """\
func @tt(%x: f32[8,4]) -> (f32[8,4]) {
  %0 = transpose(%x) {perm=[1, 0]} : f32[4,8]
  %1 = transpose(%0) {perm=[1, 0]} : f32[8,4]
  %2 = exp(%1) : f32[8,4]
  return %2
}
"""


def test_explain_shows_each_rewrite_pass(tmp_path, capsys):
    path = tmp_path / "tt.accy"
    path.write_text(TRANSPOSE_TWICE)
    assert main(["explain", str(path)]) == 0
    out = capsys.readouterr().out
    sections = out.split("\n\n")
    assert [s.splitlines()[0] for s in sections] == [
        "== constant-fold [contract] ==", "== canonicalize [contract] ==",
        "== saturate [tensor] =="]
    canon = sections[1]
    assert "stop reason: saturated after" in canon and "program replaced" in canon
    assert "iteration  e-nodes  e-classes  matches  seconds" in canon
    fired = canon.split("rules that fired (by matches):\n")[1].split("program after")[0]
    assert fired.splitlines()[0].split()[0] == "transpose-transpose"
    assert "%0 = exp(%x) : f32[8,4]" in canon and "transpose(" not in canon.split("after")[-1]
    assert "skipped: no rule matches the program" in sections[0]


def test_explain_json_with_a_pipeline(tmp_path, capsys):
    path = tmp_path / "tt.accy"
    path.write_text(TRANSPOSE_TWICE)
    assert main(["explain", str(path), "--pipeline", "canonicalize{iterations=1}", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (run,) = doc["runs"]
    assert run["pass"] == "canonicalize{iterations=1}" and run["stage"] == "contract"
    assert run["stop_reason"] == "iteration_limit" and run["iterations"] == 1
    assert [set(it) for it in run["per_iteration"]] == [
        {"e_nodes", "e_classes", "matches", "seconds", "kept"}]
    assert [r["name"] for r in run["rules"]] == ["transpose-transpose"]
    assert run["rules"][0]["matches"] >= 1
    assert run["cost_after"] < run["cost_before"] and run["changed"]
    # one iteration: the two transposes composed into one; transpose-identity needs another
    assert run["program"].splitlines()[1:3] == ["  %0 = transpose(%x) {perm=[0, 1]} : f32[8,4]",
                                                "  %1 = exp(%0) : f32[8,4]"]


def test_explain_reports_bad_input(tmp_path, capsys):
    path = tmp_path / "tt.accy"
    path.write_text(TRANSPOSE_TWICE)
    assert main(["explain", str(path), "--pipeline", "saturate{rulesets=nope}"]) == 2
    assert "valid rule sets" in capsys.readouterr().err
    path.write_text(TRANSPOSE_TWICE.replace("exp(", "exq("))
    assert main(["explain", str(path)]) == 2
    assert "exq" in capsys.readouterr().err
    assert main(["explain", str(tmp_path / "missing.accy")]) == 2
    assert "No such file" in capsys.readouterr().err


def test_bugs_keep_their_traceback(monkeypatch, capsys):
    # only mistakes in the input become one-line errors; an accy bug must stay visible
    import accy.cli

    def broken(args):
        raise RuntimeError("a bug")

    parser = accy.cli.build_parser()
    monkeypatch.setattr(accy.cli, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["passes"].set_defaults(run=broken)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["passes"])


def test_bad_until_is_an_argument_error(tmp_path, capsys):
    path = tmp_path / "add_mul.accy"
    path.write_text(ADD_MUL)
    with pytest.raises(SystemExit) as e:
        main(["prepare", str(path), "--until", "kernels"])
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "accy prepare: error: argument --until: unknown stage 'kernels'; valid stages: "
        "semantic, contract, tensor, dispatch, memory, kernel, target")
    assert main(["prepare", str(path), "--until", "dispatch"]) == 0


MATMUL = """\
func @mm(%a: f32[512,512], %b: f32[512,512]) -> (f32[512,512]) {
  %0 = einsum(%a, %b) {spec="ij,jk->ik"} : f32[512,512]
  return %0
}
"""


def test_target_saves_a_profile_that_prepare_plans_for(tmp_path, capsys):
    """accy target --save writes the device's profile; --load prints it back the same;
    prepare --target plans for a saved profile without its device: an H100-like one (TF32
    tensor cores probed) gives the product mma.sync, the generic profile does not."""
    saved = tmp_path / "device.json"
    assert main(["target", "--save", str(saved)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert main(["target", "--load", str(saved)]) == 0
    assert capsys.readouterr().out.splitlines() == [first]
    h100 = tmp_path / "h100.json"
    TargetProfile(device="H100-like", max_work_group_size=1024, local_mem_bytes=49152,
                  compute_units=132, tensor_cores=(TF32_MMA, CP_ASYNC, TF32_SATFINITE)
                  ).save(h100)
    program = tmp_path / "mm.accy"
    program.write_text(MATMUL)
    assert main(["prepare", str(program), "--target", str(h100), "--emit-source"]) == 0
    assert "mma.sync.aligned" in capsys.readouterr().out
    assert main(["prepare", str(program), "--emit-source"]) == 0
    assert "mma.sync" not in capsys.readouterr().out


@pytest.mark.parametrize("argv, words", [
    (["target", "--load", "{missing}"], ["missing.json", "No such file"]),
    (["target", "--load", "{bad}"], ["bad.json", "field 'compute_units'", "expected int"]),
    (["target", "--load", "{bad}", "--save", "{missing}"], ["not with --device or --save"]),
    (["prepare", "{program}", "--target", "{bad}"], ["bad.json", "'compute_units'"]),
    (["prepare", "{program}", "--target", "{bad}", "--device", "pocl"],
     ["not with --device, --build or --load"]),
])
def test_bad_saved_profiles_are_one_error_line(tmp_path, capsys, argv, words):
    paths = {"missing": tmp_path / "missing.json", "bad": tmp_path / "bad.json",
             "program": tmp_path / "mm.accy"}
    paths["bad"].write_text('{"compute_units": "132"}')
    paths["program"].write_text(MATMUL)
    assert main([a.format(**paths) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"accy {argv[0]}: error: ") and len(err.splitlines()) == 1
    assert all(w in err for w in words), err
