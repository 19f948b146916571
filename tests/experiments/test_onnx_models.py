"""The anchors' seven benchmark models (accy.experiments.onnx_models) at small sizes: valid
ONNX, imported, prepared and run on the OpenCL device, matching onnxruntime within the
differential tolerances; and ``accy experiment models`` on one of them."""

from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import accy  # noqa: E402
from accy.experiments import models, onnx_models  # noqa: E402

# small variants: narrow (slim), small images, one block per repeated run (depth)
SMALL = {
    "bert": {"slim": 16, "seq": 8},
    "nasrnn": {"slim": 32, "depth": 2},
    "nasneta": {"slim": 16, "image": 8, "depth": 1},
    "resnext50": {"slim": 16, "image": 32, "depth": 1},
    "squeezenet": {"slim": 16, "image": 17, "depth": 1},
    "vgg19": {"slim": 32, "image": 32, "depth": 1},
    "inception_v3": {"slim": 16, "image": 75, "depth": 1},
}


def test_every_model_has_a_small_variant():
    assert set(SMALL) == set(onnx_models.MODELS) == set(onnx_models.PAPER_BATCH)


@pytest.mark.parametrize("name", list(SMALL))
def test_small_model_matches_onnxruntime_on_the_device(device, name):
    kw = dict(SMALL[name])
    seq = kw.pop("seq", None)
    model = onnx_models.build(name, seq=seq, **kw)
    onnx.checker.check_model(model, full_check=True)  # shapes infer as the builder says
    feeds = onnx_models.inputs(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    program = accy.onnx.load(model)
    accy.verify(program)
    assert [p.type.shape for p in program.function().params] == [a.shape for a in
                                                                 feeds.values()]
    job = accy.prepare(program, models._pipeline("off"))
    got = job.run(*feeds.values(), device=device)
    check = models._check(program, list(feeds.values()), got, want, "ieee", {})
    assert check["within_tolerance"], check["problems"]
    assert check["compared"] + check["skipped"] == sum(w.size for w in want)
    assert check["compared"] > 0 or name == "bert"  # (its layer norms: see accy.experiments.models)
    assert check["max_rel_error"] <= 1e-3
    assert all(np.all(np.isfinite(w)) and np.abs(w).max() > 0 for w in want)


def test_published_shapes():
    """The real sizes (built, not run): inputs, outputs and what the papers' graphs hold."""
    vgg = onnx_models.build("vgg19", slim=64)  # slim only: the spatial sizes stay published
    shape = [d.dim_value for d in vgg.graph.input[0].type.tensor_type.shape.dim]
    assert shape == [1, 3, 224, 224]
    ops = [n.op_type for n in vgg.graph.node]
    assert ops.count("Conv") == 16 and ops.count("MaxPool") == 5 and ops.count("Gemm") == 3
    bert = onnx_models.build("bert", slim=8)
    assert [d.dim_value for d in bert.graph.input[0].type.tensor_type.shape.dim] == [1, 64, 128]
    assert {n.op_type for n in bert.graph.node} >= {"Softmax", "Erf", "ReduceMean", "MatMul"}
    rnn = onnx_models.build("nasrnn", slim=64)
    assert [i.name for i in rnn.graph.input] == [f"x{i}" for i in range(5)]
    assert sum(n.op_type == "MatMul" for n in rnn.graph.node) == 5 * 16
    inc = onnx_models.build("inception_v3", slim=32, batch=2)
    assert [d.dim_value for d in inc.graph.input[0].type.tensor_type.shape.dim] == [2, 3, 299,
                                                                                   299]
    assert onnx_models.PAPER_BATCH["inception_v3"] == 32
    rx = onnx_models.build("resnext50", slim=32)
    convs = [n for n in rx.graph.node if n.op_type == "Conv"]
    assert len(convs) == 1 + 3 * 16 + 4  # stem, three per bottleneck, four projections
    assert sum(n.op_type == "BatchNormalization" for n in rx.graph.node) == len(convs)


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="unknown model 'alexnet'"):
        onnx_models.build("alexnet")
    with pytest.raises(ValueError, match="at least 75"):
        onnx_models.build("inception_v3", image=32)
    with pytest.raises(ValueError, match="takes no image"):
        onnx_models.build("bert", image=32)
    with pytest.raises(ValueError, match="slim must be a positive integer"):
        onnx_models.build("vgg19", slim=0)


