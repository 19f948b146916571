"""``accy experiment costs``: the summary's statistics, and a smoke run at the tiny size."""

from __future__ import annotations

import json

import pytest

from accy.experiments import calibrate as cal
from accy.experiments import costs
from accy.experiments.runner import SweepOptions


def row(program, fingerprint, ms, cost, variant="v", policy="single-output"):
    return {"program": program, "priced_fingerprint": fingerprint, "policy": policy,
            "variant": variant, "kernels": 1, "measured": {"kernel_ms": ms},
            "cost": {"flops-bytes": cost, "kernels": -cost}}


def test_summary_ranks_merges_duplicates_and_judges_pairs():
    rows = [row("a", f"f{i}", ms, 10 * i, variant=f"v{i}")
            for i, ms in enumerate([1.0, 2.0, 3.0, 4.0])]
    rows.append(row("a", "f3", 6.0, 30, variant="again"))  # same priced program: merged
    rows.append(row("a", "f3", 1.5, 30, policy="multi-output"))  # another policy: a point
    s = costs.summarize(rows)
    (pts,) = s["programs"].values()
    assert len(pts) == 5
    merged = [p for p in pts if p["variants"] == ["again", "v3"]]
    assert merged and merged[0]["ms"] == 5.0  # median of 4 and 6
    fb, k = s["models"]["flops-bytes"], s["models"]["kernels"]
    assert fb["points"] == 5 and -1 <= fb["spearman"] <= 1
    assert fb["spearman"] == pytest.approx(-k["spearman"])
    assert 0 <= fb["pairs"] <= 1 and fb["pairs"] + k["pairs"] == pytest.approx(1.0)
    assert costs.spearman([1, 2], [1, 2]) is None  # too few points
    assert costs.spearman([1, 1, 1], [1, 2, 3]) is None  # a constant side
    text = "\n".join(costs.tables({"summary": s}))
    assert "| flops-bytes |" in text and "again, v3" in text


def test_variants_edit_the_rewrite_and_fusion_passes():
    assert "saturate" not in costs.pipeline_for("unsaturated")
    assert "saturate{cost=measured:nvidia}" in costs.pipeline_for("measured", "nvidia")
    assert "policy=multi-output" in costs.pipeline_for("multi-output")
    assert "fast-math=true" in costs.pipeline_for("fast-math-kernels")


