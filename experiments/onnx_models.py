"""Write the anchors' seven benchmark models as ONNX files.

    python experiments/onnx_models.py OUT_DIR [--models bert,vgg19] [--batch N|paper]
                                      [--image SIDE] [--slim K] [--depth D] [--seed S]

One ``<model>.onnx`` per model (BERT layer, NasRNN, NasNet-A, ResNeXt-50, SqueezeNet,
VGG-19, Inception-v3), built with ``onnx.helper`` at the published shapes by
:mod:`accy.experiments.onnx_models` (which ``accy experiment models`` uses too; its
docstring says which shapes and why). ``--batch paper`` takes each model's published batch.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from accy.experiments.onnx_models import MODELS, PAPER_BATCH, build


def main(argv: list[str] | None = None) -> list[Path]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="folder for the .onnx files")
    ap.add_argument("--models", default=",".join(MODELS),
                    help=f"comma-separated, of {', '.join(MODELS)} (default: all)")
    ap.add_argument("--batch", default="1", help="a batch size, or 'paper' (default: 1)")
    ap.add_argument("--image", type=int, default=None, help="image side (default: published)")
    ap.add_argument("--slim", type=int, default=1, help="divide channel counts by this")
    ap.add_argument("--depth", type=int, default=None, help="cap repeated blocks at this")
    ap.add_argument("--seed", type=int, default=0, help="weights' seed (default: 0)")
    args = ap.parse_args(argv)
    import onnx

    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        ap.error(f"unknown models {', '.join(unknown)}; valid: {', '.join(MODELS)}")
    if args.batch != "paper" and not args.batch.isdigit():
        ap.error(f"--batch must be a positive integer or 'paper', got {args.batch!r}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        batch = PAPER_BATCH[name] if args.batch == "paper" else int(args.batch)
        image = args.image if MODELS[name].min_image is not None else None
        model = build(name, batch=batch, image=image, slim=args.slim, depth=args.depth,
                      seed=args.seed)
        path = out / f"{name}.onnx"
        onnx.save(model, str(path))
        print(f"wrote {path} ({len(model.graph.node)} nodes, batch {batch})")
        written.append(path)
    return written


if __name__ == "__main__":
    main(sys.argv[1:])