def test_a_wrong_result_is_out_of_tolerance():
    model = onnx_models.build("squeezenet", slim=16, image=17, depth=1)
    feeds = onnx_models.inputs(model)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    program = accy.onnx.load(model)
    got = [want[0].copy()]
    got[0][0, 3] += 1e-2 * np.abs(want[0]).max()
    check = models._check(program, list(feeds.values()), got, want, "ieee", {})
    assert not check["within_tolerance"] and check["max_rel_error"] > 1e-3
    assert check["compared"] == want[0].size and check["bound_rel"] > 0


def test_cli_runs_one_model_and_records_references(tmp_path, capsys):
    from accy.cli import main

    out, refs = tmp_path / "out", tmp_path / "refs"
    argv = ["experiment", "models", "--models", "squeezenet", "--image", "17", "--slim", "16",
            "--depth", "1", "--repeats", "1", "--out", str(out), "--reference", str(refs)]
    assert main(argv) == 0
    data = json.loads((out / "models.json").read_text())
    (row,) = data["rows"]
    assert row["model"] == "squeezenet" and row["image"] == 17 and row["ops"] > 0
    assert row["reference"] == "onnxruntime" and row["ort_ms"] > 0
    for which in ("saturate_on", "saturate_off"):
        r = row[which]
        assert r["within_tolerance"] is True and r["kernels"] >= 1 and r["kernel_ms"] > 0
    assert "| squeezenet | 1 | 17 |" in (out / "models.md").read_text()
    (saved,) = refs.glob("squeezenet-*.npz")
    # a second run refuses to replace the results, then checks against the saved outputs
    capsys.readouterr()
    assert main(argv) == 2 and "--force" in capsys.readouterr().err
    assert main([*argv, "--force", "--saturate", "off"]) == 0
    row = json.loads((out / "models.json").read_text())["rows"][0]
    assert row["reference"] == str(saved) and "saturate_on" not in row
    assert row["saturate_off"]["within_tolerance"] is True
    # a reference recorded for another program is refused, naming the file
    assert main([*argv, "--force", "--slim", "8"]) == 0  # its own reference file
    other = refs / saved.name.replace("-s16-", "-s8-")
    other.replace(saved)
    assert main([*argv, "--force"]) == 2
    assert "recorded for another program" in capsys.readouterr().err


def test_cli_refuses_bad_model_arguments(capsys):
    from accy.cli import main

    assert main(["experiment", "models", "--models", "squeezenet", "--reference-only"]) == 2
    assert "--reference-only needs --reference DIR" in capsys.readouterr().err
    for bad in (["--batch", "0"], ["--batch", "papers"], ["--models", "alexnet"]):
        with pytest.raises(SystemExit):
            main(["experiment", "models", *bad])
        assert bad[1] in capsys.readouterr().err


def test_references_recorded_here_serve_a_host_without_onnxruntime(monkeypatch, tmp_path):
    small = {"slim": 64, "depth": 1, "saturate": "off", "run_device": False}
    models.run(["nasrnn"], reference_dir=tmp_path, reference_only=True, **small)
    (saved,) = tmp_path.glob("nasrnn-b1-idefault-s64-d1-seed0.npz")
    real = models.importlib.util.find_spec
    monkeypatch.setattr(models.importlib.util, "find_spec",
                        lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    row = models.run(["nasrnn"], **small)["rows"][0]
    assert "onnxruntime is not installed" in row["note"] and row["ort_ms"] is None
    assert row["saturate_off"]["kernels"] >= 1
    row = models.run(["nasrnn"], reference_dir=tmp_path, **small)["rows"][0]
    assert row["reference"] == str(saved) and row["ort_ms"] > 0 and "note" not in row


def test_script_writes_onnx_files(experiment_script, tmp_path):
    script = experiment_script("onnx_models")
    paths = script.main([str(tmp_path), "--models", "vgg19,bert", "--slim", "64",
                         "--depth", "1", "--batch", "paper"])
    assert [p.name for p in paths] == ["vgg19.onnx", "bert.onnx"]
    program = accy.onnx.load(paths[0])
    assert program.function().params[0].type.shape == (1, 3, 224, 224)
    with pytest.raises(SystemExit):
        script.main([str(tmp_path), "--models", "alexnet"])


def test_warm_up_calls_for_a_time_at_least_once_and_at_most_a_count(monkeypatch):
    calls = []

    def call():
        calls.append(len(calls))
        return len(calls)

    monkeypatch.setattr(models, "WARMUP_S", 0.0)
    assert models._warm(call) == 1 and len(calls) == 1
    calls.clear()
    monkeypatch.setattr(models, "WARMUP_S", 3600.0)
    assert models._warm(call) == 1 and len(calls) == models.WARMUP_CALLS
