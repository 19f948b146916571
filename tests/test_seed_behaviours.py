"""The seed's behaviours (docs: ../shared/SEED_BEHAVIOURS.md), one test per row, in accy's API."""

import numpy as np
import pytest

import accy
from accy.builder import Builder
from accy.errors import (
    CapabilityMismatchError,
    KernelLookupError,
    VerifyError,
    WorkItemLookupError,
)
from accy.ir.ops import Op
from accy.ir.types import DType
from accy.job import KernelSummary
from accy.passes.pipelines import PIPELINES
from accy.passes.registry import all_passes
from accy.passes.spec import parse_pipeline
from accy.plans import LaunchGeometry, ScheduleKind
from accy.product import Product
from accy.target import KernelStatus, TargetProfile, status_error

STAGES = ["semantic", "contract", "tensor", "dispatch", "memory", "kernel", "target"]


def multi(policy: str) -> str:
    return f"accy-contract,fusion-planning{{policy={policy}}},schedule-planning,accy-memory," \
           "accy-kernel,accy-target"


def add_program(fname: str = "add", names: tuple[str, str] = ("a", "b")) -> accy.Program:
    b = Builder()
    t = b.tensor(DType.f32, (4,))
    f = b.begin_function(fname, [t, t], list(names))
    f.return_(f.add(f.param(0), f.param(1)))
    f.finish()
    return b.finish()


def two_results(fname: str = "add_mul", names=("a", "b", "c")) -> accy.Program:
    """(a+b, (a+b)*c) on f32[4]."""
    b = Builder()
    t = b.tensor(DType.f32, (4,))
    f = b.begin_function(fname, [t, t, t], list(names))
    s = f.add(f.param(0), f.param(1))
    f.return_(s, f.mul(s, f.param(2)))
    f.finish()
    return b.finish()


@accy.function
def max_chain(a: accy.f32[16], b: accy.f32[16]):
    return accy.maximum(((a + b) * b) - b, b)


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# row 2 ------------------------------------------------------------------------------------


def test_row2_passes_and_pipelines_registered_and_round_trip() -> None:
    passes = all_passes()
    by_stage = {s: [n for n, c in passes.items() if c.stage.value == s] for s in STAGES}
    assert "constant-fold" in by_stage["contract"]
    assert {"fusion-planning", "schedule-planning"} <= set(by_stage["dispatch"])
    assert {"bufferization-planning", "layout-planning"} <= set(by_stage["memory"])
    assert {"kernel-outlining-planning", "kernelization"} <= set(by_stage["kernel"])
    assert "backend-legalization" in by_stage["target"]
    for stage in STAGES[1:]:
        assert f"accy-{stage}" in PIPELINES
    text = ("constant-fold{max-elements=128},fusion-planning{policy=multi-output},"
            "schedule-planning,bufferization-planning{reuse=false},layout-planning{alignment=16},"
            "kernel-outlining-planning{work-group-size=64 max-name-ops=3},kernelization,"
            "backend-legalization")
    p = parse_pipeline(text)
    assert p.text() == text
    assert parse_pipeline(p.text(full=True)) == p
    job = accy.prepare(two_results(), p)
    assert job.pipeline == p


# row 3 ------------------------------------------------------------------------------------


def test_row3_add_prepares_to_one_kernel_without_renaming() -> None:
    program = add_program()
    job = accy.prepare(program)
    assert job.kernel_count == 1
    assert job.kernel_summary(0).ops == ("add",)
    assert job.kernel_summary(0).function == "add"
    assert list(job.products) == [accy.Stage(s) for s in STAGES]
    for product in job.products.values():
        (fn,) = product.program.functions
        assert fn.name == "add" and fn.param_names == ("a", "b")


def test_row3_runs(device) -> None:
    job = accy.prepare(add_program())
    a, b = rand(4, seed=1), rand(4, seed=2)
    (out,) = job.run(a, b, device=device)
    np.testing.assert_array_equal(out, a + b)


# row 4 ------------------------------------------------------------------------------------


def test_row4_single_output_policy_matches_seed() -> None:
    job = accy.prepare(two_results(), multi("single-output"))
    assert len(job.product.schedule.items) == 2
    assert job.kernel_count == 2
    assert len(job.product.buffers) == 5
    assert [tuple(op for op, _ in k.ops) for k in job.kernels] == [(Op.ADD,), (Op.MUL,)]


