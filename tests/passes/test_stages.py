"""Each built-in pass on small programs: what it plans, and the errors it gives."""

import numpy as np
import pytest

import accy
from accy.backends.opencl.render import expr
from accy.builder import Builder
from accy.errors import BackendLookupError, PassFailure, PipelineError
from accy.ir.interpret import interpret
from accy.ir.ops import Op
from accy.ir.program import Stage
from accy.ir.types import DType
from accy.kernels.generators import GENERATORS
from accy.kernels.ir import For, Let, Load, walk_stmts
from accy.passes.kernel.kernel_outlining_planning import entry_name
from accy.plans import ScheduleKind, SlotRole
from accy.target import KernelStatus, TargetProfile


def pipeline(**options: str) -> str:
    """accy-default with options set on its passes: pipeline(fusion="policy=multi-output")."""
    spelled = {
        "fold": "constant-fold", "fusion": "fusion-planning", "schedule": "schedule-planning",
        "buffers": "bufferization-planning", "layout": "layout-planning",
        "outline": "kernel-outlining-planning", "kernelize": "kernelization",
        "legalize": "backend-legalization",
    }
    parts = []
    for key, name in spelled.items():
        parts.append(name + ("{" + options[key] + "}" if key in options else ""))
    return ",".join(parts)


def ops_of(program: accy.Program) -> list[Op]:
    return [n.op for n in program.nodes()]


# constant-fold ----------------------------------------------------------------------------


def _constants_program(n: int) -> accy.Program:
    b = Builder()
    f = b.begin_function("consts", [b.tensor(DType.f32, (n,))], ["x"])
    c1 = f.constant(np.arange(n, dtype=np.float32))
    c2 = f.constant(np.full(n, 2, np.float32))
    folded = (c1 + c2) * c2 - 1.0  # all constant
    f.return_(f.param(0) * folded)
    f.finish()
    return b.finish()


def test_constant_fold_folds_constant_subtrees() -> None:
    program = _constants_program(4)
    job = accy.prepare(program, until="contract")
    ops = ops_of(job.program)
    assert Op.ADD not in ops and Op.SUB not in ops
    assert ops.count(Op.MUL) == 1
    (mul,) = (n for n in job.program.nodes() if n.op is Op.MUL)
    const = next(s for s in mul.srcs if s.op is Op.CONSTANT)
    np.testing.assert_array_equal(const.value, (np.arange(4) + 2.0) * 2 - 1)
    stats = dict(job.record("contract").passes[0].stats)
    assert stats["folded"] == 3
    x = np.linspace(-1, 1, 4).astype(np.float32)
    np.testing.assert_array_equal(interpret(job.program, [x])[0], interpret(program, [x])[0])


def test_constant_fold_respects_max_elements() -> None:
    program = _constants_program(4)
    job = accy.prepare(program, "constant-fold{max-elements=3}", until="contract")
    assert job.program.fingerprint() == program.fingerprint()  # nothing folded
    # the scalar 1.0 is a constant already; a 4-element result is over the limit
    assert dict(job.record("contract").passes[0].stats)["folded"] == 0
    job = accy.prepare(program, "constant-fold{max-elements=4}", until="contract")
    assert Op.ADD not in ops_of(job.program)


def test_constant_fold_leaves_params_alone() -> None:
    @accy.function
    def f(a: accy.f32[4]):
        return a + 1.0

    job = accy.prepare(f, until="contract")
    assert job.program.fingerprint() == f.fingerprint()
    assert job.stamps()["contract"] == job.stamps()["semantic"]


# fusion-planning --------------------------------------------------------------------------


@accy.function
def shared(a: accy.f32[8], b: accy.f32[8], c: accy.f32[8]):
    t = a + b
    return t * c, t - c  # t consumed by two kernels


@accy.function
def diamond(a: accy.f32[8], b: accy.f32[8]):
    t = a + b
    return (t * t) + (t - b)  # t used twice inside one consumer tree