def test_costs_experiment_smoke(tmp_path, monkeypatch, device):
    """Tiny sizes, two programs, a fixture calibration (a fake clock): the sweep runs, every
    row prices its program under every model, the summary has every model."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def timer(program, runtime, repeats):
        s = cal.samples_of(program.function().name.rstrip("0123456789"), program)
        return 1000 + 0.01 * s["bytes"] + 0.001 * (s["flops"] + s["cheap"])

    path = cal.calibrate(None, quick=True, timer=timer)
    options = SweepOptions(suite="ci", programs=("softmax_xent", "matrix_chain"), workers=0,
                           repeats=1, show_progress=False)
    result = costs.run(options, calibration=str(path),
                       variants=("unsaturated", "saturated", "measured"))
    assert not result["failed"]
    assert len(result["rows"]) == 6
    for r in result["rows"]:
        assert set(r["cost"]) == set(costs.MODELS) and r["correct"] is True
        assert r["measured"]["kernel_ms"] > 0
    assert set(result["summary"]["models"]) == set(costs.MODELS)
    json.dumps(result)  # the result document is JSON
    # compile only: no times, so no points, and nothing needs a device or calibration
    dry = costs.run(SweepOptions(suite="ci", programs=("matrix_chain",), workers=0,
                                 run=False, show_progress=False))
    assert all(r["variant"] not in ("measured", "fast-math-measured") for r in dry["rows"])
    assert dry["summary"]["programs"] == {}


def test_the_kernel_group_view_sees_the_fusion_policy():
    """NasRNN saturated: multi-output splits the cell's elementwise work into many kernels
    where single-output makes one. Extraction's cost (the saturated program) is the same for
    both; the kernel-group cost pays the extra launches."""
    import accy
    from accy.egraph.cost import cost_model, program_cost
    from accy.experiments.suite import benchmark

    model = cost_model("kernels")  # nominal: a 5 us launch, no elementwise fit (reduce's)
    program = benchmark("nasrnn").program("ci")
    captures = {v: costs._Capture() for v in ("saturated", "multi-output")}
    jobs = {v: accy.prepare(program, costs.pipeline_for(v), instruments=[c])
            for v, c in captures.items()}
    single, multi = jobs["saturated"], jobs["multi-output"]
    assert multi.kernel_count > single.kernel_count
    assert program_cost(captures["saturated"].program, model) == program_cost(
        captures["multi-output"].program, model)
    extra = costs.group_cost(multi.product, model) - costs.group_cost(single.product, model)
    launches = (multi.kernel_count - single.kernel_count) * model.kinds["reduce"].launch
    assert extra == pytest.approx(launches, rel=0.25)  # launches, and a few bytes more


def test_a_single_kernel_costs_its_ops_in_the_group_view():
    import accy
    from accy.builder import trace
    from accy.egraph.cost import cost_model, program_cost

    model = cost_model("kernels")
    one = accy.prepare(trace(lambda x: (x * 2.0).sum(axes=-1), accy.f32[64, 64], name="g"),
                       costs.pipeline_for("unsaturated"))
    assert one.kernel_count == 1  # the multiply is the reduction's prologue: no bytes more
    assert costs.group_cost(one.product, model) == program_cost(one.product.program, model)


def test_cost_ablation_reprices_a_run_without_each_part(experiment_script, tmp_path,
                                                        monkeypatch, device):
    """experiments/cost_ablation.py: the ablated models lack what they say, and a run's rows
    (here made up: times of a fake clock) are prepared again and summarized per model."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    from accy.egraph.kernel_cost import load_calibration

    def timer(program, runtime, repeats):
        s = cal.samples_of(program.function().name.rstrip("0123456789"), program)
        return 1000 + 0.01 * s["bytes"] + 0.001 * (s["flops"] + s["cheap"])

    path = cal.calibrate(None, quick=True, timer=timer)
    script = experiment_script("cost_ablation")
    models = script.ablations(load_calibration(path))
    assert models["-element-ops"].element_ops == {} and models["measured"].element_ops
    assert not any(k.startswith("contraction:") for k in models["-shape-classes"].kinds)
    assert all(not f.points for f in models["-interpolation"].kinds.values())
    rows = [{"program": "matrix_chain", "size": "ci", "variant": v, "policy": "single-output",
             "pipeline": costs.pipeline_for(v), "priced_fingerprint": v, "kernels": 1,
             "measured": {"kernel_ms": ms}}
            for v, ms in (("unsaturated", 3.0), ("saturated", 2.0), ("fast-math", 1.0))]
    results, out = tmp_path / "costs.json", tmp_path / "ablation.json"
    results.write_text(json.dumps({"rows": rows, "calibration": str(path)}))
    assert script.main([str(results), "--out", str(out)]) == 0
    summary = json.loads(out.read_text())
    assert set(summary) == set(models) and all(s["points"] == 3 for s in summary.values())


def test_the_group_view_charges_one_launch_per_kernel():
    """A layernorm's two row reductions run as one kernel: the group view pays one launch
    for it where pricing its ops pays two."""
    import accy
    from accy.builder import trace
    from accy.egraph.cost import cost_model, program_cost

    def layernorm(x):
        mu = x.mean(axes=-1, keepdims=True)
        xc = x - mu
        return xc / ((xc * xc).mean(axes=-1, keepdims=True) + 1e-5).sqrt()

    model = cost_model("kernels")
    job = accy.prepare(trace(layernorm, accy.f32[64, 256], name="ln"),
                       costs.pipeline_for("unsaturated"))
    assert job.kernel_count == 1
    saved = program_cost(job.product.program, model) - costs.group_cost(job.product, model)
    assert saved == pytest.approx(model.kinds["reduce"].launch, rel=0.05)
