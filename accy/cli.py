"""The ``accy`` command."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from accy.errors import AccyError
from accy.ir.program import Program
from accy.target import DEVICE_TYPES


def _cmd_demo(args: argparse.Namespace) -> int:
    from accy.demo import run_demo

    worst = run_demo(device=args.device, size=args.size, show_source=not args.no_source)
    if worst > 1e-6:
        print(f"FAILED: error {worst:.3g} exceeds 1e-6", file=sys.stderr)
        return 1
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from accy.experiments.calibrate import calibrate

    log = None if args.quiet else (lambda line: print(line, flush=True))
    path = calibrate(args.device, force=args.force, quick=args.quick, repeats=args.repeats,
                     log=log)
    doc = json.loads(path.read_text())
    print(f"{doc['device']['key']}: {path}")
    for kind, f in doc["fits"]["kinds"].items():
        print(f"  {kind:<12} launch {f["launch"] / 1e6:9.3f} us  {f['per_byte']:8.3f} ps/byte  "
              f"{f['per_flop']:8.3f} ps/flop")
    for cls, ps in doc["fits"]["element"].items():
        print(f"  {cls:<12} fused {ps:9.3f} ps/element")
    return 0


def _cmd_passes(args: argparse.Namespace) -> int:
    from accy.passes.pipelines import PIPELINES
    from accy.passes.registry import all_passes

    by_stage = sorted(all_passes().values(), key=lambda c: c.stage.index)
    for cls in by_stage:
        print(f"{cls.name}  [{cls.stage.value}]  {cls.summary()}")
        for o in cls.options():
            allowed = f" [{o.range_text}]" if o.range_text else ""
            print(f"    {o.name}: {o.type_text}{allowed} = {o.default!r}  -- {o.doc}")
    print("\npipelines:")
    for p in PIPELINES.values():
        print(f"{p.name}  {p.description}\n    = {p.text or '(no passes yet)'}")
    return 0


def _cmd_pipeline(args: argparse.Namespace) -> int:
    from accy.passes.spec import parse_pipeline

    print(parse_pipeline(args.text).text(full=args.full))
    return 0


class InputFileError(AccyError):
    """A program file that cannot be read as UTF-8 text (the message names the file)."""


def _read_program(path: str) -> Program:
    from accy.ir.parser import parse_program

    if path.endswith(".onnx"):  # an ONNX model (needs the onnx extra)
        from accy.onnx import load

        return load(path)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except UnicodeDecodeError as e:
        raise InputFileError(f"{path}: not a UTF-8 text file (byte {e.start}: {e.reason}); "
                             f"expected a program in the IR text form") from None
    return parse_program(text)


def _cmd_prepare(args: argparse.Namespace) -> int:
    from accy.job import load_job, prepare
    from accy.passes.instrument import PrintIRAfterAll, Statistics, TimingReport
    from accy.passes.spec import parse_pipeline

    _load_rules(args.rules)
    if (args.file is None) == (args.load is None):
        raise InputFileError("give a program file or --load JOB (a job saved with --save), "
                             "not both")
    if args.target is not None and (args.device is not None or args.build or args.load):
        raise InputFileError("--target plans for a saved profile: not with --device, --build "
                             "or --load")
    timing, stats = TimingReport(), Statistics()
    instruments = [timing, stats] + ([PrintIRAfterAll()] if args.print_ir_after_all else [])
    with timing.measure():
        if args.load is not None:
            with timing.phase(f"loading the saved job {args.load}"):
                job = load_job(args.load)
        else:
            with timing.phase("reading the program"):
                program = _read_program(args.file)
            with timing.phase("parsing the pipeline (loads every pass module)"):
                pipeline = parse_pipeline(args.pipeline)
            job = prepare(program, pipeline, device=args.device, backend=args.backend,
                          target=_saved_target(args.target), until=args.until,
                          verify_each=not args.no_verify, instruments=instruments)
        if job.product.kernels is not None and (args.emit_source or args.build or args.save):
            with timing.phase("rendering kernel sources"):
                sources = [job.kernel_source(i) for i in range(job.kernel_count)]
        if args.build:
            built = _build(job, args.device, timing)
        if args.save:
            with timing.phase(f"saving the job to {args.save}"):
                job.save(args.save)
    for r in job.records:
        print(f"{r.stage.value:<9} {r.elapsed_ns / 1e6:8.3f} ms  passes {r.pass_runs}  "
              f"hits {r.analysis_hits}  misses {r.analysis_misses}  {r.fingerprint}")
    if args.build:
        print(built)
    if args.timing:
        print(timing.report())
    if args.statistics:
        print(stats.report())
    if job.product.kernels is not None and args.emit_source:
        for source in sources:
            print(source)
    return 0


def _saved_target(path: str | None) -> Any:
    """The target profile saved in ``path`` (``accy target --save``), or None."""
    from accy.target import TargetProfile

    return None if path is None else TargetProfile.load(path)


def _cmd_target(args: argparse.Namespace) -> int:
    from accy.backends.registry import open_device

    if args.load is not None:
        if args.device is not None or args.save is not None:
            raise InputFileError("--load shows a saved profile: not with --device or --save")
        profile = _saved_target(args.load)
    else:
        profile = open_device(args.device, args.backend)[1]
    print(profile.describe())
    if args.save is not None:
        profile.save(args.save)
        print(f"saved to {args.save} (accy prepare --target, TargetProfile.load)")
    return 0


def _build(job: Any, device: str | None, timing: Any) -> str:
    """Build the job's kernels on ``device`` (timed); a line saying what that took."""
    if job.product.kernels is None:
        raise InputFileError(f"--build needs the kernel stage; the job stops at "
                             f"{job.stage.value}")
    with timing.phase("loading pyopencl and selecting the device"):
        runtime = job.backend.device(device)
    before = runtime.stats.copy()
    with timing.phase("building kernels (OpenCL)"):
        job.build(runtime)
    s = runtime.stats.minus(before)
    cache = runtime.disk_cache()
    return (f"built on {runtime.info.key}: {s.compiled} programs compiled "
            f"({s.compiled_sources} kernel sources, {s.compile_ns / 1e6:.1f} ms), {s.loaded} "
            f"loaded from the disk cache ({s.loaded_sources} sources, {s.load_ns / 1e6:.1f} ms)"
            f"; disk cache: {cache.root if cache else 'off'}")


