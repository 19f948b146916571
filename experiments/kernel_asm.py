"""What CUDA's assembler makes of accy's tensor-core kernels, without a GPU: registers, spills
and serialized wgmma, per kernel of bench_gpu's programs planned for a saved NVIDIA profile.

    python experiments/kernel_asm.py    # the default set for papers/data/h100_profile.json
    python experiments/kernel_asm.py --programs attention_2048_f16 --sass /tmp/sass
    python experiments/kernel_asm.py --programs attention_2048_f16 \
        --set "accy.kernels.attention_wgmma.PIN=True"

Each kernel whose source holds inline PTX goes through clang's NVPTX target, accy's
expansion of its deferred markers and ``ptxas -arch=sm_90a -v``
(:mod:`accy.backends.opencl.nvptx_offline`). A row per kernel: registers a lane uses, bytes
spilled, and whether ptxas serialized the kernel's wgmma (it does so for the whole kernel
where a register a running wgmma reads may be written before its wait). With ``--sass DIR``
and ``nvdisasm`` on the PATH (PyPI: ``nvidia-cuda-nvdisasm``), each kernel's SASS is written
there too: the order the instructions really run in (ptxas moves a wgmma's issue past
independent work), and the row's ``order`` gives the runs of wgmma (``H``) and exponentials
(``E``, ``MUFU.EX2``) in it (f16 attention's ``H4 E34 H8``: tile 0's scores, the loop's
softmax, then the next tile's scores issued beside ``P V``; ``H8 E34 H4`` where they are held
ahead of the softmax), and ``loop``, ``moves``, ``exps`` count the innermost loop around a
wgmma (:func:`loop`). ``--set MODULE.ATTR=VALUE;...`` holds generator knobs while the kernels
are planned (as ``bench_gpu.py --set``). Needs ``clang-15`` and ``ptxas``; the device's own
compiler may allocate differently, so the GPU stays the judge of speed. Writes the rows as
JSON with ``--out``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import bench_gpu_programs as bp  # noqa: E402
from ab_gemm import applied, settings_of  # noqa: E402

import accy  # noqa: E402
from accy.backends.opencl.nvptx_offline import TOOLS, assemble, available, summary  # noqa: E402
from accy.kernels import tma  # noqa: E402
from accy.target import TargetProfile  # noqa: E402

PROFILE = HERE.parent / "papers" / "data" / "h100_profile.json"


def order(sass: str) -> str:
    """The runs of wgmma (``H``) and ``MUFU.EX2`` (``E``) instructions in SASS text, in order,
    each with its length: ``H4 E34 H8``."""
    runs: list[list] = []
    for line in sass.splitlines():
        kind = "H" if "HGMMA" in line else "E" if "MUFU.EX2" in line else None
        if kind and runs and runs[-1][0] == kind:
            runs[-1][1] += 1
        elif kind:
            runs.append([kind, 1])
    return " ".join(f"{k}{n}" for k, n in runs)


INSTRUCTION = re.compile(r"\s*/\*[0-9a-f]+\*/\s+([^;]*);")
LABEL = re.compile(r"\s*\.L_x_(\d+):")
MOVE = re.compile(r"(?:@!?U?P\w+\s+)?(?:MOV R\d+,|IMAD\.MOV\.U32 R\d+, RZ, RZ,) R\d+")


def loop(sass: str) -> dict[str, int]:
    """Of the innermost loop (a backward branch's span) that holds a wgmma: ``loop``, its
    instructions, ``moves`` (register-to-register moves), ``exps`` (``MUFU.EX2``); {} where
    none holds one."""
    code, labels, at = [], {}, None
    for line in sass.splitlines():
        if m := LABEL.match(line):
            at = m.group(1)
        elif m := INSTRUCTION.match(line):
            code.append(m.group(1).strip())
            if at is not None:
                labels[at], at = len(code) - 1, None
    spans = [(labels[m.group(1)], i) for i, text in enumerate(code)
             if (m := re.search(r"BRA.*\.L_x_(\d+)", text)) and labels.get(m.group(1), i) < i]
    spans = [(a, b) for a, b in spans if any("HGMMA" in t for t in code[a:b + 1])]
    if not spans:
        return {}
    first, last = min(spans, key=lambda s: s[1] - s[0])
    body = code[first:last + 1]
    return {"loop": len(body), "moves": sum(bool(MOVE.fullmatch(t)) for t in body),
            "exps": sum("MUFU.EX2" in t for t in body)}


def rows(names: list[str], profile: Path, sass: Path | None) -> list[dict[str, Any]]:
    """A row per kernel with inline PTX of bench_gpu's programs ``names``, planned for
    ``profile`` with tensor maps encoded offline (:func:`accy.kernels.tma.offline`); each
    kernel's SASS into ``sass`` (by ``nvdisasm``) where given."""
    target = TargetProfile.load(profile)
    out = []
    for name in names:
        spec = bp.PROGRAMS[name]
        with tma.offline():
            job = accy.prepare(bp.program(spec, spec.full), "accy-default", target=target)
        for summ in job.kernel_summaries():
            source = job.kernel_source(summ.index)
            if "asm" not in source:
                continue
            row: dict[str, Any] = {"program": name, "kernel": summ.index, "entry": summ.entry,
                                   "generators": job.generators()}
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    row.update(summary(assemble(source, Path(tmp))))
                except RuntimeError as e:
                    row["error"] = str(e)
                else:
                    if sass is not None:
                        sass.mkdir(parents=True, exist_ok=True)
                        text = subprocess.run(["nvdisasm", "-c", str(Path(tmp) / "x.cubin")],
                                              capture_output=True, text=True, check=True).stdout
                        (sass / f"{name}_{summ.index}.sass").write_text(text)
                        row.update(order=order(text), **loop(text))
            out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", type=Path, default=PROFILE, help="a saved TargetProfile")
    p.add_argument("--programs", default=",".join(bp.PROGRAMS),
                   help="bench_gpu programs, comma-separated (default: the default set)")
    p.add_argument("--sass", type=Path, default=None, help="write each kernel's SASS here")
    p.add_argument("--set", default="", metavar="MODULE.ATTR=VALUE[;...]",
                   help="generator knobs held while the kernels are planned")
    p.add_argument("--out", type=Path, default=None, help="the rows as JSON")
    args = p.parse_args(argv)
    try:
        settings = settings_of(args.set) if args.set.strip() else []
    except ValueError as e:
        p.error(f"--set: {e}")
    if not available():
        p.error(f"needs {' and '.join(TOOLS)} on the PATH")
    if args.sass is not None and not shutil.which("nvdisasm"):
        p.error("--sass needs nvdisasm on the PATH (PyPI: nvidia-cuda-nvdisasm)")
    names = [n for n in args.programs.split(",") if n]
    if unknown := [n for n in names if n not in bp.PROGRAMS]:
        p.error(f"unknown programs {unknown}: bench_gpu's are {', '.join(bp.PROGRAMS)}")
    with applied(settings):
        found = rows(names, args.profile, args.sass)
    print(f"{'program':22s} {'kernel':>6s} {'registers':>9s} {'spilled':>8s} serialized "
          f"{'loop':>5s} {'moves':>5s} {'exps':>5s}  order")
    for r in found:
        if "error" in r:
            print(f"{r['program']:22s} {r['kernel']:6d} {r['error'].splitlines()[0]}")
        else:
            print(f"{r['program']:22s} {r['kernel']:6d} {r['registers']:9d} "
                  f"{r['spill_bytes']:8d} {str(r['serialized']):10s} "
                  + "".join(f"{r.get(k, ''):>5} " for k in ("loop", "moves", "exps"))
                  + f" {r.get('order', '')}")
    if args.out:
        args.out.write_text(json.dumps({"profile": str(args.profile), "set": args.set,
                                        "rows": found}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
