"""``accy fuzz``: a long differential campaign over random programs.

Rounds of hypothesis-generated programs (``accy.testing.programs_with_inputs`` over every op and
the device's dtypes; every fourth round with ``nan``/``inf`` inputs and constants), each program
checked pass by pass (:func:`accy.testing.check_passes`) and end to end on OpenCL
(:func:`accy.testing.check_end_to_end`). Round ``r`` uses hypothesis seed ``seed * 1000003 +
r``, so a campaign is reproducible up to timing (exactly, when bounded by ``rounds`` alone). A
failing program is shrunk by hypothesis and written to the output folder as IR text
(``NNN-<check>.accy``), its inputs (``.npz``) and a JSON record (error, check, seeds, pipeline,
device, versions); a failure whose signature (check, pass, ops computing the result that
differed) was already written is only counted. ``summary.json`` is rewritten (atomically) after
every round, so a campaign that dies keeps its counts; every file is written through
:func:`accy.experiments.records.atomic_write`. A folder that holds an earlier campaign is
refused unless ``resume`` (continue it: its counts, signatures and round numbers; same seed and
pipeline) or ``force`` (a new campaign there); either way new records are numbered after the
existing ones, so none is ever overwritten.

Rounds run one at a time as tasks of the sweep executor (:mod:`accy.experiments.executor`, whose
crash and timeout handling they share): a ``LocalExecutor`` of one spawned worker process, or a
``DaskExecutor`` (``executor="dask"``: the cluster at ``scheduler``, or a local one on
127.0.0.1). The worker selects its own OpenCL device and is replaced by a fresh one after
``rounds_per_worker`` rounds (``max_tasks``; on Dask, a restart through its nanny). This keeps a
campaign of any length within the process limits of the OpenCL driver: PoCL keeps every kernel a
process has launched mapped (four memory mappings per kernel, released programs included), so
one process runs out of mappings (``vm.max_map_count``, 65530 by default) after about 16 000
distinct kernels; the default of 40 rounds (1000 programs) per worker stays far below that. The
passes of the pipeline are sent to the workers by reference, so a pass registered at run time
must be importable by its module and name.

A worker that dies during a round (a crash in the driver, say) or a round that runs longer than
``round_timeout`` seconds (the worker is then killed) is recorded like a failing program, with
check ``crash`` or ``timeout``: a JSON record ``NNN-crash.json`` / ``NNN-timeout.json`` with the
error, the round's seed and whether it drew nan/inf, but no program or inputs (nothing was
shrunk). :func:`run_round` with the record's ``round_seed``, ``allow_nan``, ``max_nodes``,
``max_dim``, ``ops``, ``device_type``, ``dtypes`` and ``pipeline`` replays that round in the
calling process. Repeats are counted by signature as for other failures, and the campaign goes
on with a fresh worker.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import re
import resource
import signal
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from accy.ir.node import topological
from accy.ir.ops import Op, OpKind
from accy.ir.printer import print_program
from accy.ir.program import Program
from accy.ir.types import DType

ROUND_EXAMPLES = 25
NAN_EVERY = 4  # every NAN_EVERY-th round draws nan/inf inputs and constants
ROUNDS_PER_WORKER = 40  # about 1000 programs per worker process
ROUND_TIMEOUT = 600.0  # seconds a round may run before its worker is killed


def default_worker_memory() -> float:
    """Half the machine's physical memory, in GiB: the default address-space limit of a local
    worker (``worker_memory``)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 / 2**30