def test_row4_multi_output_policy_fuses_into_one_kernel() -> None:
    single = accy.prepare(two_results(), multi("single-output"))
    job = accy.prepare(two_results(), multi("multi-output"))
    assert len(job.product.schedule.items) == 1
    assert job.kernel_count == 1
    (k,) = job.kernels
    assert sum(a.is_output for a in k.args) == 2
    assert len(job.product.buffers) == 5
    assert job.product.buffers.bytes_moved < single.product.buffers.bytes_moved
    assert job.product.buffers.bytes_moved == 5 * 16  # read a, b, c; write two results


@pytest.mark.parametrize("policy", ["single-output", "multi-output"])
def test_row4_runs(device, policy: str) -> None:
    job = accy.prepare(two_results(), multi(policy))
    a, b, c = rand(4, seed=1), rand(4, seed=2), rand(4, seed=3)
    s, p = job.run(a, b, c, device=device)
    np.testing.assert_array_equal(s, a + b)
    np.testing.assert_allclose(p, (a + b) * c, rtol=1e-6)


# row 5 ------------------------------------------------------------------------------------


def test_row5_chain_fuses_into_one_named_kernel() -> None:
    job = accy.prepare(max_chain)
    assert job.kernel_count == 1
    entry = job.kernel_summary(0).entry
    for op in ("add", "mul", "sub", "max"):
        assert op in entry
    assert job.kernel_summary(0).ops == ("add", "mul", "sub", "max")


def test_row5_runs(device) -> None:
    job = accy.prepare(max_chain)
    a, b = rand(16, seed=4), rand(16, seed=5)
    (out,) = job.run(a, b, device=device)
    np.testing.assert_allclose(out, np.maximum(((a + b) * b) - b, b), rtol=1e-6)
    exe = job.executable(device=device)
    exe(a, b)
    assert len(exe.last_kernel_ns) == 1 and exe.last_kernel_ns[0] >= 0


# row 8 ------------------------------------------------------------------------------------


def test_row8_constant_add_folded_in_contract_stage() -> None:
    b = Builder()
    f = b.begin_function("consts", [b.tensor(DType.f32, (3,))], ["x"])
    c1 = f.constant(np.array([1, 2, 3], np.float32))
    c2 = f.constant(np.array([10, 20, 30], np.float32))
    f.return_(f.add(c1, c2), f.mul(f.param(0), f.add(c1, c2)))
    f.finish()
    program = b.finish()
    assert Op.ADD in [n.op for n in program.nodes()]
    job = accy.prepare(program, until="contract")
    ops = [n.op for n in job.program.nodes()]
    assert Op.ADD not in ops and Op.MUL in ops
    first = job.program.functions[0].results[0]
    assert first.op is Op.CONSTANT
    np.testing.assert_array_equal(first.value, [11, 22, 33])
    full = accy.prepare(job)
    assert full.kernel_count == 1 and full.kernel_summary(0).ops == ("mul",)


# row 9 ------------------------------------------------------------------------------------


def test_row9_fingerprints_ignore_names_for_every_stage() -> None:
    one = accy.prepare(two_results("add_mul", ("a", "b", "c")))
    renamed = accy.prepare(two_results("other", ("x", "y", "z")))
    assert one.program.functions[0].name != renamed.program.functions[0].name
    assert list(one.stamps()) == STAGES
    assert one.stamps() == renamed.stamps()
    for r1, r2 in zip(one.records, renamed.records, strict=True):
        assert r1.fingerprint == r2.fingerprint
    assert [s.body_fingerprint for s in one.kernel_summaries()] == [
        s.body_fingerprint for s in renamed.kernel_summaries()]


def test_row9_fingerprints_differ_for_a_different_program() -> None:
    one = accy.prepare(two_results()).stamps()
    b = Builder()
    t = b.tensor(DType.f32, (4,))
    f = b.begin_function("add_mul", [t, t, t], ["a", "b", "c"])
    s = f.sub(f.param(0), f.param(1))  # sub instead of add
    f.return_(s, f.mul(s, f.param(2)))
    f.finish()
    other = accy.prepare(b.finish()).stamps()
    for stage in STAGES:
        assert one[stage] != other[stage], stage
    # the same program with another shape differs too
    b = Builder()
    t = b.tensor(DType.f32, (8,))
    f = b.begin_function("add", [t, t], ["a", "b"])
    f.return_(f.add(f.param(0), f.param(1)))
    f.finish()
    wider = accy.prepare(b.finish()).stamps()
    narrow = accy.prepare(add_program()).stamps()
    assert all(wider[s] != narrow[s] for s in STAGES)


