"""Regenerating ``papers/``: run the experiments, rewrite the generated parts of the write-ups.

``accy experiment paper [--suite paper]`` (or ``make paper``) runs the ablation (default
policy with single rules, and fast-math by rule set) and the contraction study at one suite
size, writes their results to ``papers/data/`` (JSON and CSV), their figures to
``papers/figures/``, and rewrites every block of ``papers/ablation.md``
and ``papers/contraction.md`` between ``<!-- generated: NAME -->`` and
``<!-- end generated: NAME -->`` (provenance, tables, findings, figures). Everything outside
the blocks is prose and is kept; a missing write-up is created from a skeleton. Timing runs
use one worker by default, so measurements do not compete for the CPU. ``--render-only``
rewrites the blocks and figures from ``papers/data/`` without running anything.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path
from typing import Any

from accy.experiments import records
from accy.experiments.report import _fmt, figures, provenance_line, tables

__all__ = ["ablation_findings", "regenerate", "replace_block"]

_BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)"
                    r"(<!-- end generated: (?P=name) -->)", re.S)


def replace_block(text: str, name: str, body: str) -> str:
    """``text`` with the generated block ``name`` holding ``body`` (appended if missing)."""
    found = False

    def sub(m: re.Match[str]) -> str:
        nonlocal found
        if m.group("name") != name:
            return m.group(0)
        found = True
        return f"{m.group(1)}{body.rstrip()}\n{m.group(4)}"

    out = _BLOCK.sub(sub, text)
    if not found:
        out = (out.rstrip() + f"\n\n<!-- generated: {name} -->\n{body.rstrip()}\n"
               f"<!-- end generated: {name} -->\n")
    return out


def _fraction(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}×" if x < 1000 else f"{x:.1e}×"


def ablation_findings(result: dict[str, Any]) -> str:
    """Bullets: per program, what matters (rule sets and rules, with the cost ratio)."""
    s = result["summary"]["programs"]
    lines = []
    for program, configs in s.items():
        base, none = configs.get("all"), configs.get("none")
        if base is None:
            continue
        sets = [f"`{e['target']}` ({_fraction(e['cost_ratio'])})" for e in configs.values()
                if e["kind"] == "without-ruleset" and e["effect"] == "matters"]
        rules = [f"`{e['target']}` ({_fraction(e['cost_ratio'])}, kernels {base['kernels']}"
                 f"→{e['kernels']})" for e in configs.values()
                 if e["kind"] == "without-rule" and e["effect"] == "matters"]
        fired = sum(e["kind"] == "without-rule" for e in configs.values())
        if none is None:
            headline = ""
        elif none["effect"] == "none" or none["cost_ratio"] == 1.0 and none["effect"] != "matters":
            headline = "no rule changes the extracted program's cost"
        else:
            q = none.get("kernel_ms_ratio_quartiles")
            time_ratio = ("identical kernels" if none["same_kernels"]
                          else f"kernel time {_fraction(none['kernel_ms_ratio'])}"
                          + (f" [{q[0]:.2f}, {q[1]:.2f}]" if q else ""))
            headline = (f"without any rules: cost {_fraction(none['cost_ratio'])}, kernels "
                        f"{none['kernels']} vs {base['kernels']}, {time_ratio}")
        parts = [headline] if headline else []
        if sets:
            parts.append("rule sets that matter: " + ", ".join(sets))
        if rules:
            parts.append("rules that matter alone: " + ", ".join(rules))
        elif fired:
            parts.append(f"none of the {fired} rules that fired matters alone")
        lines.append(f"- **{program}**: " + "; ".join(parts) + ".")
    noise = result["summary"].get("noise", {})
    if noise.get("configurations"):
        lines.append(f"- Noise floor of the kernel times: identical kernels measured "
                     f"{_fmt(noise['median_ratio'])}× apart (median), up to "
                     f"{_fmt(noise['max_ratio'])}×.")
    return "\n".join(lines)


def contraction_findings(result: dict[str, Any]) -> str:
    """Bullets: per method, geometric-mean cost over the best and median search time."""
    lines = []
    for m, e in result["summary"]["methods"].items():
        if not e["solved"]:
            continue
        lines.append(f"- `{m}`: {_fraction(e['geomean_ratio'])} the best cost in geometric mean "
                     f"(worst {_fraction(e['worst_ratio'])}), best on "
                     f"{100 * e['best_share']:.0f}% of {e['solved']} instances, median search "
                     f"{_fmt(e['median_ms'])} ms (max {_fmt(e['max_ms'], 1)} ms).")
    return "\n".join(lines)


_SKELETON = """# {title}

