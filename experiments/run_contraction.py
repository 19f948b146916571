"""Contraction search: accy's path strategies against opt_einsum (and cotengra).

    python experiments/run_contraction.py [--suite ci|paper|full] [options of `accy experiment`]

The same as ``accy experiment contraction ...``: the experiment lives in
``accy.experiments.contraction`` so that it also runs from an installed package.
"""

from __future__ import annotations

import sys

from accy.cli import main

if __name__ == "__main__":
    sys.exit(main(["experiment", "contraction", *sys.argv[1:]]))
