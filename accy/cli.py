"""The ``accy`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from accy.errors import AccyError


def _cmd_demo(args: argparse.Namespace) -> int:
    from accy.demo import run_demo

    worst = run_demo(device=args.device, size=args.size, show_source=not args.no_source)
    if worst > 1e-6:
        print(f"FAILED: error {worst:.3g} exceeds 1e-6", file=sys.stderr)
        return 1
    return 0


def _cmd_passes(args: argparse.Namespace) -> int:
    from accy.passes.pipelines import PIPELINES
    from accy.passes.registry import all_passes

    by_stage = sorted(all_passes().values(), key=lambda c: c.stage.index)
    for cls in by_stage:
        print(f"{cls.name}  [{cls.stage.value}]  {cls.summary()}")
        for o in cls.options():
            print(f"    {o.name}: {o.type_text} = {o.default!r}  -- {o.doc}")
    print("\npipelines:")
    for p in PIPELINES.values():
        print(f"{p.name}  {p.description}\n    = {p.text or '(no passes yet)'}")
    return 0


def _cmd_pipeline(args: argparse.Namespace) -> int:
    from accy.passes.spec import parse_pipeline

    print(parse_pipeline(args.text).text(full=args.full))
    return 0


def _cmd_prepare(args: argparse.Namespace) -> int:
    from accy.ir.parser import parse_program
    from accy.job import prepare
    from accy.passes.instrument import PrintIRAfterAll, Statistics, TimingReport

    with open(args.file) as fh:
        program = parse_program(fh.read())
    timing, stats = TimingReport(), Statistics()
    instruments = [timing, stats] + ([PrintIRAfterAll()] if args.print_ir_after_all else [])
    job = prepare(program, args.pipeline, device=args.device, until=args.until,
                  verify_each=not args.no_verify, instruments=instruments)
    for r in job.records:
        print(f"{r.stage.value:<9} {r.elapsed_ns / 1e6:8.3f} ms  passes {r.pass_runs}  "
              f"hits {r.analysis_hits}  misses {r.analysis_misses}  {r.fingerprint}")
    if args.timing:
        print(timing.report())
    if args.statistics:
        print(stats.report())
    if job.product.kernels is not None and args.emit_source:
        for i in range(job.kernel_count):
            print(job.kernel_source(i))
    return 0


def _cmd_fuzz(args: argparse.Namespace) -> int:
    from accy.fuzz import run_campaign

    summary = run_campaign(args.minutes, args.seed, args.out, max_nodes=args.max_nodes,
                           device=args.device, pipeline=args.pipeline)
    return 1 if summary.failures else 0


def _cmd_rules(args: argparse.Namespace) -> int:
    import rewrites

    try:
        sets = rewrites.load(args.rulesets or None)
    except KeyError as e:
        print(f"accy rules: error: {e.args[0]}", file=sys.stderr)
        return 2
    for rs in sets:
        shown = [r for r in rs.rules
                 if args.policy is None or rewrites.rule_info(r.name).policy == args.policy]
        if not shown:
            continue
        count = f"{len(shown)} of {len(rs.rules)}" if args.policy else str(len(rs.rules))
        print(f"{rs.name}  ({count} rules)  {rs.doc}")
        for r in shown:
            info = rewrites.rule_info(r.name)
            print(f"    {r.name:<32} {info.policy:<12} {info.doc}")
    print("\npolicies (saturate, canonicalize: fast-math=true, finite-math=true):")
    for tag, meaning in rewrites.POLICIES.items():
        print(f"    {tag:<12} {meaning}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="accy", description="accy: e-graph-based optimizing compiler research framework "
        "for tensor programs")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="prepare the seed's programs and run them on OpenCL")
    demo.add_argument("--device", help="OpenCL device selector (default: ACCY_DEVICE or pocl)")
    demo.add_argument("--size", type=int, default=1 << 20, help="elements of the large chain")
    demo.add_argument("--no-source", action="store_true", help="do not print OpenCL source")
    demo.set_defaults(run=_cmd_demo)
    passes = sub.add_parser("passes", help="list registered passes, options and pipelines")
    passes.set_defaults(run=_cmd_passes)
    pipe = sub.add_parser("pipeline", help="parse pipeline text and print it canonically")
    pipe.add_argument("text")
    pipe.add_argument("--full", action="store_true", help="print every option, defaults too")
    pipe.set_defaults(run=_cmd_pipeline)
    prep = sub.add_parser("prepare", help="prepare a program written in the IR text form")
    prep.add_argument("file")
    prep.add_argument("--pipeline", default="accy-default")
    prep.add_argument("--device", help="take the target profile from this OpenCL device")
    prep.add_argument("--until", default="target", help="last stage to run")
    prep.add_argument("--print-ir-after-all", action="store_true")
    prep.add_argument("--timing", action="store_true", help="print the pass timing report")
    prep.add_argument("--statistics", action="store_true", help="print pass statistics")
    prep.add_argument("--no-verify", action="store_true", help="skip verification after passes")
    prep.add_argument("--emit-source", action="store_true", help="print the OpenCL kernels")
    prep.set_defaults(run=_cmd_prepare)
    fuzz = sub.add_parser("fuzz", help="check random programs pass by pass and on OpenCL; "
                          "write failing ones (shrunk) to a folder")
    fuzz.add_argument("--minutes", type=float, required=True, help="how long to run")
    fuzz.add_argument("--seed", type=int, default=0, help="seed of the campaign")
    fuzz.add_argument("--out", required=True, help="folder for failing programs and summary")
    fuzz.add_argument("--max-nodes", type=int, default=8, help="most ops per function")
    fuzz.add_argument("--device", help="OpenCL device selector (default: ACCY_DEVICE or pocl)")
    fuzz.add_argument("--pipeline", default="accy-default", help="pipeline under test")
    fuzz.set_defaults(run=_cmd_fuzz)
    rules = sub.add_parser("rules", help="list rewrite rule sets and rules with policy tags")
    rules.add_argument("rulesets", nargs="*", help="rule sets to list (default: all)")
    rules.add_argument("--policy", choices=["exact", "stable", "finite-math", "fast-math"],
                       help="only rules with this floating-point policy tag")
    rules.set_defaults(run=_cmd_rules)
    from accy.experiments.cli import add_commands

    add_commands(sub)  # experiment, report
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except AccyError as e:
        print(f"accy {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
