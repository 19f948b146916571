"""The one set of saturation and extraction defaults, shared by ``driver.saturate`` and the
``saturate`` pass (whose options use them: no second copy to drift apart).

12 iterations, 20 000 e-nodes, 2 s: enough for the rule sets to reach the rewrites that pay
on the example programs (most saturate within 5 iterations), small enough that saturating
and extracting a 1000-node program stays within a few seconds on a loaded two-core machine.
``canonicalize`` and ``constant-fold`` run tighter budgets of their own (contract stage).

Budgets that scale with the program (the ``saturate`` pass's ``time-limit=0``, its default;
its ``node-limit`` counts per 1000 operations), for a program of ``n`` operations (IR nodes
other than parameters and constants):

    time limit  = 2 s * max(1, n / 1000)         the whole pass: build, saturation, extraction
    node limit  = N * max(1, r / 1000)            per e-graph, r = operations in that e-graph,
                                                  N = node-limit (20 000 by default)

and programs above ``DEFAULT_REGION_SIZE`` (2000) operations are saturated region by region
(``accy.egraph.split``), each region's e-graph with the node limit of its own size and a share
of the time left in proportion to its size. So a block costs the same budget whether it is
saturated alone or in a stack of ten, and gains as much.

This module imports nothing: pass modules read it when they are defined, before egglog loads.
"""

DEFAULT_ITERATIONS = 12
DEFAULT_NODE_LIMIT = 20_000
DEFAULT_TIME_LIMIT_S = 2.0
DEFAULT_EXTRACTOR = "greedy-dag"  # accy.egraph.extract.EXTRACTORS
DEFAULT_EXTRACT_TIME_LIMIT_S = 10.0  # the ilp extractor's (then it falls back to greedy-dag)
EXTRACTOR_NAMES = ("greedy-dag", "tree", "ilp")

DEFAULT_REGION_SIZE = 2000  # operations per region; 0 saturates the whole program at once
DEFAULT_REGION_CONTEXT = 0  # a region's e-graph holds its inputs' definitions this deep (off)
# stop once a gain was found and this many extractions in a row found nothing cheaper
DEFAULT_PATIENCE = 2
# what patience counts as a gain: at least this share of the best cost so far (cost models
# round, so a rewrite can shave a few units off without changing anything that matters)
PATIENCE_MIN_GAIN = 1e-6

OPERATIONS_PER_TIME_LIMIT = 1000  # operations per DEFAULT_TIME_LIMIT_S of the scaled limit
# Programs (or regions) above this many operations are saturated in a worker process that
# is killed at the deadline (accy.passes.rewrite_worker); smaller ones in the calling process, where
# a run takes milliseconds and a process would cost more than the work.
WORKER_MIN_OPERATIONS = 100


def scaled_time_limit(operations: int) -> float:
    """The default time limit (seconds) of a whole pass over ``operations`` operations."""
    return DEFAULT_TIME_LIMIT_S * max(1.0, operations / OPERATIONS_PER_TIME_LIMIT)


def scaled_node_limit(operations: int, per_thousand: int = DEFAULT_NODE_LIMIT) -> int:
    """The node limit of one e-graph holding ``operations`` operations, ``per_thousand``
    e-nodes per 1000 operations and never fewer (``saturate{node-limit=N}`` sets it)."""
    return max(per_thousand, per_thousand * operations // OPERATIONS_PER_TIME_LIMIT)


def pays(cost: int, best: int) -> bool:
    """Whether ``cost`` is a gain over ``best`` for patience (``PATIENCE_MIN_GAIN``)."""
    return best - cost > PATIENCE_MIN_GAIN * best
