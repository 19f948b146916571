"""The kernel cost models: ``kernels`` (analytical: launches and fusion) and ``measured``
(calibrated per device, cached on disk, reloaded). No test depends on the machine's speed:
calibrations here are timed by a fake clock, except one that checks a real (tiny) PoCL
calibration only for what it must be (a file, fits, a usable model)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

import accy
from accy.builder import cross_entropy, einsum, gather, trace
from accy.egraph import kernel_cost as kc
from accy.egraph.cost import cost_model, program_cost
from accy.experiments import calibrate as cal
from accy.ir.ops import Op

f32 = accy.f32


def tr(fn, *types):
    return trace(fn, *types, name="f")


KERNELS = cost_model("kernels")
LAUNCH = KERNELS.kinds["reduce"].launch


def own(model, program, op_name):
    """The model's cost of the one node of ``op_name`` in ``program``."""
    (node,) = [n for n in program.nodes() if n.op.value == op_name]
    return model.node_cost(node.op, node.type, tuple(s.type for s in node.srcs),
                           dict(node.attrs))


# ---- the analytical model --------------------------------------------------------------------


def test_fused_movement_costs_no_bytes():
    moved = tr(lambda x, y: x.T + y, f32[256, 512], f32[512, 256])
    plain = tr(lambda x, y: x + y, f32[512, 256], f32[512, 256])
    assert own(KERNELS, moved, "transpose") == KERNELS.movement == 1
    # the add reads no memory of its own in either form: movement is index arithmetic
    assert own(KERNELS, moved, "add") == own(KERNELS, plain, "add")
    assert program_cost(moved, "kernels") - program_cost(plain, "kernels") == 1
    # flops-bytes charges the transpose's copy
    assert (program_cost(moved, "flops-bytes") - program_cost(plain, "flops-bytes")
            >= 4 * 2 * 512 * 256 * 4)


def test_elementwise_chains_fuse_and_heavy_ops_pay_a_launch_each():
    def chain(x):
        for _ in range(10):
            x = x * 1.5 + 0.5
        return x

    chained = tr(chain, f32[4096])
    # twenty fused ops cost less than one kernel launch: no memory round trips between them
    assert program_cost(chained, "kernels") < LAUNCH
    two = tr(lambda x: x.sum(axes=-1) + x.max(axes=-1), f32[64, 64])
    one = tr(lambda x: x.sum(axes=-1), f32[64, 64])
    assert program_cost(two, "kernels") >= 2 * LAUNCH
    assert LAUNCH <= program_cost(one, "kernels") < 2 * LAUNCH


def test_softmax_spelled_out_costs_two_kernels_more_than_the_row_op():
    spelled = tr(lambda x: (x - x.max(axes=-1, keepdims=True)).exp()
                    / (x - x.max(axes=-1, keepdims=True)).exp().sum(axes=-1, keepdims=True),
                    f32[128, 256])
    fused = tr(lambda x: x.softmax(-1), f32[128, 256])
    diff = program_cost(spelled, "kernels") - program_cost(fused, "kernels")
    assert diff >= LAUNCH  # two reductions (kernels) against one row kernel


def test_a_multi_operand_einsum_is_priced_as_its_searched_path():
    chain = tr(lambda a, b, c: einsum("ij,jk,kl->il", a, b, c),
                  f32[100, 2], f32[2, 100], f32[100, 100])
    steps = kc.einsum_steps("ij,jk,kl->il", ((100, 2), (2, 100), (100, 100)))
    assert len(steps) == 2  # two kernels, launched once each
    # the cheapest path: b @ c (2 x 100: a small output), then a @ that (100 x 100, k = 2)
    assert [s[3] for s in steps] == [2 * 100, 100 * 100]
    assert [s[0] for s in steps] == ["small-output", "small-k"]
    cost = own(KERNELS, chain, "einsum")
    assert 2 * LAUNCH < cost < 3 * LAUNCH + 1e3 * sum(s[1] for s in steps)
    # flops-bytes prices the whole index space at once: 3 x 100 x 2 x 100 x 100
    assert own(cost_model("flops-bytes"), chain, "einsum") >= 3 * 100 * 2 * 100 * 100
    # a trace: the last pair sums everything left, writing a scalar
    assert kc.einsum_steps("ij,jk,ki->", ((4, 5), (5, 6), (6, 4)))[-1][3] == 1
    # a letter only one operand has is summed first, by a reduction of its own
    local = kc.einsum_steps("abx,bc,cd->ad", ((3, 4, 5), (4, 6), (6, 7)))
    assert local[0] == ("reduce", 3 * 4 * 5, 3 * 4 * 5, 3 * 4) and len(local) == 3


