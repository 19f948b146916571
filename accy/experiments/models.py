"""``accy experiment models``: the anchors' seven models imported, prepared, run and checked.

For each model of :mod:`accy.experiments.onnx_models`: build the ONNX graph, import it
(:func:`accy.onnx.load`), prepare it with ``accy-default`` and with ``accy-default`` less
``saturate`` (``--saturate both``, the default; ``on`` or ``off`` for one of them), run it on
the OpenCL device, and check every output against onnxruntime on the CPU within the
differential tolerances (:mod:`accy.differential`: the error bounds of the imported program on
these inputs, both sides' rounding allowed, on the elements where those bounds are stable) and
within ``measure.TOLERANCE`` (1e-3) of each output's largest magnitude everywhere (the worst-
case bounds of a deep network can exceed the values themselves, and then mark elements
unstable: BERT's layer norms do; the row counts compared and skipped elements). A row records
the ONNX node count, the imported program's op count, and per pipeline the kernel count, the
prepared product's fingerprint (equal for both pipelines: saturation changed nothing),
preparation time, median kernel time (the sum of one call's OpenCL profiling events, over
``repeats`` calls after warm-up calls: :data:`WARMUP_S` of them, at least one and at most
:data:`WARMUP_CALLS`, as a model's first calls on PoCL run slower), whether the outputs are
within tolerance and the largest error relative to each output's largest magnitude; and
onnxruntime's median time for one run on the host CPU, after the same warm-up.

onnxruntime is optional: with ``reference=DIR`` its inputs and outputs are saved there as
``<model>-b<batch>-i<image>-s<slim>-d<depth>-seed<seed>.npz`` (with the imported program's
fingerprint and onnxruntime's time) and loaded from there when present, so a machine without
onnxruntime (a GPU host) checks against outputs recorded elsewhere; with neither, the row
says that nothing was compared and why. ``reference_only`` writes the references and stops.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from accy.errors import AccyError
from accy.experiments import onnx_models, records
from accy.experiments.measure import TOLERANCE, edit_pipeline, max_rel_error

__all__ = ["PIPELINES", "ReferenceMismatch", "reference", "run", "table"]


class ReferenceMismatch(AccyError, ValueError):
    """A saved reference was recorded for another program than the one being checked."""

PIPELINES = {"on": "accy-default", "off": "accy-default without saturate"}


def _pipeline(which: str) -> Any:
    if which == "on":
        return "accy-default"
    return edit_pipeline("accy-default", lambda p: None if p.name == "saturate" else p)


def _reference_path(folder: Path, name: str, config: dict[str, Any]) -> Path:
    return folder / (f"{name}-b{config['batch']}-i{config['image'] or 'default'}"
                     f"-s{config['slim']}-d{config['depth'] or 'full'}-seed{config['seed']}.npz")


WARMUP_S = 1.0  # seconds of warm-up calls before timing, each side ...
WARMUP_CALLS = 20  # ... but no more calls than this


def _warm(call: Any) -> Any:
    """``call()``'s first result, after calling it for WARMUP_S (at most WARMUP_CALLS times)."""
    start = time.perf_counter()
    first = call()
    for _ in range(WARMUP_CALLS - 1):
        if time.perf_counter() - start >= WARMUP_S:
            break
        call()
    return first


def _onnxruntime(model: Any, feeds: dict[str, np.ndarray], repeats: int
                 ) -> tuple[list[np.ndarray], float]:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outputs = _warm(lambda: sess.run(None, feeds))
    times = []
    for _ in range(max(repeats, 1)):
        t0 = time.perf_counter_ns()
        sess.run(None, feeds)
        times.append(time.perf_counter_ns() - t0)
    return [np.asarray(o) for o in outputs], records.median_ms(times)


