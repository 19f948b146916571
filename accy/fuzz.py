"""``accy fuzz``: a long differential campaign over random programs.

Rounds of hypothesis-generated programs (``accy.testing.programs_with_inputs`` over every op
and the device's dtypes; every fourth round with ``nan``/``inf`` inputs and constants), each
program checked pass by pass (:func:`accy.testing.check_passes`) and end to end on OpenCL
(:func:`accy.testing.check_end_to_end`). Round ``r`` uses hypothesis seed ``seed * 1000003 +
r``, so a campaign is reproducible up to timing. A failing program is shrunk by hypothesis and
written to the output folder as IR text (``NNN-<check>.accy``), its inputs (``.npz``) and a
JSON record (error, check, seeds, pipeline, device, versions); a failure whose signature (check,
pass, ops computing the result that differed) was already written is only counted.
``summary.json`` is rewritten after every round, so a campaign that dies keeps its counts.

Limit on PoCL: PoCL keeps every kernel it has launched mapped (four memory mappings per
kernel, released programs included), so one process runs out of mappings
(``vm.max_map_count``, 65530 by default) after about 16 000 distinct kernels; a one-hour
campaign on a 2-core machine came within a minute of that (11 700 programs). Longer
campaigns: raise ``vm.max_map_count`` or run several shorter ones with different seeds.
"""

from __future__ import annotations

import json
import re
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from accy.ir.node import topological
from accy.ir.printer import print_program
from accy.ir.program import Program

ROUND_EXAMPLES = 25
NAN_EVERY = 4  # every NAN_EVERY-th round draws nan/inf inputs and constants


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
    failures: list[dict[str, Any]] = field(default_factory=list)

    def line(self) -> str:
        rate = self.programs / self.elapsed_s if self.elapsed_s else 0.0
        return (f"[{self.elapsed_s:7.1f}s] programs {self.programs} ({rate:.1f}/s)  failures "
                f"{len(self.failures)} (+{self.repeats} repeats)  unsupported "
                f"{self.unsupported}")


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