MPS = "aib,bjc,ckd,dla,eif,fjg,gkh,hle->"


def test_the_searched_path_is_the_one_einsum_lowering_runs():
    """Pricing an N-operand einsum is pricing what einsum-lowering makes of it: the same
    pairwise steps (the same path search), each one kernel; only its transposes are extra."""
    from accy.contraction import find_path

    shapes = ((5, 2, 5),) * 8
    steps = kc.einsum_steps(MPS, shapes)
    assert len(steps) == len(find_path(MPS, shapes).path) == 7
    net = tr(lambda *ops: einsum(MPS, *ops), *(f32[5, 2, 5] for _ in range(8)))
    lowered = accy.prepare(net, "einsum-lowering", until="tensor").program
    pairwise = [n for n in lowered.nodes() if n.op.value == "einsum"]
    assert sorted(n.type.size for n in pairwise) == sorted(s[3] for s in steps)
    for model in (KERNELS, measured_fixture()):
        moved = sum(1 for n in lowered.nodes() if n.op.value == "transpose")
        assert program_cost(net, model) == pytest.approx(program_cost(lowered, model) - moved,
                                                         abs=len(steps))


def test_contraction_steps_are_classed_by_shape():
    cls = kc.contraction_class
    assert cls(1, 256, 256, 256) == "square"
    assert cls(1, 256, 256, 8) == "small-k"  # outer-product-like: little reuse
    assert cls(1, 16, 16, 8) == "small-k"  # tiny
    assert cls(1, 16, 16, 4096) == "small-output"  # a dot product per output: few items
    assert cls(1, 1, 2048, 512) == "small-output"  # a matrix-vector product
    assert cls(8, 64, 64, 64) == "batched"
    # each calibration series times contractions of the class it is filed under
    for size in ("quick", "full"):
        for kind, dims in cal.MICRO_PROGRAMS[size]:
            if kind.startswith("contraction:"):
                program, grown = cal._program(kind, dims), cal.GROWTH[kind](dims)
                for p in (program, cal._program(kind, cal.GROWTH[kind](grown))):
                    (node,) = [n for n in p.nodes() if n.op.value == "einsum"]
                    ((step, *_),) = kc.einsum_steps(
                        node.attr("spec"), tuple(s.type.shape for s in node.srcs))
                    assert f"contraction:{step}" == kind, (kind, dims)


def test_fit_interpolates_its_series_and_extrapolates_with_the_linear_fit():
    f = kc.Fit(100.0, 1.0, 0.0, "bytes", ((1e3, 1e4), (1e4, 2e4), (1e5, 4e5)))
    assert f.time(1e3, 0) == pytest.approx(1e4) and f.time(1e5, 0) == pytest.approx(4e5)
    assert f.time(10 ** 3.5, 0) == pytest.approx(math.sqrt(1e4 * 2e4))  # log-log halfway
    # past the last point: the end's time scaled as the linear fit scales (here ~2x)
    assert f.time(2e5, 0) == pytest.approx(4e5 * (100 + 2e5) / (100 + 1e5))
    assert f.time(10, 0) == pytest.approx(1e4 * 110 / 1100)
    xs = [10 ** (k / 4) for k in range(25)]
    times = [f.time(x, 0) for x in xs]
    assert times == sorted(times)
    g = kc.Fit(5.0, 0.0, 2.0, "flops", ((100.0, 400.0),))  # one point: scale about it
    assert g.time(0, 100) == pytest.approx(400) and g.time(0, 200) == pytest.approx(
        400 * 405 / 205)
    assert kc.Fit.read(f.document()) == f
    with pytest.raises(ValueError, match="ascending"):
        kc.Fit.read({**f.document(), "points": [[2, 1], [1, 1]]})
    with pytest.raises(ValueError, match="feature"):
        kc.Fit.read({**f.document(), "feature": "seconds"})


OP_PS = {"pow": 500.0, "exp": 30.0, "tanh": 30.0}  # the synthetic device's dear ops