# row 10 -----------------------------------------------------------------------------------


def test_row10_stage_records() -> None:
    job = accy.prepare(two_results())
    assert [r.stage.value for r in job.records] == STAGES[1:]
    for r in job.records:
        assert r.elapsed_ns > 0
        assert r.pass_runs == len(r.passes)
        assert r.fingerprint == job.products[r.stage].fingerprint()
    by_stage = {q.stage.value: len(parse_pipeline(q.name)) for q in PIPELINES.values()
                if q.stage is not None}
    assert [r.pass_runs for r in job.records] == [by_stage[s] for s in STAGES[1:]]
    for stage in ("dispatch", "memory", "kernel", "target"):
        assert job.record(stage).analysis_misses >= 1, stage
    assert all(r.analysis_hits >= 0 for r in job.records)
    with pytest.raises(KeyError):
        accy.prepare(two_results(), until="dispatch").record("memory")


# row 11 -----------------------------------------------------------------------------------


@pytest.mark.parametrize("until", STAGES[:-1])
def test_row11_continue_from_a_stage(until: str) -> None:
    program = two_results()
    partial = accy.prepare(program, until=until)
    assert partial.stage.value == until
    assert [r.stage.value for r in partial.records] == STAGES[1:STAGES.index(until) + 1]
    full = accy.prepare(partial)
    assert full.stage.value == "target"
    assert full.records[:len(partial.records)] == partial.records
    assert [r.stage.value for r in full.records] == STAGES[1:]
    one_shot = accy.prepare(program)
    assert full.stamps() == one_shot.stamps()
    assert full.kernel_count == one_shot.kernel_count
    # the partial job is untouched
    assert partial.stage.value == until
    assert list(partial.stamps()) == STAGES[:STAGES.index(until) + 1]


def test_row11_partial_job_has_no_kernels_yet() -> None:
    partial = accy.prepare(two_results(), until="dispatch")
    with pytest.raises(VerifyError, match="kernel"):
        partial.kernel_count  # noqa: B018


# row 12 -----------------------------------------------------------------------------------


def test_row12_product_stamps() -> None:
    job = accy.prepare(two_results())
    stamps = job.stamps()
    assert list(stamps) == STAGES
    for name, fingerprint in stamps.items():
        product = job.products[accy.Stage(name)]
        assert isinstance(product, Product)
        assert product.stamp() == (name, fingerprint)
        assert len(fingerprint) == 32 and int(fingerprint, 16) >= 0
    for r in job.records:
        assert r.stamp == (r.stage.value, stamps[r.stage.value])
    # plans change the fingerprint from dispatch on; the program alone before
    assert len({stamps[s] for s in ("dispatch", "memory", "kernel", "target")}) == 4


# row 13 -----------------------------------------------------------------------------------


def test_row13_kernel_questions() -> None:
    job = accy.prepare(two_results(), multi("single-output"))
    assert job.kernel_count == 2
    summaries = job.kernel_summaries()
    assert len(summaries) == 2
    for i, s in enumerate(summaries):
        assert isinstance(s, KernelSummary)
        k = job.kernels[i]
        assert s.index == i
        assert s.entry == k.entry
        assert s.argument_count == len(k.args) == 3  # two inputs, one output
        assert s.body_fingerprint == k.body_fingerprint() and len(s.body_fingerprint) == 32
        assert s.schedule_kind is ScheduleKind.flat
        assert isinstance(s.geometry, LaunchGeometry)
        assert s.geometry.global_size[0] >= 4
        assert s.geometry.global_size[0] % s.geometry.local_size[0] == 0
        assert s.function == "add_mul"
        assert s.status is KernelStatus.legal
        assert job.summary_for_work(s.work_item) == s
        source = job.kernel_source(i)
        assert f"__kernel void {s.entry}(" in source
        assert job.source_for_work(s.work_item) == source
        kp = job.kernel_program(i)
        assert isinstance(kp, accy.Program)
        accy.verify(kp)
        assert job.program_for_work(s.work_item) == kp
    assert summaries[0].ops == ("add",) and summaries[1].ops == ("mul",)
    # the kernel programs compose to the whole function
    a, b, c = rand(4, seed=1), rand(4, seed=2), rand(4, seed=3)
    (s,) = accy.interpret(job.kernel_program(0), [a, b])
    (p,) = accy.interpret(job.kernel_program(1), [s, c])
    want = accy.interpret(job.program, [a, b, c])
    np.testing.assert_array_equal(s, want[0])
    np.testing.assert_array_equal(p, want[1])


