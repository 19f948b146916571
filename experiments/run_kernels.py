"""Kernel performance: accy's kernels against numpy, torch and the copy bandwidth.

    python experiments/run_kernels.py [--suite ci|paper|full] [options of `accy experiment`]

The same as ``accy experiment kernels ...``: the experiment lives in
``accy.experiments.kernels`` so that it also runs from an installed package.
"""

from __future__ import annotations

import sys

from accy.cli import main

if __name__ == "__main__":
    sys.exit(main(["experiment", "kernels", *sys.argv[1:]]))