def synthetic_samples():
    """Timings a fake device would give: square contractions at 1 ps a FLOP, dot-product-like
    ones at 10, gathers at 5 ps a byte, cheap elementwise ops 3 ps an element, pow 500; every
    kind some launch-bound sizes."""
    out = []
    for kind, dims in cal.MICRO_PROGRAMS["full"]:
        program = cal._program(kind, dims)
        s = cal.samples_of(kind.rstrip("0123456789"), program)
        per_flop = {"contraction:small-output": 10.0, "contraction:small-k": 3.0}.get(kind, 1.0)
        ps = 2e6 + per_flop * s["flops"] + 5.0 * s["bytes"] + sum(
            OP_PS.get(op, 3.0) * n for op, n in s["ops"].items())
        out.append({"kind": kind, "dims": list(dims), "ns": ps / 1e3, **s})
    return out


def test_fit_prices_each_contraction_class_and_the_bytes_of_gathers():
    samples = synthetic_samples()
    fits = cal.fit(samples)
    kinds = {k: kc.Fit.read(v) for k, v in fits["kinds"].items() if k != "elementwise"}
    for s in samples:  # every sample is reproduced by its kind's fit
        if s["kind"] in kinds:
            assert kinds[s["kind"]].time(s["bytes"], s["flops"]) == pytest.approx(
                1e3 * s["ns"], rel=1e-6)
    gather = kinds["gather"]
    assert gather.feature == "bytes" and gather.per_flop == 0
    assert gather.per_byte == pytest.approx(5.0, rel=0.05)
    assert gather.launch == pytest.approx(2e6, rel=0.05)
    # a noisy series is made monotone: a larger kernel never costs less
    noisy = [dict(s) for s in samples if s["kind"] == "gather"]
    noisy[1]["ns"] = noisy[0]["ns"] / 2
    pts = cal.series_points(noisy, "bytes")
    assert [t for _, t in pts] == sorted(t for _, t in pts) and pts[1][1] == pts[0][1]


def test_elementwise_ops_are_priced_each_by_its_own_series():
    fits = cal.fit(synthetic_samples())
    per_op = fits["element_ops"]
    assert set(per_op) == set(cal.ELEMENT_OPS)
    assert per_op["pow"] == pytest.approx(500.0, rel=0.05)
    assert per_op["exp"] == pytest.approx(30.0, rel=0.2)
    assert max(per_op[op] for op in ("add", "mul", "sub", "neg")) < 10
    model = measured_fixture()
    assert model.element_ops["pow"] == per_op["pow"]
    squared = tr(lambda x: x.fb.op(Op.POW, x, x.fb.constant(np.array(2.0, np.float32))),
                 f32[1 << 16])
    times = tr(lambda x: x * x, f32[1 << 16])
    diff = program_cost(squared, model) - program_cost(times, model)
    assert diff == pytest.approx((1 << 16) * (per_op["pow"] - per_op["mul"]), rel=0.01)
    # an op no series timed (a comparison) is priced by its class
    assert own(model, tr(lambda x, y: x.fb.op(Op.LT, x, y), f32[64], f32[64]), "lt") == \
        round(model.node + model.element["cheap"] * 64)
    with pytest.raises(ValueError, match="no calibration samples of elementwise chains"):
        cal.fit([s for s in synthetic_samples() if s["kind"] not in kc.ELEMENT_CLASSES])


def measured_fixture():
    fits = cal.fit(synthetic_samples())
    return kc.KernelCost("measured", "synthetic", {k: kc.Fit.read(v) for k, v in
                                                  fits["kinds"].items()},
                         fits["element"], fits["node"], fits["movement"],
                         element_ops=fits["element_ops"])


def test_a_contraction_is_priced_by_its_shape_class():
    """Same FLOPs, other shapes: the dot-product-like einsum (few outputs, a long sum) is
    priced at its class's slower rate; one fit pooled over every contraction (all a model
    without classes could have) prices the two much closer together."""
    model = measured_fixture()
    square = tr(lambda a, b: a @ b, f32[128, 128], f32[128, 128])
    dots = tr(lambda a, b: einsum("ik,jk->ij", a, b), f32[16, 8192], f32[16, 8192])
    ratio = program_cost(dots, model) / program_cost(square, model)
    assert ratio > 4  # the synthetic device: 10x the time per FLOP, some of it launch
    pooled = kc.KernelCost("pooled", "", {k: f for k, f in model.kinds.items()
                                         if ":" not in k}, model.element)
    assert ratio > 2 * program_cost(dots, pooled) / program_cost(square, pooled)


def test_unknown_names_list_the_kernel_models_and_the_measured_family():
    with pytest.raises(KeyError, match=r"kernels, nodes, measured\[:DEVICE\]"):
        cost_model("kernel")
    with pytest.raises(KeyError):
        cost_model("nodes:x")  # not a family


# ---- the measured model: calibration, cache, reload -------------------------------------------