<!-- generated: provenance -->
<!-- end generated: provenance -->

## Results

<!-- generated: tables -->
<!-- end generated: tables -->

## Findings

<!-- generated: findings -->
<!-- end generated: findings -->

<!-- generated: figures -->
<!-- end generated: figures -->
"""


def _update(doc: Path, title: str, result: dict[str, Any], figs: list[Path], findings: str,
            command: str, root: Path) -> None:
    text = doc.read_text() if doc.exists() else _SKELETON.format(title=title)
    prov = (f"Regenerate with `{command}` (suite `{result['suite']}`; results in "
            f"`data/` as JSON and CSV).\n\n" + provenance_line(result))
    text = replace_block(text, "provenance", prov)
    text = replace_block(text, "tables", tables(result))
    text = replace_block(text, "findings", findings)
    text = replace_block(text, "figures", _figure_links(figs, root))
    records.atomic_write(doc, text)


def _figure_links(figs: list[Path], root: Path) -> str:
    return "\n\n".join(f"![{f.stem}]({f.relative_to(root).as_posix()})" for f in figs)


def regenerate(root: Path, suite: str, options: Any, args: argparse.Namespace | None = None
               ) -> list[dict[str, Any]]:
    """Run the studies at ``suite`` and rewrite ``root``'s write-ups; return failed tasks.

    Ablation under the default policy (rule sets and single rules), ablation under fast-math
    (rule sets only), and the contraction study.
    """
    from accy.experiments import ablation, contraction

    get = lambda name, default=None: getattr(args, name, None) or default  # noqa: E731
    split = lambda text: tuple(x for x in text.split(",") if x) if text else None  # noqa: E731
    command = "accy experiment paper" + (f" --suite {suite}" if suite != "paper" else "")
    for flag in ("programs", "rulesets", "rules", "families", "sizes", "instances"):
        if get(flag):
            command += f" --{flag} {shlex.quote(str(get(flag)))}"
    if get("no_per_rule"):
        command += " --no-per-rule"
    rulesets = split(get("rulesets"))
    abl = ablation.run(options, rulesets=rulesets, rules=split(get("rules")),
                       per_rule=not get("no_per_rule", False))
    fast = ablation.run(options, rulesets=rulesets, per_rule=False, policy="fast-math")
    families = split(get("families"))
    con = contraction.run(options, **({"families": families} if families else {}),
                          sizes=[int(x) for x in split(get("sizes")) or ()] or None,
                          repeats=get("instances"))
    data = root / "data"
    abl["paper_command"] = command
    records.write_results(abl, data)
    records.write_results(fast, data, "ablation-fast-math")
    records.write_results(con, data)
    render(root)
    return abl["failed"] + fast["failed"] + con["failed"]


def render(root: Path) -> None:
    """Rewrite the generated blocks and figures of ``root``'s write-ups from ``root/data``
    (what ``accy experiment paper --render-only`` does, without running anything)."""
    data, figs_dir = root / "data", root / "figures"
    abl = records.read_results(data / "ablation.json")
    command = abl.get("paper_command", "accy experiment paper")
    fast = records.read_results(data / "ablation-fast-math.json")
    con = records.read_results(data / "contraction.json")
    doc = root / "ablation.md"
    _update(doc, "Rule ablation", abl, figures(abl, figs_dir), ablation_findings(abl),
            command, root)
    text = doc.read_text()
    text = replace_block(text, "tables-fast-math", tables(fast))
    text = replace_block(text, "findings-fast-math", ablation_findings(fast))
    text = replace_block(text, "figures-fast-math", _figure_links(
        figures(fast, figs_dir, "ablation-fast-math"), root))
    records.atomic_write(doc, text)
    _update(root / "contraction.md", "Contraction path search", con, figures(con, figs_dir),
            contraction_findings(con), command, root)