class _Campaign:
    def __init__(self, minutes: float, seed: int, out: Path, max_nodes: int,
                 device: str | None, pipeline: str, stream: TextIO) -> None:
        from accy.backends.opencl.runtime import select_device
        from accy.passes.spec import parse_pipeline
        from accy.target import TargetProfile

        pipeline = parse_pipeline(pipeline).text()  # a PipelineError before anything runs
        self.runtime = select_device(device)
        self.device = device
        self.dtypes = sorted(TargetProfile.from_device(self.runtime.info).usable_dtypes,
                             key=lambda d: d.value)
        self.deadline = time.monotonic() + 60 * minutes
        self.start = time.monotonic()
        self.seed, self.out, self.max_nodes = seed, out, max_nodes
        self.pipeline, self.stream = pipeline, stream
        self.summary = CampaignSummary(seed, pipeline, self.runtime.info.key)
        self.signatures: set[str] = set()
        self.last_print = 0.0

    def run(self) -> CampaignSummary:
        self.out.mkdir(parents=True, exist_ok=True)
        print(f"accy fuzz: seed {self.seed}, device {self.runtime.info.name}, dtypes "
              f"{','.join(d.value for d in self.dtypes)}, max {self.max_nodes} ops, pipeline "
              f"{self.pipeline}, writing to {self.out}", file=self.stream)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                while time.monotonic() < self.deadline:
                    self.round(self.summary.rounds)
                    self.summary.rounds += 1
                    self.write_summary(final=False)
            except KeyboardInterrupt:  # stop early, but keep what was found
                print("interrupted", file=self.stream)
        self.tick(force=True)
        self.write_summary()
        return self.summary

    def round(self, index: int) -> None:
        from hypothesis import HealthCheck, Phase, Verbosity, given, settings
        from hypothesis import seed as hypothesis_seed

        from accy.testing import programs_with_inputs

        seen = _Seen()
        allow_nan = index % NAN_EVERY == NAN_EVERY - 1
        strategy = programs_with_inputs(max_nodes=self.max_nodes, dtypes=self.dtypes,
                                        allow_nan=allow_nan, functions=(1, 2))
        round_seed = self.seed * 1_000_003 + index

        @settings(max_examples=ROUND_EXAMPLES, database=None, deadline=None,
                  derandomize=False, verbosity=Verbosity.quiet, report_multiple_bugs=False,
                  phases=(Phase.generate, Phase.shrink), print_blob=False,
                  suppress_health_check=list(HealthCheck))
        @hypothesis_seed(round_seed)
        @given(strategy)
        def body(case: tuple[Program, dict]) -> None:
            if seen.error is None and time.monotonic() > self.deadline:
                return  # time is up: let the round finish quickly (never while shrinking)
            self.check(case, seen)

        try:
            body()
        except Exception:  # noqa: BLE001 (every failure is recorded, then the campaign goes on)
            if seen.case is not None and seen.error is not None:
                self.record(seen, round_seed, allow_nan)

    def check(self, case: tuple[Program, dict], seen: _Seen) -> None:
        from accy.testing import check_end_to_end, check_passes

        program, inputs = case
        self.summary.programs += 1
        check = "passes"
        try:
            passes = check_passes(program, inputs, self.pipeline)
            check = "end-to-end"
            e2e = check_end_to_end(program, inputs, self.device, self.pipeline)
        except Exception as e:
            seen.case, seen.check, seen.error = case, check, e
            raise
        self.summary.unsupported += "unsupported" in (passes.status, e2e.status)
        self.tick()

    def record(self, seen: _Seen, round_seed: int, allow_nan: bool) -> None:
        import accy

        program, inputs = seen.case
        error = seen.error
        signature = _signature(seen.check, program, error)
        if signature in self.signatures:
            self.summary.repeats += 1
            return
        self.signatures.add(signature)
        stem = f"{len(self.summary.failures) + 1:03d}-{seen.check}"
        (self.out / f"{stem}.accy").write_text(print_program(program))
        np.savez(self.out / f"{stem}.npz", **{f"{fn}/{i}": a for fn, arrays in inputs.items()
                                               for i, a in enumerate(arrays)})
        entry = {
            "check": seen.check, "signature": signature, "error_type": type(error).__name__,
            "error": str(error), "program": f"{stem}.accy", "inputs": f"{stem}.npz",
            "fingerprint": program.fingerprint(), "seed": self.seed, "round_seed": round_seed,
            "allow_nan": allow_nan, "max_nodes": self.max_nodes, "pipeline": self.pipeline,
            "device": self.runtime.info.key, "versions": _versions(accy.__version__),
        }
        (self.out / f"{stem}.json").write_text(json.dumps(entry, indent=2) + "\n")
        self.summary.failures.append(entry)
        print(f"FAILURE {stem}: {signature}\n{print_program(program)}", file=self.stream)
        self.tick(force=True)

    def tick(self, force: bool = False) -> None:
        now = time.monotonic()
        self.summary.elapsed_s = now - self.start
        if force or now - self.last_print >= 5.0:
            self.last_print = now
            print(self.summary.line(), file=self.stream, flush=True)

    def write_summary(self, final: bool = True) -> None:
        s = self.summary
        data = {k: getattr(s, k) for k in ("seed", "pipeline", "device", "elapsed_s", "rounds",
                                           "programs", "unsupported", "repeats")}
        data["failures"] = [f["program"] for f in s.failures]
        data["finished"] = final
        tmp = self.out / "summary.json.tmp"
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(self.out / "summary.json")  # never half a file, even when the process dies
        if not final:
            return
        print(f"done: {s.programs} programs in {s.rounds} rounds, {len(s.failures)} failures "
              f"(+{s.repeats} repeats), {s.unsupported} unsupported; results in {self.out}",
              file=self.stream)


def _versions(accy_version: str) -> dict[str, str]:
    import hypothesis
    import pyopencl

    return {"accy": accy_version, "numpy": np.__version__, "hypothesis": hypothesis.__version__,
            "pyopencl": pyopencl.VERSION_TEXT, "python": sys.version.split()[0]}


def run_campaign(minutes: float, seed: int, out: str | Path, *, max_nodes: int = 8,
                 device: str | None = None, pipeline: str = "accy-default",
                 stream: TextIO | None = None) -> CampaignSummary:
    """Fuzz for ``minutes``; failing programs go to ``out``. Raises ``DeviceError`` without
    OpenCL. Progress lines (programs/s, failures, unsupported) and a summary go to ``stream``."""
    return _Campaign(minutes, seed, Path(out), max_nodes, device, pipeline,
                     stream or sys.stdout).run()