def test_row13_lookup_errors_are_distinct() -> None:
    job = accy.prepare(two_results(), multi("single-output"))
    assert KernelLookupError is not WorkItemLookupError
    assert not issubclass(KernelLookupError, WorkItemLookupError)
    assert not issubclass(WorkItemLookupError, KernelLookupError)
    for bad in (2, -1, 99):
        with pytest.raises(KernelLookupError):
            job.kernel_summary(bad)
        with pytest.raises(KernelLookupError):
            job.kernel_program(bad)
        with pytest.raises(KernelLookupError):
            job.kernel_source(bad)
    for bad in (2, 17, -1):
        with pytest.raises(WorkItemLookupError):
            job.summary_for_work(bad)
        with pytest.raises(WorkItemLookupError):
            job.program_for_work(bad)
    try:
        job.kernel_summary(5)
    except WorkItemLookupError:  # pragma: no cover - wrong class
        pytest.fail("a bad kernel index raised WorkItemLookupError")
    except KernelLookupError:
        pass


# row 14 -----------------------------------------------------------------------------------


def test_row14_profile_without_f32_marks_kernel_illegal() -> None:
    profile = TargetProfile(dtypes=frozenset({DType.i32}))
    job = accy.prepare(add_program(), target=profile)  # the pipeline does not fail
    assert job.stage.value == "target"
    assert job.target == profile
    assert job.product.legality.target_fingerprint == profile.fingerprint()
    (verdict,) = job.product.legality.kernels
    assert verdict.status is KernelStatus.unsupported_dtype
    assert "f32" in verdict.detail
    assert job.kernel_summary(0).status is KernelStatus.unsupported_dtype
    assert status_error(verdict.status) is CapabilityMismatchError
    assert status_error(KernelStatus.legal) is None
    for status in KernelStatus:  # exceeds_limits: LimitExceededError, a subclass
        if status is not KernelStatus.legal:
            assert issubclass(status_error(status), CapabilityMismatchError)


def test_row14_profile_recorded_on_every_product() -> None:
    profile = TargetProfile(device="test device", math_tier="fast")
    job = accy.prepare(add_program(), target=profile)
    assert all(p.target == profile for p in job.products.values())
    assert "test device" in profile.describe() and "fast" in profile.describe()


def test_row14_running_illegal_kernel_raises_before_any_launch() -> None:
    runtime_module = pytest.importorskip("accy.backends.opencl.runtime")

    class SpyRuntime(runtime_module.Runtime):
        """Counts builds and launches; no OpenCL involved."""

        def __init__(self) -> None:
            self.built: list[str] = []
            self.launched: list[object] = []

        def kernel(self, source, entry, options=()):
            self.built.append(entry)
            return entry

        def buffer(self, key, nbytes):
            return key

        def write(self, buf, array):
            pass

        def launch(self, kernel, global_size, local_size, args):
            self.launched.append(kernel)
            raise AssertionError("an illegal job was launched")

    profile = TargetProfile(dtypes=frozenset({DType.i32}))
    job = accy.prepare(add_program(), target=profile)
    spy = SpyRuntime()
    a = np.ones(4, np.float32)
    with pytest.raises(CapabilityMismatchError, match="unsupported_dtype"):
        job.run(a, a, device=spy)
    assert spy.launched == []
    with pytest.raises(CapabilityMismatchError):
        job.executable(device=spy)
    assert spy.launched == []


def test_row13_summaries_before_legalization_have_no_status() -> None:
    job = accy.prepare(two_results(), until="kernel")
    assert job.kernel_count == 2
    assert all(s.status is None for s in job.kernel_summaries())
    assert "__kernel void" in job.kernel_source(1)


def test_row13_numpy_integer_index() -> None:
    job = accy.prepare(two_results(), multi("single-output"))
    assert job.kernel_summary(np.int64(1)) == job.kernel_summary(1)


def test_row14_capability_error_needs_no_device(monkeypatch: pytest.MonkeyPatch) -> None:
    executable = pytest.importorskip("accy.backends.opencl.executable")
    from accy.errors import DeviceError

    def no_device(selector=None):
        raise DeviceError("no OpenCL platform or device found (test)")

    monkeypatch.setattr(executable, "select_device", no_device)
    job = accy.prepare(add_program(), target=TargetProfile(dtypes=frozenset({DType.i32})))
    a = np.ones(4, np.float32)
    with pytest.raises(CapabilityMismatchError):
        job.run(a, a)
