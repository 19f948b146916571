"""Rule ablation: which rewrite rules matter for which suite programs.

    python experiments/run_ablation.py [--suite ci|paper|full] [options of `accy experiment`]

The same as ``accy experiment ablation ...``: the experiment lives in
``accy.experiments.ablation`` so that it also runs from an installed package.
"""

from __future__ import annotations

import sys

from accy.cli import main

if __name__ == "__main__":
    sys.exit(main(["experiment", "ablation", *sys.argv[1:]]))