@dataclass
class CampaignSummary:
    """What a campaign did; ``failures`` are the JSON records written (new signatures)."""

    seed: int
    pipeline: str
    device: str
    elapsed_s: float = 0.0
    rounds: int = 0
    programs: int = 0  # programs checked, shrinking included
    unsupported: int = 0  # programs some op of which has no kernel lowering yet
    repeats: int = 0  # failures whose signature was already written
    workers: int = 0  # worker processes that ran rounds
    crashes: int = 0  # rounds whose worker died (repeats included)
    timeouts: int = 0  # rounds killed after the round timeout (repeats included)
    failures: list[dict[str, Any]] = field(default_factory=list)

    def line(self) -> str:
        rate = self.programs / self.elapsed_s if self.elapsed_s else 0.0
        return (f"[{self.elapsed_s:7.1f}s] programs {self.programs} ({rate:.1f}/s)  failures "
                f"{len(self.failures)} (+{self.repeats} repeats)  unsupported "
                f"{self.unsupported}  rounds {self.rounds}  workers {self.workers}")


@dataclass(frozen=True)
class RoundFailure:
    """A failing program of a round, shrunk, as plain data (IR text and numpy inputs)."""

    check: str  # "passes" or "end-to-end"
    signature: str
    error_type: str
    error: str
    program: str  # IR text (accy.ir.printer.print_program)
    inputs: dict[str, Any]  # function name -> input arrays
    fingerprint: str


@dataclass(frozen=True)
class RoundResult:
    """What one round did, sent from the worker to the campaign."""

    pid: int  # the worker process that ran it
    programs: int
    unsupported: int
    failure: RoundFailure | None = None


@dataclass
class _Seen:
    case: tuple[Program, dict] | None = None
    check: str = ""
    error: BaseException | None = None


def _signature(check: str, program: Program, error: BaseException) -> str:
    """check | error type | pass or message | ops computing the result that differed (or all)."""
    named = re.search(r"function (\S+) result (\d+)", str(error))
    roots = [f.results[int(named.group(2))] for f in program.functions
             if named and f.name == named.group(1)] or program.nodes()
    ops = sorted({n.op.value for n in topological(roots) if n.srcs})
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    where = re.search(r"pass (\S+) ", first)
    what = where.group(1) if where else re.sub(r"[0-9]+", "N", first)[:80]
    return f"{check} | {type(error).__name__} | {what} | {','.join(ops)}"


def run_round(round_seed: int, *, allow_nan: bool, max_nodes: int, dtypes: list[DType | str],
              pipeline: str, device: str | None, max_dim: int = 4,
              ops: list[str] | None = None, device_type: str | None = None,
              deadline: float | None = None,
              passes: dict[str, type] | None = None, stop_at: float | None = None
              ) -> RoundResult:
    """One round: ``ROUND_EXAMPLES`` programs of hypothesis seed ``round_seed``, each checked
    pass by pass and end to end (prepared for the device's profile as ``device_type``, as
    :func:`~accy.differential.check_end_to_end` takes it); the first failure is shrunk and
    returned as data.

    The campaign runs it in a worker process; called directly it replays a round (of a crash
    or timeout record, say) in this process. Past ``deadline`` (``time.monotonic()``) no new
    program is checked, nor past ``stop_at`` (``time.time()``, which unlike the monotonic
    clock means the same on another machine of a Dask cluster). ``passes`` (name -> pass
    class) are added to the pass registry first: passes registered at run time in the
    campaign's process.
    """
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as hypothesis_seed

    from accy.backends.registry import get_backend
    from accy.passes import registry
    from accy.testing import check_end_to_end, check_passes, programs_with_inputs

    if passes:
        registry.all_passes()  # the built-in passes first, then the campaign's own
        registry.PASSES.update(passes)
    get_backend().select_device(device)  # this process's own context (else a DeviceError)
    seen = _Seen()
    counts = {"programs": 0, "unsupported": 0}
    strategy = programs_with_inputs(max_nodes=max_nodes, max_dim=max_dim, ops=op_choice(ops),
                                    dtypes=[DType(d) for d in dtypes],
                                    allow_nan=allow_nan, functions=(1, 2))

    @settings(max_examples=ROUND_EXAMPLES, database=None, deadline=None,
              derandomize=False, verbosity=Verbosity.quiet, report_multiple_bugs=False,
              phases=(Phase.generate, Phase.shrink), print_blob=False,
              suppress_health_check=list(HealthCheck))
    @hypothesis_seed(round_seed)
    @given(strategy)
    def body(case: tuple[Program, dict]) -> None:
        if seen.error is None and ((deadline is not None and time.monotonic() > deadline) or
                                   (stop_at is not None and time.time() > stop_at)):
            return  # time is up: let the round finish quickly (never while shrinking)
        program, inputs = case
        counts["programs"] += 1
        check = "passes"
        try:
            passed = check_passes(program, inputs, pipeline)
            check = "end-to-end"
            e2e = check_end_to_end(program, inputs, device, pipeline, device_type)
        except Exception as e:
            seen.case, seen.check, seen.error = case, check, e
            raise
        counts["unsupported"] += "unsupported" in (passed.status, e2e.status)

    failure = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            body()
        except Exception:  # noqa: BLE001 (every failure is recorded, then the campaign goes on)
            if seen.case is not None and seen.error is not None:
                program, inputs = seen.case
                error = seen.error
                failure = RoundFailure(
                    check=seen.check, signature=_signature(seen.check, program, error),
                    error_type=type(error).__name__, error=str(error),
                    program=print_program(program), inputs=inputs,
                    fingerprint=program.fingerprint())
    return RoundResult(os.getpid(), counts["programs"], counts["unsupported"], failure)


