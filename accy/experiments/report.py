"""Reports from result files: Markdown tables and matplotlib figures (never while measuring).

``write_report(result, out_dir)`` reads a result document (:mod:`accy.experiments.runner`)
and writes ``<experiment>.md`` (a provenance line and tables) and ``<experiment>*.png``
figures; ``accy report RESULTS... --out DIR`` does this for each file. Figures need
matplotlib (the ``viz`` extra); without it the Markdown is still written and the figures are
listed as skipped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from accy.experiments.records import atomic_open, atomic_write, read_results

__all__ = ["markdown", "provenance_line", "tables", "write_report"]


def _fmt(x: Any, digits: int = 2) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "**NO**"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if x == 0 or 1e-3 <= abs(x) < 1e5:
            return f"{x:.{digits}f}"
        return f"{x:.{digits}e}"
    return str(x)


def _ratio(x: float | None) -> str:
    if x is None:
        return "–"
    text = f"{x:.2f}" if x < 1000 else f"{x:.1e}"
    return text if text == "1.00" else f"**{text}**"


def _time_ratio(entry: dict[str, Any]) -> str:
    """A paired kernel-time ratio with the quartiles of its call-by-call ratios, or "="."""
    if entry.get("same_kernels"):
        return "="
    q = entry.get("kernel_ms_ratio_quartiles")
    text = _fmt(entry.get("kernel_ms_ratio"))
    return f"{text} [{q[0]:.2f}, {q[1]:.2f}]" if q else text


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def provenance_line(result: dict[str, Any]) -> str:
    """One paragraph: suite, seeds, executor, machine, device, versions, commit, time."""
    p = result["provenance"]
    dev = p.get("device") or {}
    device = (f"{dev.get('name')} ({dev.get('platform')}, driver {dev.get('driver')})"
              if dev and "name" in dev else dev.get("error", "none") if dev else "none")
    m = p["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in p["versions"].items() if v)
    ex = result.get("executor", {})
    workers = ex.get("workers")
    return (f"Suite `{result['suite']}`, seeds {result['seeds']}, executor "
            f"{ex.get('executor')} ({workers} worker{'' if workers == 1 else 's'}). Machine: "
            f"{m.get('cpu') or m['processor'] or '?'} ({m['machine']}, {m['cpu_count']} CPUs, "
            f"load {m.get('load')}), {m['system']}. Device: {device}. "
            f"Versions: {versions}. Commit `{p['git_commit']}`, {p['timestamp']}."
            + (f" Failed tasks: {len(result['failed'])}." if result.get("failed") else ""))


# ---- ablation --------------------------------------------------------------------------------


def _ablation_tables(result: dict[str, Any]) -> list[str]:
    s = result["summary"]["programs"]
    sets = [c["target"] for c in next(iter(s.values()), {}).values()
            if c["kind"] == "without-ruleset"]
    out = ["**Extracted cost without a rule set**, relative to all rules (flops-bytes cost "
           "model; bold: differs). `none`: no rewrite rules at all.\n",
           _table(["program", "all: cost", "all: kernels", "none", *(f"-{r}" for r in sets)],
                  [[p, _fmt(c["all"]["cost"]), c["all"]["kernels"],
                    _ratio(c.get("none", {}).get("cost_ratio")),
                    *(_ratio(c.get(f"-{r}", {}).get("cost_ratio")) for r in sets)]
                   for p, c in s.items() if "all" in c]),
           "\n**Extracted cost with one rule set only**, relative to all rules.\n",
           _table(["program", *(f"only:{r}" for r in sets)],
                  [[p, *(_ratio(c.get(f"only:{r}", {}).get("cost_ratio")) for r in sets)]
                   for p, c in s.items() if "all" in c]),
           "\n**Kernels and measured kernel time** (best of the timed calls, mean over seeds; "
           "none/all: median [quartiles] of the call-by-call ratios, timed interleaved; =: the "
           "kernels are identical to those of all rules).\n",
           _table(["program", "kernels all/none", "bytes moved all/none", "kernel ms all",
                   "kernel ms none", "none/all", "stop reason", "e-nodes", "saturation s",
                   "correct"],
                  [[p, f"{c['all']['kernels']}/{c.get('none', {}).get('kernels', '–')}",
                    f"{_fmt(c['all']['bytes_moved'])}/"
                    f"{_fmt(c.get('none', {}).get('bytes_moved'))}",
                    _fmt(c["all"]["kernel_ms"], 3), _fmt(c.get("none", {}).get("kernel_ms"), 3),
                    _time_ratio(c.get("none", {})), c["all"]["stop_reason"],
                    _fmt(c["all"]["e_nodes"]), _fmt(c["all"]["saturation_s"], 3),
                    _fmt(all(x["correct"] for x in c.values()))]
                   for p, c in s.items() if "all" in c])]
    rule_rows = []
    for p, c in s.items():
        base = c.get("all")
        for e in c.values():
            if e["kind"] != "without-rule" or base is None:
                continue
            if e["effect"] == "matters":
                rule_rows.append([p, f"`{e['target']}`", _ratio(e["cost_ratio"]),
                                  f"{base['kernels']} → {e['kernels']}",
                                  _ratio(e["bytes_ratio"]), _time_ratio(e)])
    fired = {p: [e["target"] for e in c.values() if e["kind"] == "without-rule"]
             for p, c in s.items()}
    if any(fired.values()):
        out += ["\n**Rules that matter**: removing the rule alone changes the extracted cost, "
                "the kernel count or the bytes moved (kernel time: without / with, the median "
                "[and quartiles] of the call-by-call ratios, the two timed interleaved in one "
                "task; =: identical kernels).\n",
                _table(["program", "rule", "cost", "kernels", "bytes", "kernel time"],
                       rule_rows) if rule_rows else "(none)"]
        quiet = [[p, len(v), ", ".join(f"`{r}`" for r in sorted(v) if s[p][f"-rule:{r}"]
                                       ["effect"] != "matters") or "–"]
                 for p, v in fired.items()]
        out += ["\n**Rules that fired but matter alone for nothing** (other rules reach the "
                "same program, or extraction keeps the original).\n",
                _table(["program", "rules fired", "do not matter alone"], quiet)]
    noise = result["summary"].get("noise", {})
    if noise.get("configurations"):
        out.append(f"\nNoise floor: {noise['configurations']} configurations produced kernels "
                   f"identical to all rules'; timed in separate tasks, they differed from all "
                   f"rules' time by a factor of {_fmt(noise['median_ratio'])} (median) and up "
                   f"to {_fmt(noise['max_ratio'])} -- what an unpaired comparison would mistake "
                   f"for an effect (the kernel-time ratios above are paired).")
    matters = result["summary"].get("matters", {})
    if matters:
        out += ["\n**Which rules (sets) matter for which programs**\n",
                _table(["rule or rule set", "programs"],
                       [[f"`{k}`", ", ".join(v)] for k, v in matters.items()])]
    return out


def _save(fig: Any, plt: Any, path: Path) -> Path:
    """Lay ``fig`` out, write it to ``path`` (no timestamp metadata: reproducible bytes),
    close it."""
    fig.tight_layout()
    with atomic_open(path, "wb") as fh:  # never half a PNG beside its results
        fig.savefig(fh, format="png", dpi=80, metadata={"Software": None})
    plt.close(fig)
    return path


def _heatmap(ax: Any, values: list[list[float | str | None]], rows: list[str], cols: list[str],
             title: str) -> None:
    """log2 of ratios, red above 1, blue below; "=" cells (identical kernels) count as 1."""
    import numpy as np

    data = np.array([[0.0 if v == "=" else math.log2(v) if isinstance(v, float) and v > 0
                      else np.nan for v in r] for r in values])
    ax.imshow(data, cmap="RdBu_r", vmin=-2, vmax=2, aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    ax.set_title(title, fontsize=8)
    for i, r in enumerate(values):
        for j, v in enumerate(r):
            if v is not None:
                text = v if isinstance(v, str) else f"{v:.2f}" if v < 100 else f"{v:.0e}"
                ax.text(j, i, text, ha="center", va="center", fontsize=5.5)


def _cell(entry: dict[str, Any], key: str) -> float | str | None:
    """A heatmap cell: the ratio, or "=" for kernel time when the kernels are identical."""
    if key == "kernel_ms_ratio" and entry.get("same_kernels"):
        return "="
    return entry.get(key)


def _ablation_figures(result: dict[str, Any], out: Path, plt: Any, name: str) -> list[Path]:
    s = result["summary"]["programs"]
    programs = [p for p, c in s.items() if "all" in c]
    configs = [k for k, e in next(iter(s.values())).items()
               if e["kind"] in ("none", "without-ruleset", "only-ruleset")]
    fig, axes = plt.subplots(1, 2, figsize=(9, 1.2 + 0.3 * len(programs) + 1.2))
    for ax, key, title in ((axes[0], "cost_ratio", "extracted cost / all rules"),
                           (axes[1], "kernel_ms_ratio",
                            "kernel time / all rules (=: identical kernels)")):
        _heatmap(ax, [[_cell(s[p].get(c, {}), key) for c in configs] for p in programs],
                 programs, configs, title)
    paths = [_save(fig, plt, out / f"{name}.png")]
    bars = [(f"{p}: {e['target']}", e["cost_ratio"] or 1.0) for p in programs
            for e in s[p].values() if e["kind"] == "without-rule" and e["effect"] == "matters"]
    if bars:
        fig, ax = plt.subplots(figsize=(6, 0.25 * len(bars) + 1))
        ax.barh([b[0] for b in bars], [b[1] for b in bars], color="tab:red")
        ax.axvline(1.0, color="black", lw=0.8)
        ax.invert_yaxis()
        ax.set_xlabel("extracted cost without the rule / with all rules", fontsize=8)
        ax.tick_params(labelsize=7)
        paths.append(_save(fig, plt, out / f"{name}_rules.png"))
    return paths


# ---- contraction -----------------------------------------------------------------------------


def _contraction_tables(result: dict[str, Any]) -> list[str]:
    s = result["summary"]
    methods = list(s["methods"])
    out = ["**Path cost relative to the best path any method found** (FLOPs in accy's units; "
           "geometric mean over the instances the method solved) **and search time**.\n",
           _table(["method", "solved", "geomean cost / best", "worst", "found the best",
                   "median ms", "max ms"],
                  [[f"`{m}`", e["solved"], _fmt(e["geomean_ratio"], 3),
                    _fmt(e["worst_ratio"], 3),
                    f"{100 * e['best_share']:.0f}%" if e["best_share"] is not None else "–",
                    _fmt(e["median_ms"], 2), _fmt(e["max_ms"], 1)]
                   for m, e in s["methods"].items()])]
    rows = []
    for g in s["groups"].values():
        best = min(g["log10"].values()) if g["log10"] else None
        rows.append([g["family"], g["n"], g["count"], *(
            "–" if g["solved"].get(m, 0) < g["count"] else
            f"{g['log10'][m] - best:+.2f} / {g['ms'][m]:.1f}" for m in methods)])
    out += ["\n**Per family and operand count**: mean log10 cost above the best method's mean, "
            "and mean search ms (–: not solved on every instance: skipped, state limit).\n",
            _table(["family", "n", "instances", *(f"`{m}`" for m in methods)], rows)]
    return out


def _contraction_figures(result: dict[str, Any], out: Path, plt: Any, name: str) -> list[Path]:
    s = result["summary"]
    methods = [m for m, e in s["methods"].items() if e["solved"]]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    ax = axes[0]
    for m in methods:
        e = s["methods"][m]
        ax.scatter(e["median_ms"], e["geomean_ratio"], label=m, s=18)
    ax.set_xscale("log")
    ax.set_xlabel("median search ms", fontsize=8)
    ax.set_ylabel("geomean path cost / best", fontsize=8)
    ax.legend(fontsize=6)
    ax = axes[1]
    ns = sorted({g["n"] for g in s["groups"].values() if g["family"] != "suite"})
    for m in methods:
        ys = []
        for n in ns:
            vals = [g["ms"][m] for g in s["groups"].values()
                    if g["n"] == n and g["family"] != "suite" and m in g["ms"]]
            ys.append(sum(vals) / len(vals) if vals else float("nan"))
        ax.plot(ns, ys, marker="o", ms=3, label=m)
    ax.set_yscale("log")
    ax.set_xlabel("operands", fontsize=8)
    ax.set_ylabel("mean search ms", fontsize=8)
    for a in axes:
        a.tick_params(labelsize=7)
    return [_save(fig, plt, out / f"{name}.png")]


# ---- kernels and benefit ---------------------------------------------------------------------


def _kernels_tables(result: dict[str, Any]) -> list[str]:
    s = result["summary"]["programs"]
    return ["**accy against numpy** (kernel: OpenCL profiling events; call: wall time with "
            "transfers; numpy: the hand-written baseline on the host; torch when importable).\n",
            _table(["program", "kernels", "accy kernel ms", "accy call ms", "numpy ms",
                    "numpy / kernel", "numpy / call", "torch ms", "torch / kernel", "GB/s",
                    "% of copy", "correct"],
                   [[p, e["kernels"], _fmt(e["kernel_ms"], 3), _fmt(e["wall_ms"], 3),
                     _fmt(e["numpy_ms"], 3), _fmt(e["speedup_vs_numpy"]),
                     _fmt(e["speedup_vs_numpy_wall"]), _fmt(e["torch_ms"], 3),
                     _fmt(e["speedup_vs_torch"]),
                     _fmt(e["effective_GBps"], 1),
                     _fmt(100 * e["fraction_of_copy"] if e["fraction_of_copy"] else None, 1),
                     _fmt(e["correct"])] for p, e in s.items()])]


def _kernels_figures(result: dict[str, Any], out: Path, plt: Any, name: str) -> list[Path]:
    s = result["summary"]["programs"]
    names = list(s)
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.bar(names, [s[p]["speedup_vs_numpy"] or 0 for p in names], label="numpy / accy kernel")
    ax.bar(names, [s[p]["speedup_vs_numpy_wall"] or 0 for p in names], width=0.4,
           label="numpy / accy call")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_yscale("log")
    ax.tick_params(axis="x", labelrotation=45, labelsize=7)
    ax.legend(fontsize=7)
    return [_save(fig, plt, out / f"{name}.png")]


def _benefit_tables(result: dict[str, Any]) -> list[str]:
    s = result["summary"]["programs"]
    rows = []
    for p, configs in s.items():
        for c, e in configs.items():
            rows.append([p, c, _fmt(e["cost"]), e["kernels"], _fmt(e["prepare_ms"], 1),
                         _fmt(e["saturation_s"], 3), _fmt(e["build_ms"], 1),
                         _fmt(e["end_to_end_ms"], 1), _fmt(e["wall_ms"], 3),
                         _fmt(e["kernel_ms"], 3), _fmt(e.get("kernel_ms_speedup")),
                         _fmt(e["correct"])])
    return ["**Saturated against unsaturated pipelines** (end to end: prepare + OpenCL build + "
            "first call; then steady-state call and kernel ms; speedup over `unsaturated`).\n",
            _table(["program", "pipeline", "cost", "kernels", "prepare ms", "saturation s",
                    "build ms", "end to end ms", "call ms", "kernel ms", "kernel speedup",
                    "correct"], rows)]


def _benefit_figures(result: dict[str, Any], out: Path, plt: Any, name: str) -> list[Path]:
    s = result["summary"]["programs"]
    names = list(s)
    fig, ax = plt.subplots(figsize=(7, 3))
    width = 0.4
    for i, c in enumerate(("saturated", "saturated-fast-math")):
        ax.bar([j + (i - 0.5) * width for j in range(len(names))],
               [s[p].get(c, {}).get("kernel_ms_speedup") or 0 for p in names], width, label=c)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(range(len(names)), names, rotation=45, fontsize=7)
    ax.set_ylabel("kernel time speedup over unsaturated", fontsize=8)
    ax.legend(fontsize=7)
    return [_save(fig, plt, out / f"{name}.png")]


def _costs_tables(result: dict[str, Any]) -> list[str]:
    from accy.experiments.costs import tables as costs_tables

    return costs_tables(result)


_TABLES = {"ablation": _ablation_tables, "contraction": _contraction_tables,
           "kernels": _kernels_tables, "benefit": _benefit_tables, "costs": _costs_tables}
_FIGURES = {"ablation": _ablation_figures, "contraction": _contraction_figures,
            "kernels": _kernels_figures, "benefit": _benefit_figures,
            "costs": lambda result, out, plt, name: []}


def tables(result: dict[str, Any]) -> str:
    """The Markdown tables of a result (no heading, no provenance)."""
    return "\n".join(_TABLES[result["experiment"]](result)) + "\n"


def markdown(result: dict[str, Any], figures: Sequence[Path] = ()) -> str:
    """A Markdown report: heading, provenance, tables, figure links."""
    text = [f"# {result['experiment']} ({result['suite']})\n", provenance_line(result) + "\n",
            tables(result)]
    text += [f"![{f.stem}]({f.name})\n" for f in figures]
    if result.get("failed"):
        text.append("\n**Failed tasks**\n\n" + _table(
            ["key", "status", "attempts", "error (last line)"],
            [[str(f["key"]), f.get("status", "failed"), f["attempts"],
              f["error"].strip().splitlines()[-1][:120]]
             for f in result["failed"]]))
    return "\n".join(text)


def figures(result: dict[str, Any], out_dir: str | Path, name: str | None = None
            ) -> list[Path]:
    """Write the result's figures into ``out_dir`` as ``<name>*.png`` (``name`` defaults to
    the experiment); empty when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if not result["rows"]:
        return []
    return _FIGURES[result["experiment"]](result, out, plt, name or result["experiment"])


def write_report(result: dict[str, Any] | str | Path, out_dir: str | Path) -> list[Path]:
    """Write ``<experiment>.md`` and its figures into ``out_dir``; return every path."""
    res = read_results(result) if isinstance(result, str | Path) else result
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figs = figures(res, out)
    md = out / f"{res['experiment']}.md"
    atomic_write(md, markdown(res, figs))
    return [md, *figs]
