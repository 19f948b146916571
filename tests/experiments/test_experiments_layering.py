"""accy.experiments sits on top: nothing else in accy imports it but the command line
(``accy.cli`` and the ``accy fuzz`` command, ``accy.fuzz``, which runs its rounds on the sweep
executor and writes through the result records); and nothing but ``accy.cli`` imports
``accy.fuzz``, so the command line stays the top."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2] / "accy"


def _imports(path: pathlib.Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_only_the_command_line_imports_experiments() -> None:
    bad = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("").parts
        if rel[:2] == ("accy", "experiments") or rel in (("accy", "cli"), ("accy", "fuzz")):
            continue
        bad += [f"{path}: {m}" for m in _imports(path) if m.startswith("accy.experiments")]
    assert not bad, "\n".join(bad)


def test_only_the_command_line_imports_fuzz() -> None:
    bad = [f"{path}: accy.fuzz" for path in ROOT.rglob("*.py")
           if path.relative_to(ROOT.parent).with_suffix("").parts not in (("accy", "cli"),
                                                                          ("accy", "fuzz"))
           and "accy.fuzz" in _imports(path)]
    assert not bad, "\n".join(bad)
