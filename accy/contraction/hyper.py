"""The ``hyper`` path strategy: a budgeted, anytime search for large networks.

It spends ``max_time`` seconds or ``max_repeats`` trials (an effort budget: reproducible) on

* **Boltzmann-sampled greedy** (cotengra's ``random-greedy``,
  :func:`accy.contraction.trials.greedy_core`): pairs sharing a letter scored by
  ``result / costmod - (size_a + size_b) * costmod`` taken to ``sign * log|.|`` minus Gumbel
  noise of weight ``temperature``; ``costmod`` (uniform in 0.1..4) and ``temperature``
  (log-uniform in 0.001..1) are drawn per trial; a trial stops once its FLOPs pass the best
  tree's;
* **recursive partitioning** (:mod:`accy.contraction.partition`, from
  :data:`PARTITION_MIN_N` operands): every other trial with KaHyPar installed (the first
  one included), else every third with the built-in bisection; the tree is built top-down,
  greedy inside parts of at most ``cutoff`` operands (cotengra's ``kahypar`` driver);
* **subtree reconfiguration** of the best trees found (the one ``beam`` uses): under a time
  budget every trial tree within :data:`POLISH_WITHIN` of the best right away (raw trial
  trees rarely beat a polished best, so they are compared polished), and the best ones in
  the last 30% of the budget (without one, up to ``RECONFIGURE_MAX_N`` operands, or only the best
  tree with an effort bound ``reconfigure_budget``, which ``auto`` uses past 300 operands).

Trials are rated in log space first; only a tree that may enter the best ``KEEP`` (with
``reconfigure_budget``, where only the best tree is polished: the best one) is costed
exactly. It starts from the score greedy (the ``greedy`` strategy's four runs) and, up to
:data:`AUTO_START_MAX_N` operands, ``auto``'s exact/beam path (the chain DP where the network
is chain-like), so it is never worse than those. With ``max_time`` the loop stops at the
deadline (a partition trial then finishes its open parts by greedy) and returns the best
tree so far; the result then depends on the machine's speed. Without ``max_time`` it runs
``max_repeats`` trials (64 by default) and is deterministic for a given ``seed`` (KaHyPar
is seeded from it too).
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable

from accy.contraction.beam import RECONFIGURE_MAX_N, reconfigure
from accy.contraction.cost import Network
from accy.contraction.partition import (
    draw_params,
    kahypar_module,
    partition_ssa,
    perturb_params,
)
from accy.contraction.search import NoPathError, PathOptions, Ssa, cost_key, pair_costs
from accy.contraction.trials import Graph, greedy_core, log_costs, log_key

DEFAULT_REPEATS = 64
AUTO_START_MAX_N = 120  # auto (beam) costs ~0.1-1 s at this size; past it, start from greedy
KEEP = 4  # best distinct trees kept for reconfiguration
RECONFIGURE_SHARE = 0.3  # share of a time budget left to reconfiguration
PARTITION_MIN_N = 24  # partition trials from this many operands on
POLISH_WITHIN = 32.0  # under a time budget, trial trees within this factor of the best are polished


def random_greedy_ssa(net: Network, opts: PathOptions, rng: random.Random,
                      costmod: float, temperature: float, graph: Graph | None = None,
                      log_flops_limit: float | None = None) -> Ssa | None:
    """One Boltzmann-sampled greedy path (:func:`accy.contraction.trials.greedy_core`; None
    where it breaks the memory limit or ``log_flops_limit``)."""
    graph = graph or Graph(net)
    limit = None if opts.memory_limit is None else math.log(max(opts.memory_limit, 1))
    return greedy_core(graph.legs, graph.out, graph.sizes, graph.logsize, costmod, temperature,
                       rng, limit, log_flops_limit)


class _Best:
    """The best distinct paths found so far, by the objective's key. A path is rated in log
    space first (:func:`accy.contraction.trials.log_costs`); only one that may enter the best
    ``KEEP`` is costed exactly."""

    def __init__(self, net: Network, opts: PathOptions, graph: Graph, keep: int = KEEP) -> None:
        self.net, self.opts, self.graph, self.found = net, opts, graph, []  # (key, order, path)
        self.keep = keep
        self.seen: set[tuple] = set()
        self.logs: list[tuple[float, float]] = []  # log keys of the kept paths

    def log_flops(self) -> float | None:
        """The best path's log FLOPs (a bound for greedy trials), where FLOPs is the aim."""
        if self.opts.objective != "flops" or not self.logs:
            return None
        return min(self.logs)[0] + 1e-9

    def offer(self, path: Ssa | None) -> None:
        if path is None:
            return
        g = self.graph
        lk = log_key(log_costs(g.legs, g.out, g.logsize, path), self.opts.objective)
        if len(self.found) >= self.keep and lk[0] > max(self.logs)[0] * (1 + 1e-9) + 1e-9:
            return
        sig = tuple(path)
        if sig in self.seen:
            return
        costs = pair_costs(self.net, path)
        if self.opts.memory_limit is not None and costs[2] > self.opts.memory_limit:
            return
        self.seen.add(sig)
        self.found.append((cost_key(costs, self.opts.objective), len(self.seen), path, lk))
        self.found.sort(key=lambda f: (f[0], f[1]))
        del self.found[self.keep:]
        self.logs = [f[3] for f in self.found]

    @property
    def best(self) -> Ssa | None:
        return self.found[0][2] if self.found else None


