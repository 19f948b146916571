"""Regenerate papers/: run the ablation and contraction studies, rewrite the write-ups.

    python experiments/run_paper.py [--suite ci|paper|full] [options of `accy experiment`]

The same as ``accy experiment paper ...``: the experiment lives in
``accy.experiments.paper`` so that it also runs from an installed package.
"""

from __future__ import annotations

import sys

from accy.cli import main

if __name__ == "__main__":
    sys.exit(main(["experiment", "paper", *sys.argv[1:]]))