@accy.function
def result_and_use(a: accy.f32[8], b: accy.f32[8], c: accy.f32[8]):
    t = a + b
    return t, t * c


def fusion_of(program, policy: str):
    job = accy.prepare(program, pipeline(fusion=f"policy={policy}"), until="dispatch")
    return job.product.fusion


def test_single_output_policy_boundaries() -> None:
    plan = fusion_of(result_and_use, "single-output")
    assert plan.policy == "single-output"
    assert len(plan.groups) == 2
    assert all("function result" in g.boundary for g in plan.groups)
    assert [[n.op for n in g.outputs] for g in plan.groups] == [[Op.ADD], [Op.MUL]]
    # a value used twice inside one consumer's kernel is computed there once
    (group,) = fusion_of(diamond, "single-output").groups
    assert [n.op for n in group.nodes] == [Op.ADD, Op.MUL, Op.SUB, Op.ADD]
    plan = fusion_of(shared, "single-output horizontal=false")
    assert len(plan.groups) == 3
    assert [g.boundary for g in plan.groups].count("consumed by several kernels") == 1
    # horizontal fusion (the default) joins the two independent results into one kernel
    t, joined = fusion_of(shared, "single-output").groups
    assert t.boundary == "consumed by several kernels"
    assert [n.op for n in joined.outputs] == [Op.MUL, Op.SUB]


def test_multi_output_policy_fuses_shared_values() -> None:
    plan = fusion_of(result_and_use, "multi-output")
    (group,) = plan.groups
    assert [n.op for n in group.outputs] == [Op.ADD, Op.MUL]
    assert "function result" in group.boundary
    (group,) = fusion_of(diamond, "multi-output").groups
    assert [n.op for n in group.nodes] == [Op.ADD, Op.MUL, Op.SUB, Op.ADD]
    # two different consumers still need two kernels
    plan = fusion_of(shared, "multi-output")
    assert "consumed by several kernels" in [g.boundary for g in plan.groups]


def test_non_elementwise_boundaries() -> None:
    @accy.function
    def red(a: accy.f32[4, 8]):
        return (a * 2.0).sum(1) + 1.0

    # a reduction takes its elementwise prologue and epilogue into its kernel
    plan = fusion_of(red, "single-output")
    assert [g.boundary for g in plan.groups] == ["function result"]
    assert [g.kind for g in plan.groups] == [ScheduleKind.reduction]
    assert [n.op for n in plan.groups[0].nodes] == [Op.MUL, Op.REDUCE_SUM, Op.ADD]

    @accy.function
    def twice(a: accy.f32[4, 8]):
        return a.sum(1).sum(0)

    plan = fusion_of(twice, "single-output")
    assert [g.kind for g in plan.groups] == [ScheduleKind.reduction, ScheduleKind.reduction]
    assert "need separate kernels" in plan.groups[0].boundary

    @accy.function
    def matmul(a: accy.f32[4, 8], b: accy.f32[8, 2]):
        return ((a * 2.0) @ b).relu()

    plan = fusion_of(matmul, "single-output")
    assert [g.kind for g in plan.groups] == [ScheduleKind.flat, ScheduleKind.contraction]
    assert "contraction kernels read their operands from memory" in plan.groups[0].boundary
    assert [n.op for n in plan.groups[1].nodes] == [Op.EINSUM, Op.RELU]  # epilogue fused


def test_broadcasting_operands_fuse() -> None:
    @accy.function
    def bc(a: accy.f32[4, 8], b: accy.f32[8], c: accy.f32[4, 1]):
        return (b * 2.0 + a) * c

    for policy in ("single-output", "multi-output"):
        (group,) = fusion_of(bc, policy).groups
        assert group.domain == (4, 8)
        assert [n.op for n in group.nodes] == [Op.MUL, Op.ADD, Op.MUL]
    job = accy.prepare(bc)
    (k,) = job.kernels
    loads = {s.expr.buf: expr(s.expr.index) for s in walk_stmts(k.body)
             if isinstance(s, Let) and isinstance(s.expr, Load)}
    # a[4,8] at the flat id, b[8] at the column, c[4,1] at the row: broadcasts copy nothing
    assert loads == {"in0": "c3", "in1": "gid1", "in2": "c2"}


