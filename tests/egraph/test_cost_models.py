"""The kernel cost models: ``kernels`` (analytical: launches and fusion) and ``measured``
(calibrated per device, cached on disk, reloaded). No test depends on the machine's speed:
calibrations here are timed by a fake clock, except one that checks a real (tiny) PoCL
calibration only for what it must be (a file, fits, a usable model)."""

from __future__ import annotations

import json
import math

import pytest

import accy
from accy.builder import einsum, trace
from accy.egraph import kernel_cost as kc
from accy.egraph.cost import cost_model, program_cost
from accy.experiments import calibrate as cal

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


def test_a_multi_operand_einsum_is_priced_as_its_pairwise_path():
    chain = tr(lambda a, b, c: einsum("ij,jk,kl->il", a, b, c),
                  f32[100, 2], f32[2, 100], f32[100, 100])
    steps = kc.einsum_steps("ij,jk,kl->il", ((100, 2), (2, 100), (100, 100)))
    assert len(steps) == 2  # two kernels, launched once each
    # greedy takes the pair with the smallest result first: b @ c (2 x 100), then a @ that
    assert steps[0][2] == 2 * 100 and steps[1][2] == 100 * 100
    cost = own(KERNELS, chain, "einsum")
    assert 2 * LAUNCH < cost < 3 * LAUNCH + 1e3 * sum(w for w, _, _ in steps)
    # flops-bytes prices the whole index space at once: 3 x 100 x 2 x 100 x 100
    assert own(cost_model("flops-bytes"), chain, "einsum") >= 3 * 100 * 2 * 100 * 100
    # a trace: the last pair sums everything left, writing a scalar
    assert kc.einsum_steps("ij,jk,ki->", ((4, 5), (5, 6), (6, 4)))[-1][2] == 1


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
        if s["kind"] in kc.HEAVY_KINDS:
            f = kc.Fit(**fits["kinds"][s["kind"]])
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
    assert all(math.isfinite(v) and v >= 0 for f in doc["fits"]["kinds"].values()
               for v in f.values())
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