def op_choice(names: list[str] | None) -> list[Op | OpKind] | None:
    """The ops programs are drawn from: op names or op-kind names (``einsum`` is both, the
    same ops); None for every op. A ValueError names an unknown one and the valid names."""
    if names is None:
        return None
    ops = {o.value: o for o in Op if o.kind is not OpKind.SOURCE}
    kinds = {k.value: k for k in OpKind if k is not OpKind.SOURCE}
    if not names:
        raise ValueError("give at least one op or op-kind name")
    unknown = [n for n in names if n not in ops and n not in kinds]
    if unknown:
        raise ValueError(f"unknown op or op kind {unknown[0]!r}; ops: {', '.join(ops)}; "
                         f"kinds: {', '.join(kinds)}")
    return [ops.get(n) or kinds[n] for n in names]


def _init_worker(memory: int = 0) -> None:
    # Ctrl-C reaches the whole process group: the campaign stops its worker itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if memory:  # bytes of address space: an allocation past them fails in the worker
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        resource.setrlimit(resource.RLIMIT_AS, (
            memory if hard == resource.RLIM_INFINITY else min(memory, hard), hard))


def _worker_passes(pipeline: str) -> dict[str, type]:
    """The pipeline's pass classes, checked to be sendable to a worker (by reference)."""
    from accy.errors import PipelineError
    from accy.passes.spec import parse_pipeline

    passes = {p.name: type(p) for p in parse_pipeline(pipeline).passes}
    for name, cls in passes.items():
        try:
            pickle.dumps(cls)
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            raise PipelineError(
                f"pass {name!r} ({cls.__module__}.{cls.__qualname__}) cannot be sent to the "
                f"fuzz worker processes; define it at module level: {e}") from None
    return passes


def _crash_signature(error: str) -> str:
    """Repeats of a crash share a signature: how the process ended (local workers), or the
    Dask exception's type (its message names the task and so differs every time)."""
    local = re.search(r"worker process died \((.*)\)", error)
    if local:
        return f"crash | ProcessExpired | {local.group(1)}"
    lost = re.match(r"worker lost: (\w+)", error)
    return f"crash | WorkerLost | {lost.group(1) if lost else 'unknown'}"


_RECORD = re.compile(r"^(\d{3,})-.*\.json$")