def fake_timer(calls=None):
    """A clock that knows the model's counts: 2 us + 10 ps/byte + 3 ps/flop (+ elements)."""

    def timer(program, runtime, repeats):
        if calls is not None:
            calls.append(program.function().name)
        kind = program.function().name.rstrip("0123456789")
        s = cal.samples_of(kind, program)
        return 2000 + 0.01 * s["bytes"] + 0.003 * s["flops"] + 0.002 * s["cheap"] \
            + 0.02 * s["transcendental"]

    return timer


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(kc.CALIBRATION_ENV, raising=False)
    monkeypatch.delenv("ACCY_DEVICE", raising=False)
    return tmp_path / "accy" / "costs"


def test_without_a_calibration_the_measured_model_says_what_to_do(cache):
    with pytest.raises(kc.CalibrationMissingError, match="accy calibrate --device nvidia"):
        cost_model("measured:nvidia")
    with pytest.raises(kc.CalibrationMissingError, match="accy calibrate --device pocl"):
        cost_model("measured")


def test_calibration_is_cached_per_device_key_and_reloaded(cache, device):
    calls: list[str] = []
    path = cal.calibrate("pocl", quick=True, timer=fake_timer(calls))
    assert path == kc.calibration_path(device.info.key) and path.parent == cache
    assert path.stem == kc.device_digest(device.info.key)
    n = len(calls)
    assert n == len(cal.MICRO_PROGRAMS["quick"])
    doc = json.loads(path.read_text())
    assert doc["device"]["key"] == device.info.key and doc["quick"] is True
    assert json.loads(kc.index_path().read_text()) == {"pocl": path.stem}
    # cached: no micro-program runs again; the file is what the model reads
    assert cal.calibrate("pocl", quick=True, timer=fake_timer(calls)) == path
    assert len(calls) == n
    model = cost_model("measured:pocl")
    assert model.source == str(path) and cost_model("measured") is model  # pocl is the default
    # --force always recalibrates
    cal.calibrate("pocl", force=True, quick=True, timer=fake_timer(calls))
    assert len(calls) == 2 * n
    # a driver update is another device: another file
    assert kc.device_digest(device.info.key + "-new") != path.stem
    # the fits reproduce the fake clock's times (ps) on its samples
    fits = doc["fits"]
    for s in doc["samples"]:
        if s["kind"] in fits["kinds"]:
            f = kc.Fit.read(fits["kinds"][s["kind"]])
            assert f.time(s["bytes"], s["flops"]) == pytest.approx(1e3 * s["ns"], rel=0.05)
    assert fits["element"]["transcendental"] > fits["element"]["cheap"] > 0


def test_calibration_file_named_by_the_environment(cache, tmp_path, monkeypatch, device):
    path = cal.calibrate("pocl", quick=True, timer=fake_timer())
    copy = tmp_path / "mine.json"
    copy.write_text(path.read_text())
    monkeypatch.setenv(kc.CALIBRATION_ENV, str(copy))
    assert cost_model("measured").source == str(copy)
    copy.write_text("{}")  # damaged: says how to make it again
    with pytest.raises(kc.CalibrationMissingError, match="--force"):
        cost_model("measured")


