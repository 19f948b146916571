"""Preparing programs: ``prepare`` runs the pipeline; a :class:`PreparedJob` answers questions
about the result (records, stamps, kernels, sources) and runs it through OpenCL."""

from __future__ import annotations

import io
import json
import os
import pickle
import sys
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from accy.backends.registry import (
    DEFAULT_BACKEND,
    Backend,
    get_backend,
    open_device,
    registration,
)
from accy.egraph.cost import digests_kept
from accy.errors import (
    AccyError,
    GenericTargetWarning,
    KernelLookupError,
    NotPreparedError,
    WorkItemLookupError,
)
from accy.files import atomic_write
from accy.ir.node import Node, pack, unpack
from accy.ir.ops import Op
from accy.ir.program import Function, Program, Stage
from accy.kernels.ir import Kernel
from accy.passes.manager import Instrument, PassManager, StageRecord, gc_paused
from accy.passes.spec import Pipeline, parse_pipeline
from accy.plans import LaunchGeometry, ScheduleKind
from accy.product import Product
from accy.target import KernelStatus, TargetProfile

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_RUNNERS_LOCK = threading.Lock()  # guards the executable cache of run(), held for lookups only

# saved jobs (PreparedJob.save / load_job): a header line, a JSON line, then two pickles: every
# IR node of the job as one table (accy.ir.node.pack), and the job referring to its rows
JOB_MAGIC = b"accy-prepared-job\n"
JOB_FORMAT = 2  # bump when what is saved changes shape (2: the backend-neutral kernel IR)


class _JobPickler(pickle.Pickler):
    """Pickles a job with each IR node as a row number of one shared table. (A node pickled on
    its own carries every node it reaches, so the many nodes plans and kernels refer to would
    each repeat their ancestors: quadratic in a deep program, 33 s for a 1,000-node NasRNN.)"""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.nodes: list[Node] = []
        self.rows: dict[int, int] = {}  # id(node) -> its row

    def persistent_id(self, obj: object) -> int | None:
        if not isinstance(obj, Node):
            return None
        row = self.rows.get(id(obj))
        if row is None:
            row = self.rows[id(obj)] = len(self.nodes)
            self.nodes.append(obj)
        return row


class _JobUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, nodes: tuple[Node, ...]) -> None:
        super().__init__(file)
        self.nodes = nodes

    def persistent_load(self, pid: object) -> Node:
        if not isinstance(pid, int) or not 0 <= pid < len(self.nodes):
            raise pickle.UnpicklingError(f"no node {pid!r} in the saved table")
        return self.nodes[pid]


class JobFileError(AccyError):
    """A saved job that cannot be loaded: not a saved job, damaged, or saved by another accy
    version or file format (prepare the program again)."""


@dataclass(frozen=True)
class KernelSummary:
    """What a prepared kernel is: entry, arguments, body fingerprint, schedule, launch."""

    index: int
    entry: str
    argument_count: int
    body_fingerprint: str
    schedule_kind: ScheduleKind
    geometry: LaunchGeometry
    work_item: int
    function: str
    ops: tuple[str, ...]
    status: KernelStatus | None  # None until backend-legalization ran