def hyper_ssa(net: Network, opts: PathOptions, starts: Callable[[], list[Ssa | None]]
              | None = None, reconfigure_budget: int | None = None) -> Ssa:
    """The anytime search (see the module docstring); ``starts`` gives the starting paths
    (default: greedy, chain DP, ``auto`` where cheap); ``reconfigure_budget`` bounds the
    subtrees reconfiguration re-solves, and then only the best tree is polished (None: no
    bound, the best ``KEEP`` trees; past ``RECONFIGURE_MAX_N`` operands without a time
    budget, reconfiguration only runs with a bound)."""
    begin = time.perf_counter()
    deadline = None if opts.max_time is None else begin + opts.max_time
    repeats = opts.max_repeats
    if repeats is None:
        repeats = DEFAULT_REPEATS if deadline is None else sys.maxsize
    n = len(net.reduced)
    graph = Graph(net)
    best = _Best(net, opts, graph, 1 if reconfigure_budget is not None else KEEP)
    for path in (starts or (lambda: _default_starts(net, opts, graph)))():
        best.offer(path)
    rng = random.Random(opts.seed)
    search_end = None if deadline is None else begin + (1 - RECONFIGURE_SHARE) * opts.max_time
    kahypar = kahypar_module() is not None
    tuned: list = []  # (log flops, params) of the best partition trial

    memo: dict = {}  # reconfiguration's frontier groups -> best tree (shared by all trees)
    polish_trials = deadline is not None and opts.reconfigure_leaves >= 3 \
        and n <= RECONFIGURE_MAX_N

    def offer_trial(path: Ssa | None, end: float | None) -> None:
        """Offer a trial's tree; under a time budget, one within ``POLISH_WITHIN`` of the best
        is first polished by reconfiguration (raw trees rarely beat a polished best)."""
        best.offer(path)
        if path is None or not polish_trials or not best.logs:
            return
        cost = log_costs(graph.legs, graph.out, graph.logsize, path)[0]
        if cost <= min(best.logs)[0] + math.log(POLISH_WITHIN):
            best.offer(reconfigure(net, path, opts, memo, end))

    def trial(k: int, end: float | None) -> None:
        if n >= PARTITION_MIN_N and k % (2 if kahypar else 3) == (0 if kahypar else 1):
            params = draw_params(rng, kahypar)
            if tuned and k >= 12 and rng.random() < 0.5:
                params = perturb_params(tuned[1], rng, kahypar)
            path = partition_ssa(net, opts, rng, graph, deadline=end, params=params)
            if path is not None:
                cost = log_costs(graph.legs, graph.out, graph.logsize, path)[0]
                if not tuned or cost < tuned[0]:
                    tuned[:] = [cost, params]
            offer_trial(path, end)
        else:
            costmod = rng.uniform(0.1, 4.0)
            temperature = math.exp(rng.uniform(math.log(0.001), 0.0))
            limit = best.log_flops()
            if limit is not None and polish_trials:  # a tree polishing may bring under it
                limit += math.log(POLISH_WITHIN)
            offer_trial(random_greedy_ssa(net, opts, rng, costmod, temperature, graph, limit),
                        end)

    done = 0
    old = sys.getrecursionlimit()  # reconfiguration recurses along the tree's depth
    sys.setrecursionlimit(max(old, 4 * n + 200))
    try:
        for done in range(repeats):
            if search_end is not None and time.perf_counter() > search_end:
                break
            trial(done, search_end)
    finally:
        sys.setrecursionlimit(old)
    if not best.found:
        raise NoPathError(f"no pairwise path keeps every intermediate within "
                          f"memory_limit={opts.memory_limit} elements")
    bounded = reconfigure_budget is not None or deadline is not None
    if opts.reconfigure_leaves >= 3 and (n <= RECONFIGURE_MAX_N or bounded):
        old = sys.getrecursionlimit()  # reconfiguration recurses along the tree's depth
        sys.setrecursionlimit(max(old, 4 * n + 200))
        try:
            polished: set[tuple] = set()

            def polish(path: Ssa) -> None:
                polished.add(tuple(path))
                best.offer(reconfigure(net, path, opts, memo, deadline, reconfigure_budget))

            for _, _, path, _ in best.found[:1] if reconfigure_budget is not None \
                    else list(best.found):
                if deadline is not None and time.perf_counter() > deadline:
                    break
                polish(path)
            # time left (a time budget only): more trials, each new best tree polished
            while deadline is not None and time.perf_counter() < deadline:
                done += 1
                trial(done, deadline)
                if tuple(best.found[0][2]) not in polished:
                    polish(best.found[0][2])
        finally:
            sys.setrecursionlimit(old)
    return best.best  # type: ignore[return-value]


def _default_starts(net: Network, opts: PathOptions, graph: Graph) -> list[Ssa | None]:
    from accy.contraction.greedy import score_greedy_ssa
    from accy.contraction.paths import cheap_candidates

    if len(net.reduced) <= AUTO_START_MAX_N:  # auto's path with auto's effort, not the budget's
        plain = PathOptions(**{**opts.__dict__, "max_time": None, "max_repeats": None})
        return [*cheap_candidates(net, plain), score_greedy_ssa(net, opts)]
    return [score_greedy_ssa(net, opts)]