def test_multi_output_keeps_smaller_result_apart() -> None:
    @accy.function
    def small(a: accy.f32[4, 8], b: accy.f32[8]):
        t = b * 2.0
        return t, t + a

    plan = fusion_of(small, "multi-output")
    assert len(plan.groups) == 2
    assert "shape differs from its consumers' domain" in [g.boundary for g in plan.groups]


# schedule-planning ------------------------------------------------------------------------


def test_schedule_orders_producers_first() -> None:
    @accy.function
    def dag(a: accy.f32[8], b: accy.f32[8]):
        t = a + b
        total = t.sum()
        u = t * total
        return u - t, t - 1.0

    no_rows = "accy-contract,accy-tensor,fusion-planning{row-fusion=false},schedule-planning"
    job = accy.prepare(dag, no_rows, until="dispatch")  # row fusion: one group
    fusion, schedule = job.product.fusion, job.product.schedule
    assert len(schedule.items) == len(fusion.groups) == 4
    assert sorted(i.group for i in schedule.items) == list(range(len(fusion.groups)))
    assert [i.id for i in schedule.items] == list(range(len(schedule.items)))
    written_at = {}
    for pos, item in enumerate(schedule.items):
        group = fusion.groups[item.group]
        assert item.domain == group.domain and item.kind is group.kind
        for n in group.inputs:
            if n.srcs:  # computed by another group: must be written already
                assert n in written_at, f"{n!r} read before it is written"
        for n in group.outputs:
            written_at[n] = pos
    kinds = [i.kind for i in schedule.items]
    assert kinds.count(ScheduleKind.reduction) == 1
    assert kinds.index(ScheduleKind.reduction) > 0  # after the add that feeds it
    assert schedule.items[-1].domain == (8,)
    assert dict(job.record("dispatch").passes[1].stats) == {"work-items": 4}


def test_schedule_covers_several_functions() -> None:
    b = Builder()
    for name in ("first", "second"):
        f = b.begin_function(name, [b.tensor(DType.f32, (4,))] * 2)
        t = f.param(0) + f.param(1)
        f.return_(t, t * f.param(1))
        f.finish()
    job = accy.prepare(b.finish(), until="dispatch")
    assert [i.function for i in job.product.schedule.items] == [0, 0, 1, 1]


# bufferization-planning -------------------------------------------------------------------


@accy.function
def chain(a: accy.f32[64], b: accy.f32[64]):
    t = a + b
    outs = []
    for _ in range(4):
        outs.append(t - 1.0)  # t is read by two kernels, so it is an intermediate
        t = t * t
    return (*outs, t)


def numpy_chain(a, b):
    t = a + b
    outs = []
    for _ in range(4):
        outs.append(t - np.float32(1))
        t = t * t
    return (*outs, t)