def reference(model: Any, program: Any, name: str, config: dict[str, Any], repeats: int,
              folder: Path | None) -> dict[str, Any]:
    """Inputs, onnxruntime's outputs and time, and where they came from: a saved file in
    ``folder``, onnxruntime here (saved into ``folder`` when given), or nothing (``outputs``
    None and ``note`` saying why)."""
    feeds = onnx_models.inputs(model, config["seed"])
    fingerprint = program.fingerprint()
    path = _reference_path(folder, name, config) if folder is not None else None
    if path is not None and path.exists():
        with np.load(path) as data:
            if str(data["fingerprint"]) != fingerprint:
                raise ReferenceMismatch(f"{path} was recorded for another program (fingerprint "
                                 f"{data['fingerprint']}, this one {fingerprint}); delete it "
                                 f"or choose another --reference folder")
            saved = {k[3:]: data[k] for k in data.files if k.startswith("in_")}
            outs = [data[f"out_{i}"] for i in range(int(data["outputs"]))]
            return {"inputs": [saved[n] for n in feeds], "outputs": outs,
                    "ort_ms": float(data["ort_ms"]), "source": str(path), "note": None}
    if importlib.util.find_spec("onnxruntime") is None:
        where = f" and no {path} holds a recorded one" if path is not None else (
            "; record references where it is installed with --reference DIR")
        return {"inputs": list(feeds.values()), "outputs": None, "ort_ms": None,
                "source": None, "note": f"not compared: onnxruntime is not installed{where}"}
    outs, ort_ms = _onnxruntime(model, feeds, repeats)
    if path is not None:
        folder.mkdir(parents=True, exist_ok=True)
        arrays = {f"in_{k}": v for k, v in feeds.items()} | {
            f"out_{i}": o for i, o in enumerate(outs)}
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(tmp, fingerprint=np.str_(fingerprint), outputs=np.int64(len(outs)),
                 ort_ms=np.float64(ort_ms), **arrays)
        tmp.replace(path)
    return {"inputs": list(feeds.values()), "outputs": outs, "ort_ms": ort_ms,
            "source": "onnxruntime", "note": None}


def _check(program: Any, inputs: Sequence[np.ndarray], got: Sequence[Any],
           want: Sequence[np.ndarray], precision: str, cache: dict[str, Any]) -> dict[str, Any]:
    """``got`` against ``want``: within the differential tolerances (both sides' error
    bounds) where the bounds are stable (``compared``; ``skipped`` where they are not: deep
    worst-case bounds can grow past the value itself, e.g. through a layer norm's division),
    and everywhere within :data:`~accy.experiments.measure.TOLERANCE` of each output's
    largest magnitude (``max_rel_error``). ``bound_rel``: the largest error bound relative
    to its output's largest magnitude (how much the bounds allow: worst-case propagation
    through many layers of convolutions grows geometrically, so on deep networks it can
    exceed 1 and only ``max_rel_error`` says anything)."""
    from accy.differential import TOLERANCES
    from accy.error_bounds import Comparison, error_bounds

    if precision not in cache:
        cache[precision] = error_bounds(program, inputs, {d: t.rtol for d, t in
                                                          TOLERANCES.items()},
                                        precision=precision)
    got = [np.asarray(g) for g in got]
    out = Comparison()
    for i, (g, w, b) in enumerate(zip(got, want, cache[precision], strict=True)):
        tol = TOLERANCES[program.function().results[i].type.dtype]
        out.judge(f"output {i}", g, np.asarray(w), b, tol.atol)
    err = max_rel_error(got, want)
    loose = max(float(np.max(b.error, initial=0.0)) / max(float(np.max(np.abs(b.value),
                                                                         initial=0.0)), 1e-30)
                for b in cache[precision])
    return {"within_tolerance": not out.problems and err <= TOLERANCE,
            "problems": out.problems[:3], "compared": out.compared, "skipped": out.skipped,
            "max_rel_error": err, "bound_rel": loose}


def _measure(program: Any, which: str, runtime: Any, target: Any, ref: dict[str, Any],
             repeats: int, bounds: dict[str, Any]) -> dict[str, Any]:
    import accy
    from accy.differential import precision_of

    start = time.perf_counter_ns()
    job = accy.prepare(program, _pipeline(which), target=target)
    row: dict[str, Any] = {"pipeline": PIPELINES[which],
                           "prepare_s": (time.perf_counter_ns() - start) / 1e9,
                           "kernels": job.kernel_count,
                           "product_fingerprint": job.product.fingerprint()}
    if runtime is None:
        return row
    exe = job.executable(device=runtime)
    t0 = time.perf_counter_ns()
    outputs = exe(*ref["inputs"])  # the first call builds kernels, uploads constants
    row["first_call_s"] = (time.perf_counter_ns() - t0) / 1e9
    _warm(lambda: exe(*ref["inputs"]))
    kernel_ns, wall_ns = [], []
    for _ in range(max(repeats, 1)):
        t0 = time.perf_counter_ns()
        exe(*ref["inputs"])
        wall_ns.append(time.perf_counter_ns() - t0)
        kernel_ns.append(sum(exe.last_kernel_ns))
    row.update(kernel_ms=records.median_ms(kernel_ns), kernel_ms_min=min(kernel_ns) / 1e6,
               wall_ms=records.median_ms(wall_ns))
    if ref["outputs"] is not None:
        row.update(_check(program, ref["inputs"], outputs, ref["outputs"],
                          precision_of(job.pipeline, job.target), bounds))
    return row


