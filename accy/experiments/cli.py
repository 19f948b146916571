"""``accy experiment NAME ...`` and ``accy report RESULTS... --out DIR``.

    accy experiment ablation --suite ci                  # table + figure in results/...
    accy experiment contraction --suite paper --workers 2
    accy experiment kernels --suite paper --device nvidia
    accy experiment benefit --suite ci --seeds 0,1
    accy experiment paper                                # regenerate papers/
    accy experiment models --models vgg19,bert --out results/models
    accy experiment ablation --executor dask --scheduler tcp://host:8786
    accy report results/experiments/ci/ablation.json --out report/

Each experiment writes ``<experiment>.json`` and ``<experiment>.csv`` into ``--out`` (default
``results/experiments/<suite>``) and, unless ``--no-report``, ``<experiment>.md`` and its
figures made from the written file. The exit status is 1 when any task failed, crashed or
timed out (``--timeout S``); each is in the results' ``failed`` list with its status,
parameters and error.

Results are never replaced silently: when ``--out`` already holds this experiment's JSON, CSV
or task journal, the command refuses (exit 2, naming the file) unless ``--force`` (start
afresh, replacing them) or ``--resume`` (continue that run: tasks its journal,
``<experiment>.journal.jsonl``, holds as finished are not run again). Every task is journaled
as it finishes, so a killed sweep loses no finished task. ``accy experiment paper`` rewrites
``papers/`` in place (that is what it is for; the files are under version control).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from accy.cli import non_negative_int, positive_int, positive_seconds

EXPERIMENTS = ("ablation", "contraction", "kernels", "benefit", "costs", "paper", "models")


def _csv(text: str | None) -> tuple[str, ...] | None:
    return tuple(x for x in text.split(",") if x) if text else None


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def _int_list(at_least: int, what: str) -> Any:
    """An argparse type: comma-separated integers >= ``at_least`` (seeds, operand counts),
    checked when the command line is read rather than when the sweep starts."""

    def parse(text: str) -> str:
        try:
            values = _ints(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be comma-separated {what}, got {text!r}") from None
        if not values or min(values) < at_least:
            raise argparse.ArgumentTypeError(
                f"must be comma-separated {what}, each >= {at_least}, got {text!r}")
        return text  # options_from and run_experiment split it again

    parse.__name__ = what  # argparse names the type in some messages
    return parse


def _names(what: str, valid: Any = None) -> Any:
    """An argparse type: a comma-separated list of at least one name, each among ``valid()``
    when given (looked up only when the option is used: the suite imports accy's builder)."""

    def parse(text: str) -> str:
        names = _csv(text)
        if not names:
            raise argparse.ArgumentTypeError(f"must be comma-separated {what}, got {text!r}")
        known = valid() if valid is not None else None
        unknown = [n for n in names if known is not None and n not in known]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(unknown)}; valid: "
                                             f"{', '.join(known)}")
        return text

    parse.__name__ = what
    return parse


def _suite_programs() -> tuple[str, ...]:
    from accy.experiments.suite import SUITE

    return tuple(SUITE)


def _network_families() -> tuple[str, ...]:
    from accy.experiments.networks import FAMILIES

    return tuple(FAMILIES)


def _onnx_models() -> tuple[str, ...]:
    from accy.experiments.onnx_models import MODELS

    return tuple(MODELS)


def _batch(text: str) -> str:
    if text != "paper" and not (text.isdigit() and int(text) >= 1):
        raise argparse.ArgumentTypeError(f"must be a positive integer or 'paper', got {text!r}")
    return text


def _saturate_rulesets() -> tuple[str, ...]:
    from accy.experiments.ablation import saturate_rulesets

    return saturate_rulesets()


