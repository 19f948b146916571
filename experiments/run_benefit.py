"""Optimisation benefit: saturated against unsaturated pipelines, end to end.

    python experiments/run_benefit.py [--suite ci|paper|full] [options of `accy experiment`]

The same as ``accy experiment benefit ...``: the experiment lives in
``accy.experiments.benefit`` so that it also runs from an installed package.
"""

from __future__ import annotations

import sys

from accy.cli import main

if __name__ == "__main__":
    sys.exit(main(["experiment", "benefit", *sys.argv[1:]]))