class _Campaign:
    def __init__(self, minutes: float | None, rounds: int | None, seed: int, out: Path,
                 max_nodes: int, max_dim: int, ops: list[str] | None, device: str | None,
                 device_type: str | None, pipeline: str,
                 stream: TextIO, rounds_per_worker: int, round_timeout: float | None,
                 executor: str, scheduler: str | None, force: bool, resume: bool,
                 worker_memory: float | None) -> None:
        from accy.backends.registry import get_backend
        from accy.passes.spec import parse_pipeline

        if rounds_per_worker < 1:
            raise ValueError(f"rounds_per_worker must be >= 1, got {rounds_per_worker}")
        if round_timeout is not None and not round_timeout > 0:
            raise ValueError(f"round_timeout must be > 0 seconds, got {round_timeout}")
        if worker_memory is not None and not worker_memory >= 0:
            raise ValueError(f"worker_memory must be >= 0 GiB (0: no limit), got "
                             f"{worker_memory}")
        if minutes is None and rounds is None:
            raise ValueError("a campaign needs a bound: minutes, rounds or both")
        if executor not in ("local", "dask"):
            raise ValueError(f"unknown executor {executor!r}; valid: local, dask")
        pipeline = parse_pipeline(pipeline).text()  # a PipelineError before anything runs
        self.passes = _worker_passes(pipeline)
        backend = get_backend()
        runtime, target = backend.open(device)  # a DeviceError before anything runs
        from accy.differential import typed_as

        typed_as(target, device_type)  # a ValueError for an unknown type, before anything runs
        self.device_type = device_type
        self.device_name = backend.describe_device(runtime)
        self.device_key = backend.device_key(runtime)
        self.device = device
        self.dtypes = sorted(target.usable_dtypes, key=lambda d: d.value)
        # a ValueError now, not in a worker: unknown names, or no op buildable from the dtypes
        from accy.program_gen import make_options

        make_options(op_choice(ops), self.dtypes)
        self.ops = ops
        self.start = time.monotonic()
        self.deadline = None if minutes is None else self.start + 60 * minutes
        self.rounds = rounds
        self.seed, self.out, self.max_nodes, self.max_dim = seed, out, max_nodes, max_dim
        self.pipeline, self.stream = pipeline, stream
        self.rounds_per_worker, self.round_timeout = rounds_per_worker, round_timeout
        # GiB of address space a local worker may hold (None: no limit; a Dask cluster's
        # workers keep their own limits)
        self.worker_memory = (None if executor == "dask" else default_worker_memory()
                              if worker_memory is None else worker_memory or None)
        self.executor_kind, self.scheduler = executor, scheduler
        self.summary = CampaignSummary(seed, pipeline, self.device_key)
        self.signatures: set[str] = set()
        self.worker_ids: set[str] = set()  # workers that ran rounds in this invocation
        self.workers_before = 0  # worker processes of the campaign this one resumes
        self.first_round = 0
        self.elapsed_before = 0.0
        self.next_number = self.check_out(force, resume)

    def check_out(self, force: bool, resume: bool) -> int:
        """Refuse a used folder unless ``force`` or ``resume``; with ``resume`` take over the
        earlier campaign's counts and signatures. Returns the next free record number: records
        are numbered after every existing one, so none is ever overwritten."""
        from accy.experiments.records import DamagedResultError, ResultsExistError

        numbers = [int(m.group(1)) for p in (self.out.iterdir() if self.out.is_dir() else ())
                   if (m := _RECORD.match(p.name))]
        summary = self.out / "summary.json"
        used = summary if summary.exists() else (
            next(self.out.glob("[0-9][0-9][0-9]*-*.json"), None) if numbers else None)
        if used is not None and not (force or resume):
            raise ResultsExistError(
                f"{used} belongs to an earlier campaign; pass --resume to continue it or "
                "--force to start a new one there (its records are numbered after the "
                "existing ones, none is overwritten)")
        if resume and summary.exists():
            try:
                old = json.loads(summary.read_text())
                found = [json.loads((self.out / name).read_text()) for name in old["failures"]]
            except (json.JSONDecodeError, KeyError, OSError) as e:
                raise DamagedResultError(f"cannot resume from {summary}: {e}") from None
            if (old["seed"], old["pipeline"]) != (self.seed, self.pipeline):
                raise ResultsExistError(
                    f"{summary} is a campaign of seed {old['seed']} and pipeline "
                    f"{old['pipeline']}; resume it with --seed {old['seed']} --pipeline "
                    f"'{old['pipeline']}', or pass --force to start a new one")
            s = self.summary
            for k in ("rounds", "programs", "unsupported", "repeats", "crashes", "timeouts"):
                setattr(s, k, int(old.get(k, 0)))
            s.failures = found
            self.signatures = {f["signature"] for f in found}
            self.workers_before = int(old.get("workers", 0))
            self.elapsed_before = float(old.get("elapsed_s", 0.0))
            self.first_round = s.rounds  # new rounds, new seeds
        return max(numbers, default=0) + 1

    def make_executor(self) -> Any:
        from accy.experiments.dask_executor import DaskExecutor
        from accy.experiments.executor import LocalExecutor

        # one round at a time, never retried (a crash or hang is a finding); the worker is
        # replaced after rounds_per_worker rounds (PoCL's per-process kernel mappings)
        if self.executor_kind == "dask":
            return DaskExecutor(self.scheduler, workers=1, retries=0, show_progress=False,
                                timeout=self.round_timeout, max_tasks=self.rounds_per_worker)
        memory = int(self.worker_memory * 2**30) if self.worker_memory else 0
        return LocalExecutor(1, retries=0, show_progress=False, timeout=self.round_timeout,
                             max_tasks=self.rounds_per_worker,
                             initializer=functools.partial(_init_worker, memory))

    def more(self) -> bool:
        if self.rounds is not None and self.summary.rounds - self.first_round >= self.rounds:
            return False
        return self.deadline is None or time.monotonic() < self.deadline

    def run(self) -> CampaignSummary:
        self.out.mkdir(parents=True, exist_ok=True)
        bound = " and ".join(x for x in (
            f"{self.rounds} rounds" if self.rounds is not None else "",
            f"{(self.deadline - self.start) / 60:g} minutes" if self.deadline else "") if x)
        print(f"accy fuzz: seed {self.seed}, device {self.device_name}, dtypes "
              f"{','.join(d.value for d in self.dtypes)}, max {self.max_nodes} ops"
              f"{' of ' + ','.join(self.ops) if self.ops else ''}"
              f"{', ' + self.device_type + '-typed kernels' if self.device_type else ''}, dims up "
              f"to {self.max_dim}, pipeline {self.pipeline}, {self.rounds_per_worker} rounds "
              f"per worker on the {self.executor_kind} executor, at most {bound}, writing to "
              f"{self.out}",
              file=self.stream, flush=True)
        executor = self.make_executor()
        try:
            while self.more():
                self.round(executor, self.summary.rounds)
                self.summary.rounds += 1
                self.tick()
                self.write_summary(final=False)
        except KeyboardInterrupt:  # stop early, but keep what was found
            print("interrupted", file=self.stream)
            self.tick()
        finally:
            executor.close()  # the local executor kills a worker still running on interrupt
        self.write_summary()
        return self.summary

    def round(self, executor: Any, index: int) -> None:
        from accy.errors import AccyError
        from accy.experiments.executor import Task

        allow_nan = index % NAN_EVERY == NAN_EVERY - 1
        round_seed = self.seed * 1_000_003 + index
        remaining = None if self.deadline is None else self.deadline - time.monotonic()
        task = Task(("round", index), "accy.fuzz:run_round", dict(
            round_seed=round_seed, allow_nan=allow_nan, max_nodes=self.max_nodes,
            max_dim=self.max_dim, ops=self.ops, device_type=self.device_type,
            dtypes=[d.value for d in self.dtypes], pipeline=self.pipeline, device=self.device,
            stop_at=None if remaining is None else time.time() + remaining,
            passes=self.passes))
        [result] = executor.map([task])
        # a timed-out round's local worker is unknown (killed before it answered): its own
        self.worker_ids.add(result.worker or f"timed-out-{index}")
        self.summary.workers = self.workers_before + len(self.worker_ids)
        if result.status == "crashed":
            self.summary.crashes += 1
            self.record_round_loss(
                "crash", _crash_signature(result.error),
                "ProcessExpired" if self.executor_kind == "local" else "KilledWorker",
                f"the worker process died during the round: {result.error}", round_seed,
                allow_nan)
        elif result.status == "timeout":
            self.summary.timeouts += 1
            self.record_round_loss(
                "timeout", "timeout | TimeoutError | round timeout", "TimeoutError",
                f"the round ran longer than {self.round_timeout:g} s; its worker was killed",
                round_seed, allow_nan)
        elif result.status == "failed":  # run_round itself raised: no device on the worker...
            last = result.error.strip().splitlines()[-1] if result.error.strip() else "?"
            raise AccyError(f"round {index} failed in its worker ({result.worker}): {last}")
        else:
            value: RoundResult = result.value
            self.summary.programs += value.programs
            self.summary.unsupported += value.unsupported
            if value.failure is not None:
                self.record_failure(value.failure, round_seed, allow_nan)

    def new_stem(self, check: str, signature: str) -> str | None:
        """The file stem of a new failure, or None for a repeat (only counted)."""
        if signature in self.signatures:
            self.summary.repeats += 1
            return None
        self.signatures.add(signature)
        self.next_number += 1
        return f"{self.next_number - 1:03d}-{check}"

    def record_failure(self, failure: RoundFailure, round_seed: int, allow_nan: bool) -> None:
        from accy.experiments.records import atomic_open, atomic_write

        stem = self.new_stem(failure.check, failure.signature)
        if stem is None:
            return
        atomic_write(self.out / f"{stem}.accy", failure.program)
        with atomic_open(self.out / f"{stem}.npz", "wb") as fh:
            np.savez(fh, **{f"{fn}/{i}": a for fn, arrays in failure.inputs.items()
                            for i, a in enumerate(arrays)})
        self.write_record(stem, {
            "check": failure.check, "signature": failure.signature,
            "error_type": failure.error_type, "error": failure.error,
            "program": f"{stem}.accy", "inputs": f"{stem}.npz",
            "fingerprint": failure.fingerprint}, round_seed, allow_nan)
        print(f"FAILURE {stem}: {failure.signature}\n{failure.program}", file=self.stream)

    def record_round_loss(self, check: str, signature: str, error_type: str, error: str,
                          round_seed: int, allow_nan: bool) -> None:
        """A round without a result (its worker crashed or was killed): no program to write."""
        stem = self.new_stem(check, signature)
        if stem is None:
            return
        self.write_record(stem, {
            "check": check, "signature": signature, "error_type": error_type, "error": error,
            "program": None, "inputs": None, "fingerprint": None}, round_seed, allow_nan)
        print(f"FAILURE {stem}: {signature}\n{error} (round seed {round_seed})",
              file=self.stream)

    def write_record(self, stem: str, entry: dict[str, Any], round_seed: int,
                     allow_nan: bool) -> None:
        import accy
        from accy.experiments.records import atomic_write

        entry |= {"record": f"{stem}.json", "seed": self.seed, "round_seed": round_seed,
                  "allow_nan": allow_nan, "max_nodes": self.max_nodes, "max_dim": self.max_dim,
                  "ops": self.ops, "device_type": self.device_type,
                  "dtypes": [d.value for d in self.dtypes], "pipeline": self.pipeline,
                  "device": self.device_key,
                  "versions": _versions(accy.__version__)}
        atomic_write(self.out / f"{stem}.json", json.dumps(entry, indent=2) + "\n")
        self.summary.failures.append(entry)

    def tick(self) -> None:
        self.summary.elapsed_s = self.elapsed_before + time.monotonic() - self.start
        print(self.summary.line(), file=self.stream, flush=True)

    def write_summary(self, final: bool = True) -> None:
        from accy.experiments.records import atomic_write

        s = self.summary
        s.elapsed_s = self.elapsed_before + time.monotonic() - self.start
        data = {k: getattr(s, k) for k in ("seed", "pipeline", "device", "elapsed_s", "rounds",
                                           "programs", "unsupported", "repeats", "workers",
                                           "crashes", "timeouts")}
        data["rounds_per_worker"] = self.rounds_per_worker
        data["round_timeout"] = self.round_timeout
        data["worker_memory_gib"] = self.worker_memory
        data["executor"] = self.executor_kind
        data["failures"] = [f["record"] for f in s.failures]
        data["finished"] = final
        # never half a file, even when the process dies
        atomic_write(self.out / "summary.json", json.dumps(data, indent=2) + "\n")
        if not final:
            return
        print(f"done: {s.programs} programs in {s.rounds} rounds ({s.workers} workers), "
              f"{len(s.failures)} failures (+{s.repeats} repeats; {s.crashes} crashes, "
              f"{s.timeouts} timeouts), {s.unsupported} unsupported; results in {self.out}",
              file=self.stream)


