"""The dependency direction of docs/ARCHITECTURE.md: lower layers never import upper ones."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "accy"

# package prefix -> accy modules it may import (besides itself)
ALLOWED = {
    "accy.ir": ("accy.errors",),
    "accy.target": ("accy.errors", "accy.ir"),
    "accy.plans": ("accy.errors", "accy.ir", "accy.target"),
    "accy.kernels": ("accy.errors", "accy.ir", "accy.plans", "accy.target"),
    "accy.backends": ("accy.errors", "accy.ir", "accy.kernels", "accy.plans", "accy.target",
                      "accy.job"),
    "accy.product": ("accy.errors", "accy.ir", "accy.kernels", "accy.plans", "accy.target"),
    "accy.egraph": ("accy.errors", "accy.ir"),
    "accy.contraction": ("accy.errors",),
    "accy.passes": ("accy.errors", "accy.ir", "accy.kernels", "accy.plans", "accy.target",
                    "accy.product", "accy.backends.opencl.render", "accy.egraph",
                    "accy.contraction"),
}


def imports(path: pathlib.Path) -> set[str]:
    """accy modules imported at run time (imports under ``if TYPE_CHECKING:`` do not count)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m == "accy" or m.startswith("accy.")}


def module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    return ".".join(p for p in rel.parts if p != "__init__")


def test_lower_layers_do_not_import_upper_layers():
    bad = []
    for path in ROOT.rglob("*.py"):
        name = module_name(path)
        layer = next((k for k in ALLOWED if name == k or name.startswith(k + ".")), None)
        if layer is None:
            continue
        for imported in imports(path):
            ok = imported == layer or imported.startswith(layer + ".") or any(
                imported == a or imported.startswith(a + ".") for a in ALLOWED[layer])
            if not ok:
                bad.append(f"{name} imports {imported}")
    assert not bad, "\n".join(bad)