SIZES = [2 ** k for k in range(3, 11)]
PROGRAMS = {
    "cheap": lambda n: tr(lambda x: x * x, f32[n]),
    "transcendental": lambda n: tr(lambda x: x.tanh(), f32[n]),
    "reduce": lambda n: tr(lambda x: x.sum(axes=-1), f32[n, 64]),
    "contraction": lambda n: tr(lambda a, b: a @ b, f32[n, n], f32[n, n]),
    "rowwise": lambda n: tr(lambda x: x.softmax(-1), f32[16, n]),
    # priced by the bytes they move, not only their launch
    "gather": lambda n: tr(lambda t, ids: gather(t, ids, axis=0), f32[64, 16], accy.i32[n]),
    "loss": lambda n: tr(cross_entropy, f32[n, 64], accy.i32[n]),
    "tensor network": lambda n: tr(lambda *ops: einsum(MPS, *ops),
                                   *(f32[max(n // 64, 2), 2, max(n // 64, 2)]
                                     for _ in range(8))),
}


@pytest.mark.parametrize("kind", sorted(PROGRAMS))
def test_measured_costs_are_monotone_in_size(cache, device, kind):
    cal.calibrate("pocl", quick=True, timer=fake_timer())
    model = cost_model("measured")
    costs = [program_cost(PROGRAMS[kind](n), model) for n in SIZES]
    assert costs == sorted(costs) and costs[-1] > costs[0], costs


def test_saturate_runs_with_the_measured_model(cache, device):
    """A real calibration on the device at tiny sizes (checked for shape, not speed), then
    ``saturate{cost=measured}`` chooses under it."""
    path = cal.calibrate(None, quick=True, repeats=1)
    doc = json.loads(path.read_text())
    assert set(doc["fits"]["kinds"]) >= set(kc.HEAVY_KINDS)
    assert all(math.isfinite(f[c]) and f[c] >= 0 for f in doc["fits"]["kinds"].values()
               for c in ("launch", "per_byte", "per_flop"))
    from accy.experiments.suite import SUITE

    program = SUITE["softmax_xent"].program("ci")
    job = accy.prepare(program, "canonicalize,saturate{cost=measured}", until="tensor")
    (sat,) = [p for r in job.records for p in r.passes if p.spec.startswith("saturate")]
    stats = dict(sat.stats)
    assert stats["cost-model"] == "measured"
    assert stats["cost-after"] <= stats["cost-before"]
    assert accy.interpret(job.program, SUITE["softmax_xent"].inputs("ci")) is not None


def test_full_calibration_grows_each_series_until_it_is_long_enough(cache, device, monkeypatch):
    calls: list[str] = []
    path = cal.calibrate("pocl", timer=fake_timer(calls))
    doc = json.loads(path.read_text())
    fixed = len(cal.MICRO_PROGRAMS["full"])
    assert len(calls) > fixed  # the fake clock's chains are launch-bound at the listed sizes
    by_series: dict = {}
    for s in doc["samples"]:
        by_series.setdefault(cal._series(s["kind"], tuple(s["dims"])), []).append(s["ns"])
    dims = [(s["kind"], tuple(s["dims"])) for s in doc["samples"]]
    assert len(set(dims)) == len(dims)  # every grown program is a new, larger one
    for kind_k, times in by_series.items():
        grown = len(times) - sum(cal._series(k, d) == kind_k
                                 for k, d in cal.MICRO_PROGRAMS["full"])
        assert grown <= cal.MAX_GROWTH
        if grown:  # it grew because it was short, and stopped once long or at the cap
            assert max(times[:-1]) < cal.GROW_UNTIL * min(times)
            assert max(times) >= cal.GROW_UNTIL * min(times) or grown == cal.MAX_GROWTH
    cheap = [s["dims"][0] for s in doc["samples"] if s["kind"] == "cheap" and s["dims"][1] == 1]
    assert max(cheap) > max(d[0] for k, d in cal.MICRO_PROGRAMS["full"] if k == "cheap")
    # a memory bound stops every series before it grows
    monkeypatch.setattr(cal, "MAX_BYTES", 1)
    calls.clear()
    cal.calibrate("pocl", force=True, timer=fake_timer(calls))
    assert len(calls) == fixed


def test_a_long_sum_into_few_outputs_costs_at_least_its_depth():
    """A contraction step summing K elements into few outputs runs its K loop in sequence:
    ``KernelCost.depth`` bounds its time below by launch + K x per element, whatever its
    FLOPs; a step whose own time is above the bound keeps it."""
    model = measured_fixture()
    flat = dataclasses.replace(model, depth=(0.0, 0.0))
    deep = dataclasses.replace(model, depth=(1e6, 1e5))
    dots = tr(lambda a, b: einsum("ik,jk->ij", a, b), f32[4, 4096], f32[4, 4096])
    assert program_cost(dots, flat) < 1e6 + 1e5 * 4096 <= program_cost(dots, deep)
    square = tr(lambda a, b: a @ b, f32[256, 256], f32[256, 256])
    shallow = dataclasses.replace(model, depth=(1e3, 1.0))
    assert program_cost(square, shallow) == program_cost(square, flat)


def test_fit_finds_the_depth_of_the_long_sums():
    samples = synthetic_samples()
    for s in samples:
        if s["kind"] == "contraction:small-output":
            s["ns"] = (3e6 + 4e4 * s["dims"][1]) / 1e3
    depth = cal.fit(samples)["depth"]
    assert depth["launch"] == pytest.approx(3e6, rel=1e-3)
    assert depth["per_element"] == pytest.approx(4e4, rel=1e-3)
    model = kc.KernelCost("m", "", measured_fixture().kinds, {"cheap": 1.0,
                          "transcendental": 1.0}, depth=(depth["launch"],
                                                          depth["per_element"]))
    assert model.fits()["depth"] == {"launch": model.depth[0], "per_element": model.depth[1]}