def add_commands(sub: Any) -> None:
    """Register ``experiment`` and ``report`` on the ``accy`` command's subparsers."""
    exp = sub.add_parser("experiment", help="run an experiment sweep: ablation, contraction, "
                         "kernels, benefit, costs, or paper (regenerate papers/)")
    exp.add_argument("name", choices=EXPERIMENTS)
    exp.add_argument("--suite", default=None, choices=("ci", "paper", "full"),
                     help="program sizes (default: ci; paper for `paper`)")
    exp.add_argument("--programs", type=_names("suite programs", _suite_programs),
                     help="comma-separated suite programs (default: all)")
    exp.add_argument("--seeds", type=_int_list(0, "seeds"), default="0",
                     help="comma-separated seeds (default: 0)")
    exp.add_argument("--out", help="output folder (default: results/experiments/SUITE; "
                     "papers for `paper`)")
    exp.add_argument("--device", help="OpenCL device selector (default: ACCY_DEVICE or pocl)")
    exp.add_argument("--repeats", type=positive_int, default=None,
                     help="timed calls per measurement (default: 5; 20 for `paper`)")
    exp.add_argument("--no-run", action="store_true", help="compile only: no kernel timing")
    exp.add_argument("--executor", default="local", choices=("local", "dask"))
    exp.add_argument("--scheduler", help="Dask scheduler address (default: a local cluster)")
    exp.add_argument("--dask-host", default=None, metavar="HOST",
                     help="address the local Dask cluster (scheduler, workers, dashboard) "
                     "listens on (default: 127.0.0.1, this machine only)")
    again = exp.add_mutually_exclusive_group()
    again.add_argument("--force", action="store_true",
                       help="replace this experiment's earlier results in --out")
    again.add_argument("--resume", action="store_true",
                       help="continue the run whose results and journal are in --out, "
                       "without redoing its finished tasks")
    exp.add_argument("--workers", type=non_negative_int, default=None,
                     help="local processes (0: this process) or local Dask workers "
                     "(default: CPU count; 1 for `paper`)")
    exp.add_argument("--retries", type=non_negative_int, default=2,
                     help="retries of a task that raised or whose worker process died "
                     "(default: 2)")
    exp.add_argument("--timeout", type=positive_seconds, default=None, metavar="S",
                     help="kill a task running longer than S seconds and report it as "
                     "timeout (default: no limit; needs --workers >= 1)")
    exp.add_argument("--no-report", action="store_true", help="write results only")
    exp.add_argument("--render-only", action="store_true",
                     help="paper: rewrite papers/ from papers/data without running")
    exp.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help="progress bars (default: when stderr is a terminal)")
    abl = exp.add_argument_group("ablation")
    abl.add_argument("--rulesets", type=_names("rule sets", _saturate_rulesets),
                     help="rule sets for the -R and only:R configurations")
    abl.add_argument("--rules", type=_names("rules"),
                     help="limit the per-rule sweep to these rules")
    abl.add_argument("--no-per-rule", action="store_true", help="skip the per-rule sweep")
    abl.add_argument("--policy", default="default",
                     choices=("default", "finite-math", "fast-math"),
                     help="floating-point policy of the rules")
    cst = exp.add_argument_group("costs")
    cst.add_argument("--calibration", metavar="FILE",
                     help="measured cost model's calibration (default: the device's, made "
                     "first when missing; `accy calibrate`)")
    con = exp.add_argument_group("contraction")
    con.add_argument("--families", type=_names("network families", _network_families),
                     help="network families (default: all)")
    con.add_argument("--sizes", type=_int_list(1, "operand counts"),
                     help="operand counts (default: by suite)")
    con.add_argument("--instances", type=positive_int, help="instances per family and size")
    mod = exp.add_argument_group("models")
    mod.add_argument("--models", type=_names("models", _onnx_models),
                     help="comma-separated models (default: all seven)")
    mod.add_argument("--batch", type=_batch, default="1",
                     help="batch size, or 'paper' for each model's published batch (default: 1)")
    mod.add_argument("--image", type=positive_int, default=None,
                     help="image side of the convolutional models (default: published size)")
    mod.add_argument("--slim", type=positive_int, default=1,
                     help="divide every channel count and width by this (default: 1)")
    mod.add_argument("--depth", type=positive_int, default=None,
                     help="cap every run of repeated blocks at this (default: none)")
    mod.add_argument("--saturate", choices=("both", "on", "off"), default="both",
                     help="prepare with saturate, without it, or both (default: both)")
    mod.add_argument("--reference", metavar="DIR",
                     help="load onnxruntime's outputs from DIR, or record them there (for a "
                     "machine without onnxruntime)")
    mod.add_argument("--reference-only", action="store_true",
                     help="only record onnxruntime's outputs into --reference")
    exp.set_defaults(run=run_experiment_command)
    rep = sub.add_parser("report", help="Markdown tables and figures from result files")
    rep.add_argument("results", nargs="+", help="result JSON files")
    rep.add_argument("--out", required=True, help="folder for the report")
    rep.set_defaults(run=report_command)


def options_from(args: argparse.Namespace, suite: str) -> Any:
    from accy.experiments.runner import SweepOptions

    return SweepOptions(suite=suite, programs=_csv(args.programs), seeds=_ints(args.seeds),
                        device=args.device,
                        repeats=args.repeats or (20 if args.name == "paper" else 5),
                        run=not args.no_run,
                        executor=args.executor, workers=args.workers, retries=args.retries,
                        timeout=args.timeout, scheduler=args.scheduler,
                        show_progress=args.progress,
                        **({"dask_host": args.dask_host} if args.dask_host else {}))