class RulesFileError(AccyError):
    """A ``--rules`` file that could not be imported (the message names it)."""


def _load_rules(path: str | None) -> None:
    """Import the Python file ``path`` by its path, so the ``rewrites.Theme`` rule sets it
    defines register (and pipeline text may name them); any failure is one line naming it."""
    if path is None:
        return
    import importlib.util
    import pathlib

    file = pathlib.Path(path)
    name = "accy_rules_" + "".join(c if c.isalnum() else "_" for c in file.stem)
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise RulesFileError(f"--rules {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - whatever the file raises is the user's mistake
        del sys.modules[name]
        detail = str(e.strerror if isinstance(e, OSError) and e.strerror else e)
        first = detail.splitlines()[0] if detail else ""  # one line, as every CLI error
        raise RulesFileError(f"--rules {path}: cannot import it: {type(e).__name__}: "
                             f"{first}") from None


def _cmd_explain(args: argparse.Namespace) -> int:
    from accy.explain import explain, format_runs

    _load_rules(args.rules)
    program = _read_program(args.file)
    runs = explain(program, args.pipeline, until=args.until)
    if args.json:
        print(json.dumps({"file": args.file, "pipeline": args.pipeline, "until": args.until,
                          "runs": [r.to_dict() for r in runs]}, indent=2))
    elif not runs:
        print(f"no rewrite pass ran ({args.pipeline}, until {args.until})")
    else:
        print(format_runs(runs))
    return 0


def _cmd_fuzz(args: argparse.Namespace) -> int:
    from accy.fuzz import run_campaign

    if args.minutes is None and args.rounds is None:
        print("accy fuzz: error: give --minutes, --rounds or both", file=sys.stderr)
        return 2
    summary = run_campaign(args.minutes, args.seed, args.out, max_nodes=args.max_nodes,
                           max_dim=args.max_dim, ops=args.ops, device=args.device,
                           device_type=args.device_type, pipeline=args.pipeline,
                           rounds_per_worker=args.rounds_per_worker,
                           round_timeout=args.round_timeout, rounds=args.rounds,
                           executor=args.executor, scheduler=args.scheduler,
                           force=args.force, resume=args.resume,
                           worker_memory=args.worker_memory)
    return 1 if summary.failures else 0


# Argument types: argparse turns their ArgumentTypeError into "accy CMD: error: argument
# --NAME: MESSAGE" with exit status 2, so bad values never reach the commands.

def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def op_names(text: str) -> list[str]:
    from accy.fuzz import op_choice

    names = [n.strip() for n in text.split(",") if n.strip()]
    try:
        op_choice(names)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return names


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_float(text: str, unit: str = "number") -> float:
    """A finite number > 0 (nan, inf and negatives would make a run never end or never
    start)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive {unit}, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive {unit} (not nan or inf), "
                                         f"got {text}")
    return value


def non_negative_gib(text: str) -> float:
    """A finite number of GiB, 0 (no limit) or more."""
    try:
        if float(text) == 0:
            return 0.0
    except ValueError:
        pass
    return positive_float(text, "number of GiB (0: no limit)")


def positive_seconds(text: str) -> float:
    return positive_float(text, "number of seconds")


def positive_minutes(text: str) -> float:
    return positive_float(text, "number of minutes")


def stage_name(text: str) -> str:
    from accy.ir.program import Stage

    try:
        return Stage.parse(text).value
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None




def _cmd_rules(args: argparse.Namespace) -> int:
    import rewrites

    _load_rules(args.rules)
    try:
        sets = rewrites.load(args.rulesets or None)
    except KeyError as e:
        print(f"accy rules: error: {e.args[0]}", file=sys.stderr)
        return 2
    for rs in sets:
        shown = [r for r in rs.rules if args.policy is None or r.policy == args.policy]
        if not shown:
            continue
        count = f"{len(shown)} of {len(rs.rules)}" if args.policy else str(len(rs.rules))
        print(f"{rs.name}  ({count} rules)  {rs.doc}")
        for r in shown:
            print(f"    {r.name:<32} {r.policy or 'untagged':<12} {r.doc}")
    print("\npolicies (saturate, canonicalize: fast-math=true, finite-math=true):")
    for tag, meaning in rewrites.POLICIES.items():
        print(f"    {tag:<12} {meaning}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from accy.fuzz import ROUND_EXAMPLES, ROUND_TIMEOUT, ROUNDS_PER_WORKER, default_worker_memory

    parser = argparse.ArgumentParser(
        prog="accy", description="accy: e-graph-based optimizing compiler research framework "
        "for tensor programs")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="prepare the seed's programs and run them on OpenCL")
    demo.add_argument("--device", help="OpenCL device selector (default: ACCY_DEVICE or pocl)")
    demo.add_argument("--size", type=positive_int, default=1 << 20,
                      help="elements of the large chain")
    demo.add_argument("--no-source", action="store_true", help="do not print OpenCL source")
    demo.set_defaults(run=_cmd_demo)
    cal = sub.add_parser(
        "calibrate", help="time micro-programs on an OpenCL device and fit the `measured` "
        "cost model (saturate{cost=measured}); cached per device and driver",
        description="Time micro-programs per op kind and size class on an OpenCL device and "
        "fit time = launch + a*bytes + b*flops per kind, for the `measured` cost model. The "
        "result is cached in $XDG_CACHE_HOME/accy/costs per device and driver version and "
        "reused unless --force.")
    cal.add_argument("--device", help="OpenCL device selector (default: ACCY_DEVICE or pocl)")
    cal.add_argument("--force", action="store_true", help="calibrate again even when cached")
    cal.add_argument("--quick", action="store_true",
                     help="tiny sizes: seconds, for tests; not for real use")
    cal.add_argument("--repeats", type=positive_int, default=9,
                     help="timed calls per micro-program; the median is kept (default: 9)")
    cal.add_argument("--quiet", action="store_true", help="no line per micro-program")
    cal.set_defaults(run=_cmd_calibrate)
    passes = sub.add_parser("passes", help="list registered passes, options and pipelines")
    passes.set_defaults(run=_cmd_passes)
    pipe = sub.add_parser("pipeline", help="parse pipeline text and print it canonically")
    pipe.add_argument("text")
    pipe.add_argument("--full", action="store_true", help="print every option, defaults too")
    pipe.set_defaults(run=_cmd_pipeline)
    prep = sub.add_parser("prepare", help="prepare a program written in the IR text form")
    prep.add_argument("file", nargs="?", help="the program (or --load a saved job instead)")
    prep.add_argument("--save", metavar="JOB", help="save the prepared job to this file, for "
                      "--load (or accy.load_job) in another process")
    prep.add_argument("--load", metavar="JOB", help="load a job saved with --save instead of "
                      "preparing a program")
    prep.add_argument("--build", action="store_true", help="build the kernels on --device "
                      "(ACCY_DEVICE or PoCL by default), filling the build caches")
    prep.add_argument("--pipeline", default="accy-default")
    prep.add_argument("--device", help="take the target profile from this OpenCL device")
    prep.add_argument("--target", metavar="PROFILE", help="plan for the target profile saved "
                      "in this JSON file (accy target --save), no device")
    prep.add_argument("--backend", help="a registered backend (default: opencl; "
                      "accy.backends.registry)")
    prep.add_argument("--until", type=stage_name, default="target",
                      help="last stage to run (contract, tensor, dispatch, memory, kernel, "
                      "target)")
    prep.add_argument("--print-ir-after-all", action="store_true")
    prep.add_argument("--timing", action="store_true", help="print the pass timing report")
    prep.add_argument("--statistics", action="store_true", help="print pass statistics")
    prep.add_argument("--no-verify", action="store_true", help="skip verification after passes")
    prep.add_argument("--emit-source", action="store_true", help="print the OpenCL kernels")
    prep.add_argument("--rules", metavar="FILE.py",
                      help="import this Python file first: the rewrites.Theme rule sets it "
                      "defines may be named in the pipeline")
    prep.set_defaults(run=_cmd_prepare)
    target = sub.add_parser(
        "target", help="print a device's target profile (what kernels are planned for), save "
        "it as JSON for planning elsewhere (accy prepare --target), or check a saved one")
    target.add_argument("--device", help="OpenCL device selector (default: ACCY_DEVICE or pocl)")
    target.add_argument("--backend", help="a registered backend (default: opencl)")
    target.add_argument("--save", metavar="PROFILE", help="write the profile to this JSON file")
    target.add_argument("--load", metavar="PROFILE", help="read a saved profile (checking every "
                        "field) and print it instead of a device's")
    target.set_defaults(run=_cmd_target)
    explain = sub.add_parser(
        "explain", help="show what each rewrite pass (constant-fold, canonicalize, saturate) "
        "did to a program: stop reason, e-graph growth, rules that fired, costs, result")
    explain.add_argument("file", help="program in the IR text form (as for prepare)")
    explain.add_argument("--pipeline", default="accy-default")
    explain.add_argument("--until", type=stage_name, default="tensor",
                         help="last stage to run (as for prepare)")
    explain.add_argument("--json", action="store_true", help="machine-readable output")
    explain.add_argument("--rules", metavar="FILE.py",
                         help="import this Python file first: the rewrites.Theme rule sets it "
                         "defines may be named in the pipeline")
    explain.set_defaults(run=_cmd_explain)
    fuzz = sub.add_parser("fuzz", help="check random programs pass by pass and on OpenCL; "
                          "write failing ones (shrunk) to a folder",
                          description="Check random programs pass by pass and end to end on "
                          "OpenCL for a given time or number of rounds; write failing ones "
                          "(shrunk) to a folder. "
                          "Rounds run in a worker process that is replaced every "
                          "--rounds-per-worker rounds; a round whose worker dies or that runs "
                          "past --round-timeout is recorded as a crash or timeout and the "
                          "campaign goes on with a fresh worker.")
    fuzz.add_argument("--minutes", type=positive_minutes, default=None,
                      help="how long to run (with --rounds: whichever ends first)")
    fuzz.add_argument("--rounds", type=positive_int, default=None,
                      help=f"how many rounds (of {ROUND_EXAMPLES} programs) to run")
    fuzz.add_argument("--seed", type=non_negative_int, default=0, help="seed of the campaign")
    fuzz.add_argument("--out", required=True, help="folder for failing programs and summary")
    fuzz.add_argument("--max-nodes", type=positive_int, default=8,
                      help="most ops per function")
    fuzz.add_argument("--max-dim", type=positive_int, default=4,
                      help="largest dimension of a tensor (default 4; larger ones give the "
                           "kernels' tiles, vectors and tails more to cover)")
    fuzz.add_argument("--ops", type=op_names, default=None,
                      help="draw programs from these ops only: op or op-kind names, "
                           "comma-separated (e.g. einsum,add,exp or unary,reduce)")
    fuzz.add_argument("--device", help="OpenCL device selector (default: ACCY_DEVICE or pocl)")
    fuzz.add_argument("--device-type", choices=DEVICE_TYPES, default=None,
                      help="build the kernels for this type of device instead of the device's "
                           "own (gpu on PoCL: the GPU kernels' tiles, prefetches and unrolled "
                           "rows, checked on the CPU)")
    fuzz.add_argument("--pipeline", default="accy-default", help="pipeline under test")
    fuzz.add_argument("--rounds-per-worker", type=positive_int, default=ROUNDS_PER_WORKER,
                      help=f"rounds (of {ROUND_EXAMPLES} programs) a worker process runs "
                      "before it is replaced; keeps the OpenCL driver's per-process state "
                      f"bounded (default: {ROUNDS_PER_WORKER})")
    fuzz.add_argument("--round-timeout", type=positive_seconds, default=ROUND_TIMEOUT,
                      help="seconds a round may run before its worker is killed and the round "
                      f"recorded as a timeout (default: {ROUND_TIMEOUT:g})")
    fuzz.add_argument("--worker-memory", type=non_negative_gib, default=None,
                      metavar="GIB",
                      help="GiB of address space a local worker may hold: a program past it "
                      "fails there (MemoryError, recorded with the program) instead of the "
                      "OOM killer ending a process; 0: no limit (default: half the memory, "
                      f"{default_worker_memory():.1f})")
    fuzz.add_argument("--executor", default="local", choices=("local", "dask"),
                      help="where rounds run: local worker processes or a Dask cluster")
    fuzz.add_argument("--scheduler", help="Dask scheduler address (default: a local cluster "
                      "on 127.0.0.1)")
    again = fuzz.add_mutually_exclusive_group()
    again.add_argument("--force", action="store_true", help="start a new campaign in a used "
                       "--out (records are numbered after the existing ones)")
    again.add_argument("--resume", action="store_true", help="continue the campaign in --out "
                       "(same --seed and --pipeline)")
    fuzz.set_defaults(run=_cmd_fuzz)
    rules = sub.add_parser("rules", help="list rewrite rule sets and rules with policy tags")
    rules.add_argument("rulesets", nargs="*", help="rule sets to list (default: all)")
    rules.add_argument("--rules", metavar="FILE.py",
                       help="import this Python file first: its rewrites.Theme rule sets "
                       "are listed too")
    rules.add_argument("--policy", choices=["exact", "stable", "finite-math", "fast-math"],
                       help="only rules with this floating-point policy tag")
    rules.set_defaults(run=_cmd_rules)
    from accy.experiments.cli import add_commands

    add_commands(sub)  # experiment, report
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Mistakes in the input (AccyError: a bad program, pipeline, device;
    OSError: a file that cannot be read or written; UnicodeDecodeError: a file that is not
    text) end with one "accy CMD: error: ..." line and status 2; anything else is a bug in
    accy and keeps its traceback."""
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (AccyError, OSError, UnicodeDecodeError) as e:
        print(f"accy {args.command}: error: {_describe_error(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"accy {args.command}: interrupted", file=sys.stderr)
        return 130


def _describe_error(e: BaseException) -> str:
    if isinstance(e, UnicodeDecodeError):
        return f"a file is not UTF-8 text ({e.reason} at byte {e.start})"
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        return f"{e.filename}: {e.strerror}"  # not "[Errno 2] ..."
    return str(e) or type(e).__name__


if __name__ == "__main__":
    sys.exit(main())