def test_bufferization_reuses_slots_by_liveness() -> None:
    job = accy.prepare(chain, pipeline(buffers="in-place=false", fusion="horizontal=false"),
                       until="memory")
    plan, schedule, fusion = job.product.buffers, job.product.schedule, job.product.fusion
    assert len(schedule.items) == 9
    roles = [s.role for s in plan.slots]
    assert roles.count(SlotRole.input) == 2 and roles.count(SlotRole.output) == 5
    inter = [s for s in plan.slots if s.role is SlotRole.intermediate]
    assert len(inter) == 2  # four intermediates, at most two alive at a time
    assert sorted(len(s.values) for s in inter) == [2, 2]
    assert [s.id for s in plan.slots] == list(range(len(plan.slots)))
    # values sharing a slot never live at the same time
    written, last_read = {}, {}
    for pos, item in enumerate(schedule.items):
        for n in fusion.groups[item.group].inputs:
            last_read[n] = pos
        for n in fusion.groups[item.group].outputs:
            written[n] = pos
    for s in inter:
        for v, w in zip(s.values, s.values[1:], strict=False):
            assert last_read[v] < written[w]
    # every slot is 64 floats; at the last kernel 2 inputs, 5 outputs and t are live
    assert plan.allocated_bytes == len(plan.slots) * 256 == 9 * 256
    assert plan.peak_bytes == 8 * 256
    # add reads two and writes one; each sub and mul reads one and writes one
    assert plan.bytes_moved == 3 * 256 + 8 * 2 * 256
    stats = dict(job.record("memory").passes[0].stats)
    assert stats == {"slots": 9, "in-place": 0, "allocated-bytes": 9 * 256,
                     "peak-bytes": 8 * 256, "bytes-moved": 19 * 256}


def test_bufferization_without_reuse_uses_more_slots() -> None:
    reused = accy.prepare(chain, pipeline(buffers="in-place=false"), until="memory").product.buffers
    job = accy.prepare(chain, pipeline(buffers="reuse=false in-place=false"), until="memory")
    plan = job.product.buffers
    inter = [s for s in plan.slots if s.role is SlotRole.intermediate]
    assert len(inter) == 4 and all(len(s.values) == 1 for s in inter)
    assert len(plan) == len(reused) + 2
    assert plan.allocated_bytes == 11 * 256 > reused.allocated_bytes
    assert plan.bytes_moved == reused.bytes_moved  # reuse changes where, not how much


def test_reused_slots_compute_right_values(device) -> None:
    a = np.linspace(-1, 1, 64).astype(np.float32)
    b = np.linspace(0, 0.5, 64).astype(np.float32)
    for reuse in ("true", "false"):
        job = accy.prepare(chain, pipeline(buffers=f"reuse={reuse}"))
        for got, want in zip(job.run(a, b, device=device), numpy_chain(a, b), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6)


def test_bufferization_sizes_and_roles() -> None:
    @accy.function
    def mixed(a: accy.f32[2, 3], b: accy.f32[3]):
        return a * np.arange(3, dtype=np.float32) + b * 2.0

    plan = accy.prepare(mixed, until="memory").product.buffers
    by_role = {}
    for s in plan.slots:
        by_role.setdefault(s.role, []).append(s.nbytes)
    # the 3-element constant gets a slot; the scalar 2.0 is inlined into the kernel
    assert by_role == {SlotRole.input: [24, 12], SlotRole.constant: [12],
                       SlotRole.output: [24]}
    assert plan.peak_bytes == 24 + 12 + 12 + 24
    assert plan.bytes_moved == 24 + 12 + 12 + 24
    (out,) = (s for s in plan.slots if s.role is SlotRole.output)
    assert plan.slot_of(0, out.values[0]) is out
    with pytest.raises(KeyError):
        plan.slot_of(1, out.values[0])


# layout-planning --------------------------------------------------------------------------


def test_layout_is_row_major() -> None:
    @accy.function
    def f(a: accy.f32[2, 3, 4], b: accy.f32[4]):
        return a + b

    job = accy.prepare(f, pipeline(layout="alignment=128"), until="memory")
    layouts = {lay.slot: lay for lay in job.product.layout.layouts}
    assert len(layouts) == len(job.product.buffers)
    assert layouts[0].shape == (2, 3, 4) and layouts[0].strides == (12, 4, 1)
    assert layouts[1].shape == (4,) and layouts[1].strides == (1,)
    assert all(lay.alignment == 128 for lay in layouts.values())


@pytest.mark.parametrize("alignment", [3, 0, -8, 48])
def test_layout_rejects_bad_alignment(alignment: int) -> None:
    with pytest.raises(PipelineError) as info:  # when the pipeline text is read
        accy.prepare(chain, pipeline(layout=f"alignment={alignment}"), until="memory")
    message = str(info.value)
    assert "layout-planning" in message and "power of two" in message
    assert str(alignment) in message


