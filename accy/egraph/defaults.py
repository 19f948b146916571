"""The one set of saturation and extraction defaults, shared by ``driver.saturate`` and the
``saturate`` pass (whose options use them: no second copy to drift apart).

12 iterations, 20 000 e-nodes, 2 s: enough for the rule sets to reach the rewrites that pay
on the example programs (most saturate within 5 iterations), small enough that saturating
and extracting a 1000-node program stays within a few seconds on a loaded two-core machine.
``canonicalize`` and ``constant-fold`` run tighter budgets of their own (contract stage).

This module imports nothing: pass modules read it when they are defined, before egglog loads.
"""

DEFAULT_ITERATIONS = 12
DEFAULT_NODE_LIMIT = 20_000
DEFAULT_TIME_LIMIT_S = 2.0
DEFAULT_EXTRACTOR = "greedy-dag"  # accy.egraph.extract.EXTRACTORS
DEFAULT_EXTRACT_TIME_LIMIT_S = 10.0  # the ilp extractor's (then it falls back to greedy-dag)
EXTRACTOR_NAMES = ("greedy-dag", "tree", "ilp")
