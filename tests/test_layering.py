"""The dependency direction of docs/ARCHITECTURE.md: lower layers never import upper ones."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "accy"

# package or module -> accy modules it may import (besides itself); the most specific applies
ALLOWED = {
    "accy.ir": ("accy.errors",),
    "accy.target": ("accy.errors", "accy.ir"),
    "accy.plans": ("accy.errors", "accy.ir", "accy.target"),
    "accy.kernels": ("accy.errors", "accy.ir", "accy.plans", "accy.target"),
    "accy.backends": ("accy.errors", "accy.ir", "accy.kernels", "accy.plans", "accy.target",
                      "accy.job", "accy.files"),
    "accy.files": (),  # safe folders and atomic writes: the standard library only
    "accy.product": ("accy.errors", "accy.ir", "accy.kernels", "accy.plans", "accy.target"),
    # kernel_cost prices an einsum by the path einsum-lowering searches (contraction: errors only)
    "accy.egraph": ("accy.errors", "accy.ir", "accy.contraction"),
    "accy.egraph.sorts": ("accy.errors", "accy.ir"),  # below rules, convert, driver, cost
    "accy.contraction": ("accy.errors",),
    # the path strategies, bottom up: search (shared), greedy, exact, beam; paths registers them
    "accy.contraction.search": ("accy.errors", "accy.contraction.cost"),
    "accy.contraction.trials": ("accy.errors", "accy.contraction.cost", "accy.contraction.search"),
    "accy.contraction.greedy": ("accy.errors", "accy.contraction.cost", "accy.contraction.search",
                                "accy.contraction.trials"),
    "accy.contraction.exact": ("accy.errors", "accy.contraction.cost", "accy.contraction.search",
                               "accy.contraction.greedy", "accy.contraction.chain"),
    "accy.contraction.beam": ("accy.errors", "accy.contraction.cost", "accy.contraction.search",
                              "accy.contraction.greedy", "accy.contraction.exact"),
    "accy.passes": ("accy.errors", "accy.ir", "accy.kernels", "accy.plans", "accy.target",
                    "accy.product", "accy.backends.opencl.render", "accy.backends.registry",
                    "accy.egraph",
                    "accy.contraction"),
    # the engines of accy.testing; differential (the checks) needs no hypothesis
    "accy.program_gen": ("accy.errors", "accy.ir", "accy.builder"),
    "accy.error_bounds": ("accy.errors", "accy.ir"),
    # the front end: tracing's helpers below the builder; the op functions on top of both
    "accy.tracing": ("accy.errors", "accy.ir"),
    "accy.functions": ("accy.errors", "accy.ir", "accy.builder", "accy.tracing"),
    "accy.ops_doc": ("accy.errors", "accy.ir"),  # docs/OPS.md from the op table alone
    "accy.differential": ("accy.errors", "accy.ir", "accy.error_bounds", "accy.job",
                          "accy.passes", "accy.product", "accy.target", "accy.backends"),
}
MAX_LINES = 600  # modules stay readable: split one that grows past this


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
        layer = max((k for k in ALLOWED if name == k or name.startswith(k + ".")), key=len,
                    default=None)  # the most specific entry
        if layer is None:
            continue
        for imported in imports(path):
            ok = imported == layer or imported.startswith(layer + ".") or any(
                imported == a or imported.startswith(a + ".") for a in ALLOWED[layer])
            if not ok:
                bad.append(f"{name} imports {imported}")
    assert not bad, "\n".join(bad)


def test_differential_checks_do_not_need_hypothesis():
    tree = ast.parse((ROOT / "differential.py").read_text())
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in modules if m and m.split(".")[0] == "hypothesis"}


def test_modules_stay_under_the_line_limit():
    long = [f"{path.relative_to(ROOT.parent)}: {n} lines"
            for path in (*ROOT.rglob("*.py"), *(ROOT.parent / "rewrites").glob("*.py"))
            if (n := len(path.read_text().splitlines())) > MAX_LINES]
    assert not long, "\n".join(long)