# kernel-outlining-planning ----------------------------------------------------------------


def test_entry_names_dedup_repeated_names() -> None:
    job = accy.prepare(chain, pipeline(fusion="horizontal=false"))
    assert [k.entry for k in job.kernels] == [
        "add_kernel", "sub_kernel", "mul_kernel", "sub_kernel_1", "mul_kernel_1",
        "sub_kernel_2", "mul_kernel_2", "sub_kernel_3", "mul_kernel_3"]
    outline = job.product.outline
    assert [o.entry for o in outline.outlines] == [k.entry for k in job.kernels]
    assert len({k.entry for k in job.kernels}) == job.kernel_count


def test_entry_names_capped_by_max_name_ops() -> None:
    @accy.function
    def long(a: accy.f32[16], b: accy.f32[16]):
        return accy.maximum(((a + b) * b) - b, b)

    assert accy.prepare(long).kernels[0].entry == "add_mul_sub_max"
    job = accy.prepare(long, pipeline(outline="max-name-ops=2"))
    assert job.kernels[0].entry == "add_mul_and_2_more"
    assert entry_name(["add", "add", "mul"], 6) == "add_mul"
    assert entry_name(["a", "b", "c"], 3) == "a_b_c"


def test_outline_arguments_and_geometry() -> None:
    @accy.function
    def f(a: accy.f32[1000], b: accy.f32[1000]):
        return a * 2.0 + b

    job = accy.prepare(f, pipeline(outline="work-group-size=64"))
    (o,) = job.product.outline.outlines
    assert o.geometry.local_size == (64,)
    assert o.geometry.global_size == (1024,)
    assert o.input_slots == (0, 1) and o.output_slots == (2,)  # 2.0 is inlined
    # the target caps the work-group size
    small = TargetProfile(max_work_group_size=32)
    job = accy.prepare(f, target=small)
    assert job.kernels[0].geometry.local_size == (32,)
    assert job.kernels[0].geometry.global_size == (1024,)


def test_outline_rejects_non_positive_work_group() -> None:
    with pytest.raises(PipelineError, match=r"size.*got 0; allowed: 1 <= work-group-size"):
        accy.prepare(chain, pipeline(outline="work-group-size=0"))


# kernelization ----------------------------------------------------------------------------


def test_kernelization_builds_loads_computes_stores() -> None:
    job = accy.prepare(chain)
    k = job.kernels[1]  # t - 1.0
    assert [type(s).__name__ for s in k.body] == ["Let", "Let", "Let", "Store"]
    assert isinstance(k.body[1].expr, Load) and k.body[2].expr.op == "-"
    assert [a.name for a in k.args] == ["in0", "out0"]
    assert [a.is_output for a in k.args] == [False, True]
    assert k.ops == ((Op.SUB, DType.f32),)
    assert k.domain == (64,) and k.schedule_kind is ScheduleKind.flat
    slots = job.product.outline.outlines[1]
    assert [a.slot for a in k.args] == [*slots.input_slots, *slots.output_slots]


def test_kernelization_loops_over_reduced_axes() -> None:
    @accy.function
    def red(a: accy.f32[4, 8]):
        return a.sum(1)

    special = [g for g in GENERATORS if g != "loop-nest"]
    generic = "kernelization" + ("{disable=" + ",".join(special) + "}" if special else "")
    stages = "accy-contract,accy-tensor,accy-dispatch,accy-memory,kernel-outlining-planning"
    (k,) = accy.prepare(red, f"{stages},{generic}").kernels
    assert k.schedule_kind is ScheduleKind.reduction and k.domain == (4,)
    (loop,) = [s for s in walk_stmts(k.body) if isinstance(s, For)]
    assert expr(loop.stop) == "8L"


# backend-legalization ---------------------------------------------------------------------