def run(models: Sequence[str] = tuple(onnx_models.MODELS), *, batch: int | str = 1,
        image: int | None = None, slim: int = 1, depth: int | None = None,
        seed: int = 0, device: str | None = None,
        saturate: str = "both", repeats: int = 3, reference_dir: str | Path | None = None,
        reference_only: bool = False, run_device: bool = True,
        log: Any = None) -> dict[str, Any]:
    """Run the experiment (module docstring) and return its result document. ``batch``: a
    number or ``"paper"`` (:data:`~accy.experiments.onnx_models.PAPER_BATCH` per model);
    ``image``, ``slim`` and ``depth`` make smaller variants
    (:func:`~accy.experiments.onnx_models.build`);
    ``log(text)`` hears progress."""
    import accy

    if saturate not in ("both", "on", "off"):
        raise ValueError(f"saturate must be both, on or off, got {saturate!r}")
    unknown = [m for m in models if m not in onnx_models.MODELS]
    if unknown:
        raise ValueError(f"unknown models {', '.join(unknown)}; valid: "
                         f"{', '.join(onnx_models.MODELS)}")
    variants = ("on", "off") if saturate == "both" else (saturate,)
    runtime = target = None
    if run_device and not reference_only:
        from accy.backends.registry import open_device

        runtime, target = open_device(device)
    folder = Path(reference_dir) if reference_dir is not None else None
    rows = []
    for name in models:
        b = onnx_models.PAPER_BATCH[name] if batch == "paper" else int(batch)
        img = image if onnx_models.MODELS[name].min_image is not None else None
        config = {"batch": b, "image": img, "slim": slim, "depth": depth, "seed": seed}
        t0 = time.perf_counter()
        model = onnx_models.build(name, batch=b, image=img, slim=slim, depth=depth, seed=seed)
        program = accy.onnx.load(model)
        fn = program.function()
        side = (model.graph.input[0].type.tensor_type.shape.dim[-1].dim_value
                if img is not None or onnx_models.MODELS[name].min_image else None)
        row: dict[str, Any] = {
            "model": name, **config, "image": side, "onnx_nodes": len(model.graph.node),
            "ops": sum(1 for n in fn.nodes() if n.op.value not in ("param", "constant")),
            "parameters": int(sum(np.prod(t.dims) for t in model.graph.initializer)),
            "import_s": time.perf_counter() - t0}
        ref = reference(model, program, name, config, repeats, folder)
        row.update(ort_ms=ref["ort_ms"], reference=ref["source"])
        if ref["note"]:
            row["note"] = ref["note"]
        if log:
            log(f"{name}: {row['ops']} ops, onnxruntime {_fmt(ref['ort_ms'])} ms")
        if not reference_only:
            bounds: dict[str, Any] = {}
            for which in variants:
                row[f"saturate_{which}"] = r = _measure(program, which, runtime, target, ref,
                                                        repeats, bounds)
                if log:
                    log(f"  {PIPELINES[which]}: {r['kernels']} kernels, prepare "
                        f"{r['prepare_s']:.1f} s, kernels {_fmt(r.get('kernel_ms'))} ms, "
                        f"within tolerance: {r.get('within_tolerance', 'not compared')}")
        rows.append(row)
    return {"experiment": "models", "rows": rows,
            "settings": {"batch": batch, "image": image, "slim": slim, "depth": depth,
                         "seed": seed,
                         "saturate": saturate, "repeats": repeats,
                         "reference_dir": str(folder) if folder else None},
            "provenance": records.provenance(device if runtime is not None else False,
                                             extra_versions=("onnx", "onnxruntime"))}


def _fmt(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def table(result: dict[str, Any]) -> str:
    """A Markdown table of a result: one line per model and pipeline."""
    lines = ["| model | batch | image | ops | pipeline | kernels | prepare s | kernel ms "
             "| onnxruntime ms | max rel. error | within tolerance |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        for which in ("on", "off"):
            r = row.get(f"saturate_{which}")
            if r is None:
                continue
            ok, err = r.get("within_tolerance"), r.get("max_rel_error")
            lines.append(
                f"| {row['model']} | {row['batch']} | {row['image'] or '-'} | {row['ops']} "
                f"| {r['pipeline']} | {r['kernels']} | {r['prepare_s']:.1f} "
                f"| {_fmt(r.get('kernel_ms'))} | {_fmt(row['ort_ms'], 2)} "
                f"| {'-' if err is None else f'{err:.1e}'} "
                f"| {'-' if ok is None else ('yes' if ok else 'NO')} |")
    return "\n".join(lines)