def run_experiment(name: str, args: argparse.Namespace, options: Any) -> dict[str, Any]:
    """Run one experiment by name with the CLI's options."""
    if name == "ablation":
        from accy.experiments import ablation

        return ablation.run(options, rulesets=_csv(args.rulesets),
                            per_rule=not args.no_per_rule, rules=_csv(args.rules),
                            policy=args.policy)
    if name == "contraction":
        from accy.experiments import contraction
        from accy.experiments.networks import FAMILIES

        return contraction.run(options, families=_csv(args.families) or FAMILIES,
                               sizes=_ints(args.sizes) if args.sizes else None,
                               repeats=args.instances)
    if name == "kernels":
        from accy.experiments import kernels

        return kernels.run(options)
    if name == "costs":
        from accy.experiments import costs

        return costs.run(options, calibration=args.calibration)
    from accy.experiments import benefit

    return benefit.run(options)


def run_experiment_command(args: argparse.Namespace) -> int:
    from accy.experiments.records import write_results
    from accy.experiments.report import tables, write_report

    if args.timeout is not None and args.workers == 0 and args.executor == "local":
        print("accy experiment: error: --timeout needs worker processes (--workers >= 1): "
              "a task running in this process cannot be killed", file=sys.stderr)
        return 2
    if args.name == "models":
        return models_command(args)
    if args.name == "paper":
        from accy.experiments.paper import regenerate, render

        if args.render_only:
            render(Path(args.out or "papers"))
            return 0

        if args.workers is None:
            args.workers = 1
        failed = regenerate(Path(args.out or "papers"), args.suite or "paper",
                            options_from(args, args.suite or "paper"), args)
        return 1 if failed else 0
    from accy.experiments.journal import journal_path
    from accy.experiments.records import check_fresh

    suite = args.suite or "ci"
    out = Path(args.out or f"results/experiments/{suite}")
    journal = journal_path(out, args.name)
    if args.force:
        journal.unlink(missing_ok=True)  # a fresh run: nothing of the old one is reused
    elif not args.resume:  # refuse before the sweep runs, not after it
        check_fresh([out / f"{args.name}.json", out / f"{args.name}.csv", journal])
    options = options_from(args, suite)
    options.journal = str(journal)
    result = run_experiment(args.name, args, options)
    paths = list(write_results(result, out))
    if not args.no_report:
        paths += write_report(paths[0], out)
    print(tables(result))
    for f in result["failed"]:
        print(f"{f['status'].upper()} {f['key']} after {f['attempts']} attempt(s): "
              f"{f['error'].strip().splitlines()[-1]}", file=sys.stderr)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 1 if result["failed"] else 0


def models_command(args: argparse.Namespace) -> int:
    """``accy experiment models``: writes ``models.json`` and ``models.md`` into ``--out``
    (default ``results/experiments/models``); exit 1 when an output is out of tolerance."""
    from accy.experiments import models
    from accy.experiments.records import atomic_write, check_fresh, write_json

    if args.reference_only and not args.reference:
        print("accy experiment: error: --reference-only needs --reference DIR", file=sys.stderr)
        return 2
    out = Path(args.out or "results/experiments/models")
    if not args.force and not args.reference_only:
        check_fresh([out / "models.json"])
    result = models.run(_csv(args.models) or models.onnx_models.MODELS, batch=args.batch
                        if args.batch == "paper" else int(args.batch), image=args.image,
                        slim=args.slim, depth=args.depth, seed=_ints(args.seeds)[0],
                        device=args.device,
                        saturate=args.saturate, repeats=args.repeats or 3,
                        reference_dir=args.reference, reference_only=args.reference_only,
                        run_device=not args.no_run, log=lambda text: print(text, flush=True))
    if args.reference_only:
        print(f"recorded onnxruntime's outputs in {args.reference}")
        return 0
    text = models.table(result)
    print(text)
    write_json(result, out / "models.json")
    print(f"wrote {atomic_write(out / 'models.md', text + chr(10))}")
    bad = [r["model"] for r in result["rows"] for k in ("saturate_on", "saturate_off")
           if r.get(k, {}).get("within_tolerance") is False]
    for name in bad:
        print(f"OUT OF TOLERANCE: {name}", file=sys.stderr)
    return 1 if bad else 0


def report_command(args: argparse.Namespace) -> int:
    from accy.experiments.records import REPORT_KEYS, read_results
    from accy.experiments.report import write_report

    # every file checked before anything is written
    results = [read_results(path, REPORT_KEYS) for path in args.results]
    for result in results:
        for p in write_report(result, args.out):
            print(f"wrote {p}")
    return 0