@accy.function
def double_f64(a: accy.f64[4]):
    return a * 2.0


@accy.function
def double_f32(a: accy.f32[4]):
    return a * 2.0


def statuses(job) -> list[KernelStatus]:
    return [k.status for k in job.product.legality.kernels]


def test_legalization_f64_unsupported_by_default() -> None:
    job = accy.prepare(double_f64)
    assert statuses(job) == [KernelStatus.unsupported_dtype]
    detail = job.product.legality.kernels[0].detail
    assert "f64" in detail
    assert not job.product.legality.is_legal
    assert job.product.legality.first_illegal().kernel == 0
    assert job.kernel_summary(0).status is KernelStatus.unsupported_dtype
    with_f64 = TargetProfile(dtypes=frozenset({DType.f32, DType.f64}))
    assert statuses(accy.prepare(double_f64, target=with_f64)) == [KernelStatus.legal]


def test_legalization_f32_legal() -> None:
    job = accy.prepare(double_f32)
    assert statuses(job) == [KernelStatus.legal]
    assert job.product.legality.is_legal and job.product.legality.first_illegal() is None
    assert job.product.legality.target_fingerprint == TargetProfile().fingerprint()
    assert dict(job.record("target").passes[0].stats) == {"illegal": 0}


def test_legalization_unsupported_artifact_and_limits() -> None:
    job = accy.prepare(double_f32, target=TargetProfile(artifact_formats=frozenset({"ptx"})))
    assert statuses(job) == [KernelStatus.unsupported_artifact]
    # a backend no one registered is an error naming those that are
    with pytest.raises(PassFailure, match=r"unknown backend 'cuda' \(registered: opencl") as e:
        accy.prepare(double_f32, target=TargetProfile(backend="cuda"))
    assert isinstance(e.value.__cause__, BackendLookupError)
    # kernels planned for 256-wide work-groups, legalized for a smaller device
    @accy.function
    def wide(a: accy.f32[1024]):
        return a * 2.0

    kernel_stage = accy.prepare(wide, until="kernel")
    assert kernel_stage.kernels[0].geometry.local_size == (256,)
    job = accy.prepare(kernel_stage, target=TargetProfile(max_work_group_size=64))
    assert statuses(job) == [KernelStatus.exceeds_limits]
    assert job.target.max_work_group_size == 64


def test_legalization_covers_every_kernel() -> None:
    b = Builder()
    f = b.begin_function("two", [b.tensor(DType.f32, (4,))])
    x = f.param(0)
    y = x * 2.0
    f.return_(y, y.astype(DType.f64) + 1.0)
    f.finish()
    job = accy.prepare(b.finish())
    assert job.kernel_count == 2
    assert statuses(job) == [KernelStatus.legal, KernelStatus.unsupported_dtype]
    assert job.record(Stage.target).passes[0].stats == (("illegal", 1),)


# entry names versus OpenCL built-in functions ----------------------------------------------

OPENCL_BUILTINS = frozenset({
    "exp", "log", "sqrt", "rsqrt", "sin", "cos", "floor", "ceil", "tanh", "fabs", "abs",
    "max", "min", "fmax", "fmin", "pow", "select", "erf", "isnan", "clamp", "sign",
})


def _single_op_programs() -> dict[str, accy.Program]:
    @accy.function
    def e(a: accy.f32[8]):
        return a.exp()

    @accy.function
    def m(a: accy.f32[8], b: accy.f32[8]):
        return accy.maximum(a, b)

    @accy.function
    def n(a: accy.f32[8], b: accy.f32[8]):
        return accy.minimum(a, b)

    @accy.function
    def t(a: accy.f32[8]):
        return a.tanh()

    return {"exp": e, "max": m, "min": n, "tanh": t}


def test_entry_names_avoid_opencl_builtins() -> None:
    for program in _single_op_programs().values():
        (k,) = accy.prepare(program).kernels
        assert k.entry not in OPENCL_BUILTINS, k.entry