def _versions(accy_version: str) -> dict[str, str]:
    import hypothesis
    import pyopencl

    return {"accy": accy_version, "numpy": np.__version__, "hypothesis": hypothesis.__version__,
            "pyopencl": pyopencl.VERSION_TEXT, "python": sys.version.split()[0]}




def run_campaign(minutes: float | None, seed: int, out: str | Path, *, max_nodes: int = 8,
                 max_dim: int = 4, ops: list[str] | None = None, device: str | None = None,
                 device_type: str | None = None, pipeline: str = "accy-default",
                 stream: TextIO | None = None, rounds_per_worker: int = ROUNDS_PER_WORKER,
                 round_timeout: float | None = ROUND_TIMEOUT, rounds: int | None = None,
                 executor: str = "local", scheduler: str | None = None, force: bool = False,
                 resume: bool = False, worker_memory: float | None = None) -> CampaignSummary:
    """Fuzz for ``minutes`` and/or ``rounds`` (whichever ends first; one of them is needed);
    failing programs go to ``out``. Programs have at most ``max_nodes`` ops a function, drawn
    from ``ops`` (op or op-kind names; default every op), and dimensions of at most
    ``max_dim`` (larger ones give the kernels' tiles, vectors and tails more to cover).
    ``device_type`` (``"gpu"`` on PoCL): check the kernels built for that type of device on
    this one (:func:`~accy.differential.check_end_to_end`). Raises ``DeviceError`` without
    OpenCL. Progress lines (programs/s, failures, unsupported) and a summary go to
    ``stream``.

    Rounds run on ``executor`` (``local`` processes, or ``dask`` on ``scheduler``, a local
    cluster when None), in a worker replaced after ``rounds_per_worker`` rounds; a round past
    ``round_timeout`` seconds (None: no limit) is killed and recorded as a ``timeout``, one
    whose worker dies as a ``crash``. A local worker may hold ``worker_memory`` GiB of
    address space (None, the default: half the machine's memory; 0: no limit), so a program that
    would take the machine's memory fails in the worker (a ``MemoryError``, recorded with the
    program) instead of the kernel's OOM killer ending the worker, or another process, with no
    program to show (Dask workers keep their cluster's own limits). A folder holding an
    earlier campaign is refused (``ResultsExistError``) unless ``resume`` (continue it: its
    counts, signatures and round numbers) or ``force`` (a new campaign); records are never
    overwritten."""
    return _Campaign(minutes, rounds, seed, Path(out), max_nodes, max_dim, ops, device,
                     device_type, pipeline, stream or sys.stdout, rounds_per_worker, round_timeout,
                     executor, scheduler, force, resume, worker_memory).run()