class PreparedJob:
    """The products of every stage run so far, their records, and the kernels.

    Running is thread-safe: :meth:`run` and the executables of :meth:`executable` may be
    called from several threads at once, each call getting its own results (see
    :class:`~accy.backends.opencl.executable.Executable`).
    """

    def __init__(self, products: dict[Stage, Product], records: tuple[StageRecord, ...],
                 pipeline: Pipeline) -> None:
        self.products = dict(products)
        self.records = records
        self.pipeline = pipeline
        self._sources: dict[int, str] = {}
        self._runners: dict[tuple[str, object], object] = {}  # run()'s executables

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_runners"] = {}  # executables hold device objects, which do not pickle
        return state

    @staticmethod
    def load(path: str | os.PathLike[str]) -> PreparedJob:
        """The job saved at ``path`` (see :func:`load_job`)."""
        return load_job(path)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write this job (products, records, pipeline and every kernel's source) to ``path``
        atomically, for :func:`load_job` in another process (ablation workers, a GPU machine)
        to run without preparing again. The file is a pickle: load only files you trust.
        Returns the path."""
        from accy import __version__

        if self.product.kernels is not None:
            for i in range(self.kernel_count):  # rendered once here, never by the loader
                self.kernel_source(i)
        header = {"format": JOB_FORMAT, "accy": __version__, "stage": self.stage.value,
                  "python": f"{sys.version_info.major}.{sys.version_info.minor}",
                  "kernels": self.kernel_count if self.product.kernels is not None else 0}
        job = io.BytesIO()
        pickler = _JobPickler(job)
        pickler.dump(self)
        nodes = pickle.dumps(pack(pickler.nodes), protocol=pickle.HIGHEST_PROTOCOL)
        return atomic_write(path, JOB_MAGIC + json.dumps(header).encode() + b"\n" + nodes
                            + job.getvalue())

    @property
    def product(self) -> Product:
        return self.products[self.stage]

    @property
    def stage(self) -> Stage:
        return max(self.products, key=lambda s: s.index)

    @property
    def program(self) -> Program:
        return self.product.program

    @property
    def target(self) -> TargetProfile | None:
        return self.product.target

    def require_stage(self, stage: Stage, what: str) -> None:
        """Raise :class:`NotPreparedError` unless preparation reached ``stage``."""
        if self.stage.index < stage.index:
            raise NotPreparedError(
                f"{what} needs a job prepared through the {stage.value} stage; this one stops at "
                f"the {self.stage.value} stage (prepared with until={self.stage.value!r}): "
                f"continue with accy.prepare(job)")

    def record(self, stage: Stage | str) -> StageRecord:
        stage = Stage.parse(stage) if isinstance(stage, str) else stage
        for r in self.records:
            if r.stage is stage:
                return r
        raise KeyError(f"no record for stage {stage.value}; recorded: "
                       f"{[r.stage.value for r in self.records]}")

    def generators(self) -> dict[str, int]:
        """Kernel generator name -> work items it built (kernelization's statistics); empty
        before the kernel stage."""
        for run in (r for r in self.records if r.stage is Stage.kernel):
            for p in run.passes:
                if p.spec.split("{")[0] == "kernelization":
                    return {k.removeprefix("generator "): v for k, v in p.stats
                            if k.startswith("generator ")}
        return {}

    def stamps(self) -> dict[str, str]:
        """Product name -> fingerprint for every stage product held."""
        return {s.value: p.fingerprint() for s, p in sorted(self.products.items(),
                                                             key=lambda kv: kv[0].index)}

    # kernels -----------------------------------------------------------------------------
    @property
    def kernels(self) -> tuple[Kernel, ...]:
        self.require_stage(Stage.kernel, "this question (kernels)")
        return self.product.require("kernels", "this question", "the kernel stage")

    @property
    def kernel_count(self) -> int:
        return len(self.kernels)

    def _kernel(self, index: int) -> Kernel:
        kernels = self.kernels
        if (isinstance(index, bool) or not isinstance(index, int | np.integer)
                or not 0 <= index < len(kernels)):
            raise KernelLookupError(f"no kernel {index!r}; this job has {len(kernels)} "
                                    f"kernels (0..{len(kernels) - 1})")
        return kernels[int(index)]

    def _index_for_work(self, work_item: int) -> int:
        for i, k in enumerate(self.kernels):
            if k.work_item == work_item:
                return i
        raise WorkItemLookupError(f"no kernel implements work item {work_item!r}; work items: "
                                  f"{[k.work_item for k in self.kernels]}")

    def kernel_summary(self, index: int) -> KernelSummary:
        k = self._kernel(index)
        index = int(index)
        item = self.product.schedule.item(k.work_item)
        legality = self.product.legality
        return KernelSummary(
            index=index, entry=k.entry, argument_count=k.argument_count,
            body_fingerprint=k.body_fingerprint(), schedule_kind=k.schedule_kind,
            geometry=k.geometry, work_item=k.work_item,
            function=self.program.functions[item.function].name,
            ops=tuple(op.value for op, _ in k.ops),
            status=legality.kernels[index].status if legality else None,
        )

    def kernel_summaries(self) -> tuple[KernelSummary, ...]:
        return tuple(self.kernel_summary(i) for i in range(self.kernel_count))

    def summary_for_work(self, work_item: int) -> KernelSummary:
        return self.kernel_summary(self._index_for_work(work_item))

    @property
    def backend(self) -> Backend:
        """The backend of the job's target (:mod:`accy.backends.registry`; OpenCL unless the
        target names another)."""
        target = self.product.target
        return get_backend(target.backend if target is not None else None)

    def kernel_source(self, index: int) -> str:
        """The source of kernel ``index`` (OpenCL C for the OpenCL backend)."""
        k = self._kernel(index)
        index = int(index)
        if index not in self._sources:
            self._sources[index] = self.backend.render(k, self.product.target)
        return self._sources[index]

    def source_for_work(self, work_item: int) -> str:
        return self.kernel_source(self._index_for_work(work_item))

    def kernel_program(self, index: int) -> Program:
        """The tensor ops of kernel ``index`` as a program of their own (inputs as params)."""
        k = self._kernel(index)
        item = self.product.schedule.item(k.work_item)
        group = self.product.fusion.groups[item.group]
        memo: dict[Node, Node] = {}
        params = []
        for n in group.inputs:
            if n.op is Op.CONSTANT:
                memo[n] = n
            else:
                memo[n] = Node(Op.PARAM, n.type, (), {"index": len(params)})
                params.append(memo[n])
        for n in group.nodes:
            memo[n] = Node(n.op, n.type, tuple(memo[s] for s in n.srcs), dict(n.attrs))
        fn = Function(k.entry, tuple(params), tuple(f"in{i}" for i in range(len(params))),
                      tuple(memo[n] for n in group.outputs))
        return Program((fn,))

    def program_for_work(self, work_item: int) -> Program:
        return self.kernel_program(self._index_for_work(work_item))

    # running -----------------------------------------------------------------------------
    def executable(self, function: str | None = None, device=None, max_threads: int = 1):
        """An :class:`~accy.backends.opencl.executable.Executable` for one function.

        Its kernels' programs build up to ``max_threads`` at once; the executable is the same
        as a serial build's (kernels in schedule order, same sources, same outputs).
        """
        self.require_stage(Stage.target, "running")
        backend = self.backend
        device = backend.device(device)
        if self.product.target == TargetProfile():
            warnings.warn(
                f"this job was prepared for the generic profile ({self.product.target.device}: "
                f"accy.prepare was given no target or device), not for "
                f"{backend.describe_device(device)}, so its kernels were chosen for no device "
                f"and may run several times slower there than kernels prepared for it: "
                f"prepare with device=<the selector you run on> or "
                f"target=<its TargetProfile>", GenericTargetWarning,
                skip_file_prefixes=(_PACKAGE_DIR,))  # attributed to the caller's line
        return backend.executable(self, function, device, max_threads=max_threads)

    def build(self, device=None, max_threads: int = 1):
        """Build every legal kernel's OpenCL program on ``device`` (``ACCY_DEVICE`` or PoCL by
        default), up to ``max_threads`` at once, and return its runtime. Builds are cached per
        device, so executables made afterwards only look them up."""
        self.require_stage(Stage.target, "building")
        backend = self.backend
        runtime = backend.device(device)
        legality = self.product.legality
        sources = [self.kernel_source(i) for i in range(self.kernel_count)
                   if legality is None or legality.kernels[i].status is KernelStatus.legal]
        backend.build(runtime, sources, max_threads=max_threads)
        return runtime

    def run(self, *inputs, function: str | None = None, device=None, out=None,
            to_host: bool = True, wait: bool = True) -> tuple:
        """Run one function on ``device`` (default: ``ACCY_DEVICE`` or PoCL) with numpy inputs
        or device tensors; ``out``: arrays to write the results into; ``to_host=False``:
        results as device arrays; ``wait=False``: a pending call (see :class:`Executable`).

        The first run of a function on a device makes its executable, which later runs reuse
        (and the job holds, with its device buffers, while it lives). Thread-safe.
        """
        self.require_stage(Stage.target, "running")
        runtime = self.backend.device(device)
        key = (self.program.function(function).name, runtime)
        with _RUNNERS_LOCK:
            exe = self._runners.get(key)
        if exe is None:  # made outside the lock: building kernels may take long
            made = self.executable(function, runtime)
            with _RUNNERS_LOCK:  # two threads racing here: both run the one kept
                exe = self._runners.setdefault(key, made)
        return exe(*inputs, out=out, to_host=to_host, wait=wait)


def load_job(path: str | os.PathLike[str]) -> PreparedJob:
    """The job :meth:`PreparedJob.save` wrote to ``path``: it runs and answers as the saved one
    did (same stamps, sources, results). Raises :class:`JobFileError` for a file that is not a
    saved job, is damaged, or was saved by another accy version or file format. The file is a
    pickle: load only files you trust."""
    from accy import __version__

    with open(path, "rb") as f:
        data = f.read()
    if not data.startswith(JOB_MAGIC):
        raise JobFileError(f"{path}: not a saved accy job (PreparedJob.save writes them)")
    line, sep, payload = data[len(JOB_MAGIC):].partition(b"\n")
    try:
        header = json.loads(line) if sep else None
    except ValueError:
        header = None
    if not isinstance(header, dict):
        raise JobFileError(f"{path}: a damaged saved job (its header does not read)")
    if header.get("format") != JOB_FORMAT or header.get("accy") != __version__:
        raise JobFileError(
            f"{path}: saved by accy {header.get('accy')} (job format {header.get('format')}); "
            f"this is accy {__version__} (job format {JOB_FORMAT}): prepare the program again")
    try:
        stream = io.BytesIO(payload)
        with gc_paused():  # unpickling makes ~300,000 objects at 1,000 ops: collect once after
            nodes = unpack(*pickle.load(stream))
            job = _JobUnpickler(stream, nodes).load()
    except Exception as exc:  # truncated or damaged payload
        raise JobFileError(f"{path}: a damaged saved job ({type(exc).__name__}: {exc})"
                           ) from None
    if not isinstance(job, PreparedJob):
        raise JobFileError(f"{path}: holds a {type(job).__name__}, not a prepared job")
    return job


def prepare(
    source: Program | PreparedJob,
    pipeline: str | Pipeline = "accy-default",
    *,
    target: TargetProfile | None = None,
    device: str | None = None,
    backend: str | None = None,
    until: Stage | str = Stage.target,
    verify_each: bool = True,
    instruments: Sequence[Instrument] = (),
    build: bool = False,
    max_threads: int = 1,
) -> PreparedJob:
    """Run ``pipeline`` over a program, stage by stage, up to ``until``.

    ``source`` may be a :class:`PreparedJob` stopped at an earlier stage: preparation continues
    from its last product and keeps its records. The target profile is ``target``, else the
    profile of ``device`` (a device selector of ``backend``; OpenCL's: see
    :func:`accy.select_device`), else a generic profile of ``backend`` (the same kernels on
    every machine, chosen for no device: running such a job warns, ``GenericTargetWarning``,
    as they can be several times slower than the device's own). ``backend`` names a
    registered backend (:mod:`accy.backends.registry`, default ``"opencl"``). ``build=True``
    (needs the kernel stage) also builds every legal kernel on ``device`` (default
    ``ACCY_DEVICE`` or PoCL), ``max_threads`` programs at once, so the first run only looks
    the builds up (see :meth:`PreparedJob.build`).

    >>> job = prepare(program, device="pocl")   # doctest: +SKIP
    >>> job.kernel_count, job.kernel_source(0)  # doctest: +SKIP
    """
    until = Stage.parse(until) if isinstance(until, str) else until
    pipe = parse_pipeline(pipeline) if isinstance(pipeline, str) else pipeline
    if backend is not None:
        reg = registration(backend)  # an unknown name: the error lists the registered ones
        if target is not None and target.backend != backend:
            raise ValueError(f"prepare: target is for backend {target.backend!r}, "
                             f"not {backend!r}")
        if target is None and device is None and backend != DEFAULT_BACKEND:
            target = TargetProfile(backend=backend, device=f"generic {backend} device",
                                   artifact_formats=frozenset({reg.artifact_format}))
    if target is None and device is not None:
        target = open_device(device, backend)[1]
    if isinstance(source, PreparedJob):
        products, records, start = dict(source.products), source.records, source.product
        if target is not None and start.target != target:
            start = start.replace(target=target)
        remaining = Pipeline(tuple(p for p in pipe.passes if p.stage.index > start.stage.index))
    elif isinstance(source, Program):
        start = Product(Stage.semantic, source, target=target or TargetProfile())
        start.verify()
        products, records, remaining = {Stage.semantic: start}, (), pipe
    else:
        raise TypeError(f"prepare takes a Program or a PreparedJob, not {type(source).__name__}")
    manager = PassManager(remaining, verify_each=verify_each, instruments=instruments)
    new_records = []
    # one collection after the whole pipeline, not one after each stage; each large constant
    # hashed once for its digest
    with gc_paused(), digests_kept():
        for product, record in manager.run_stages(start, until):
            products[product.stage] = product
            new_records.append(record)
    job = PreparedJob(products, tuple(records) + tuple(new_records), pipe)
    if build:
        job.build(device, max_threads=max_threads)
    return job
