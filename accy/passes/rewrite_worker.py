"""Saturation in a worker process that is killed at the deadline: time limits that hold.

egglog cannot be interrupted from Python: one step of rules that start feeding each other can
run for minutes, far past any prediction the driver makes from the steps before it. So a
large program is saturated in a worker process: the parent sends it the program and the
budget, the worker builds the e-graph, saturates, and extracts at the end and at
checkpoints spaced in time (before a step predicted to be long: ``_work``), sending back the
program when it is cheaper than the best so far. The parent waits on the pipe until its
deadline; if the worker has not finished by then it is killed (SIGKILL: nothing in it needs
to be cleaned up) and the last program it sent, the last checkpoint's, is the result. A spare
worker is started in the background whenever a call takes one, so the call after a kill finds
one warm (regions of a large program come one after another, each with a few seconds).

Workers are fresh interpreters (``subprocess``, talking over a socket pair: never forked, as
the parent may hold egglog's or OpenCL's threads and locks, and not multiprocessing's
``spawn``, which runs the caller's main module again in the child, so that a script without
an ``if __name__ == "__main__":`` guard failed), import ``accy`` and every built-in rule set
once (~1.5 s), then serve one task after another, keeping the e-graphs in which rule
selections are declared (``rewriting._WARM``): a call to a warm worker costs a pickle of the
program each way (large constants as references: see below) and the usual work. A worker
that is still starting when a call's deadline comes is left to finish starting (and that call
keeps its input), so tiny time limits cannot keep killing workers that never get warm;
callers that did not ask for a worker (``rewriting``'s automatic choice) do not wait for one
to start at all (``run(wait=False)``) but saturate in their own process, since the start
would take most of a default budget and the worker would be killed with nothing done (the
first ``accy.prepare`` of Inception-v3 in a process lost its saturation so).
:func:`warm_up` starts one ahead of time (benchmarks do, to leave start-up out of their
first measurement).

What cannot go to a worker runs in the calling process (:func:`eligible`): rule sets defined
at run time (the worker only knows the built-in themes), cost models that do not pickle or
that name the caller's script (``__main__``), and
calls from a daemonic multiprocessing worker (experiment pools: many processes already).

Each message from the worker carries its peak resident memory (``ru_maxrss``), so callers
can report the worker's memory as well as their own.
"""

from __future__ import annotations

import atexit
import io
import multiprocessing as mp
import pickle
import resource
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import Any

from accy.egraph import cost
from accy.egraph.convert import LARGE_CONSTANT_BYTES, Extraction, full_value
from accy.egraph.cost import CostModel, bytes_digest
from accy.egraph.defaults import pays
from accy.egraph.driver import SaturationReport
from accy.ir.ops import Op
from accy.ir.program import Program

__all__ = ["Result", "Task", "eligible", "run", "shutdown", "warm_up"]

_MAX_IDLE = 2  # warm workers kept between calls (one per thread that saturates at a time)
# idle workers kept ready, started while a call runs: a spare is warm for the next call when
# this one is killed (a cold start takes seconds, a region's whole budget) at ~200 MiB each
_SPARES = 1
_STOP_MARGIN_S = 0.02  # the worker's own saturation limit ends this much before the deadline


@dataclass(frozen=True)
class Task:
    """One saturation and extraction: what ``rewriting`` hands the worker."""

    program: Program
    rulesets: tuple[str, ...]
    names: tuple[str, ...]
    iterations: int
    node_limit: int
    time_limit_s: float
    match_limit: int | None
    model: CostModel
    extractor: str
    extract_options: dict[str, Any]
    input_cost: int
    capped: tuple[str, ...] = ()  # multi-pattern rules, run in the first iterations only
    capped_iterations: int | None = None
    patience: int = 0  # stop (no_gain) after this many extractions in a row found no gain
    context: Any = None  # a region's context (accy.egraph.split.Context), or None


@dataclass
class Result:
    """What came back before the deadline: the cheapest extraction the worker sent (None when
    none beat the input), the last report, and how the call ended."""

    extraction: Extraction | None = None
    report: SaturationReport | None = None
    killed: bool = False  # the deadline came first: the worker was killed
    not_ready: bool = False  # the deadline came before a worker had started
    worker_maxrss_kb: int = 0  # the worker's peak resident memory, as it last said
    seconds: float = 0.0
    messages: int = field(default=0, compare=False)


# what the worker's interpreter runs: the parent's import path first, then the loop
_BOOT = ("import sys\n"
         "from multiprocessing.connection import Connection\n"
         "conn = Connection(int(sys.argv[1]))\n"
         "sys.path[:] = conn.recv()\n"
         "from accy.passes.rewrite_worker import _serve\n"
         "_serve(conn)\n")


class _Worker:
    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        self.conn = Connection(ours.detach())
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", _BOOT, str(theirs.fileno())],
                                         pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self.conn.send(list(sys.path))
        self.ready = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, deadline: float) -> bool:
        while not self.ready:
            left = deadline - time.perf_counter()
            if left <= 0 or not self.conn.poll(left):
                return False
            msg = self.conn.recv()
            self.ready = msg[0] == "ready"
        return True

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.conn.close()


_LOCK = threading.Lock()
_IDLE: list[_Worker] = []


def _take() -> _Worker:
    """An idle worker, a ready one first (else one still starting, else a new one)."""
    with _LOCK:
        for w in [w for w in _IDLE if not w.alive()]:
            _IDLE.remove(w)
            w.kill()
        for w in _IDLE:
            while not w.ready and w.conn.poll(0):  # started since: read its message
                w.ready = w.conn.recv()[0] == "ready"
        if _IDLE:
            w = max(_IDLE, key=lambda w: w.ready)
            _IDLE.remove(w)
            return w
    return _Worker()


def _give_back(w: _Worker) -> None:
    with _LOCK:
        if len(_IDLE) < _MAX_IDLE and w.alive():
            _IDLE.append(w)
            return
    w.kill()


def warm_up() -> None:
    """Start ``_SPARES`` workers now (those not idle already) and wait until they have
    imported everything."""
    _prestart()
    with _LOCK:
        idle = list(_IDLE)
    for w in idle:
        w.wait_ready(time.perf_counter() + 120.0)


def _prestart() -> None:
    """Start workers in the background (their imports run while the caller goes on) until
    ``_SPARES`` are idle."""
    with _LOCK:
        missing = _SPARES - len(_IDLE)
    for _ in range(missing):
        _give_back(_Worker())


def shutdown() -> None:
    """Kill every idle worker (tests, and at the interpreter's exit; a worker whose parent
    died without it ends when its pipe closes)."""
    with _LOCK:
        idle, _IDLE[:] = list(_IDLE), []
    for w in idle:
        w.kill()


atexit.register(shutdown)


def eligible(task_model: CostModel, rulesets: tuple[str, ...]) -> bool:
    """Whether a worker can run this call (module docstring)."""
    import rewrites

    if mp.current_process().daemon:
        return False
    if any(rewrites.THEMES.get(n) is None for n in rulesets):
        return False
    try:
        data = pickle.dumps(task_model)
    except Exception:  # noqa: BLE001 - any pickling failure means: not in a worker
        return False
    # a class or function of the caller's script pickles by reference to __main__, which
    # the worker's interpreter does not import
    return b"__main__" not in data


def run(task: Task, deadline: float, wait: bool = True) -> Result:
    """Run ``task`` in a worker until it finishes or ``deadline`` (``time.perf_counter()``)
    comes; see the module docstring. Errors raised in the worker are raised here. Without
    ``wait``, a call that finds no worker ready returns at once (``not_ready``) instead of
    waiting for one to start."""
    start = time.perf_counter()
    out = Result()
    w = _take()
    _prestart()  # a spare starts now, so that it is warm if this one is killed
    if not w.wait_ready(deadline if wait else start):
        _give_back(w)  # still starting: let it finish for the next call
        out.not_ready = True
        out.seconds = time.perf_counter() - start
        return out
    budget = max(deadline - time.perf_counter() - _STOP_MARGIN_S, 1e-6)
    refs = _by_reference(task)
    w.conn.send_bytes(_dumps(replace(task, time_limit_s=min(task.time_limit_s, budget)),
                             lambda b: refs[id(b)][0] if id(b) in refs else None))
    by_key = dict(refs.values())
    while True:
        left = deadline - time.perf_counter()
        try:
            if left <= 0 or not w.conn.poll(left):
                raise TimeoutError
            kind, payload, maxrss = _loads(w.conn.recv_bytes(), lambda key, size: by_key[key])
        except (TimeoutError, EOFError, ConnectionError):
            w.kill()  # at the deadline (or it died): the last good iteration stands
            out.killed = True
            if out.report is not None:
                out.report = replace(out.report, stop_reason="time_limit", predicted=False,
                                     seconds=time.perf_counter() - start)
            break
        out.messages += 1
        out.worker_maxrss_kb = max(out.worker_maxrss_kb, maxrss)
        if kind == "step":
            report, extraction = payload
            out.report = report
            if extraction is not None:
                out.extraction = extraction
        elif kind == "done":
            out.report = payload
            _give_back(w)
            break
        else:  # "error": the worker dropped its e-graph and serves on
            _give_back(w)
            raise payload
    out.seconds = time.perf_counter() - start
    return out


# ---- large constants by reference -------------------------------------------------------------
# The worker's e-graph holds a program's large constants (model weights) by reference anyway
# (``convert.LARGE_CONSTANT_BYTES``: no rule reads their values), so their bytes need not
# travel: the parent pickles each as a reference (the digest that names it in e-graphs and
# extraction, ``cost.bytes_digest``), the worker unpickles a stand-in of the same size
# (``cost.STAND_IN_MAGIC``, the digest, then zeros: never uniform, so it too enters the
# e-graph by reference) that is named by that digest, so it saturates and extracts exactly as
# the parent would, and pickles every stand-in back as its reference, which the parent
# resolves to the original bytes. The worker recognises stand-ins by their bytes, not by
# object: one left from an earlier task (a node interned then, an equal one unpickled now)
# must travel back as a reference too, or its zeros would replace the weights. Shipping the
# bytes cost a pickle each way: with 256 MB of weights no first extraction fitted a 2 s
# budget, so a warm worker returned the program unoptimized where an in-process run (a fresh
# process's first) optimized it.


def _by_reference(task: Task) -> dict[int, tuple[str, bytes]]:
    """The bytes that travel as references, by ``id``, with their reference keys: values of
    the large, non-uniform constants of the task's programs and of its cost model's allowed
    constants (``rewriting.CappedConstants``)."""
    programs = [task.program] + ([task.context.program] if task.context is not None else [])
    pairs = [(n.type, n.attr("value")) for p in programs for n in p.nodes()
             if n.op is Op.CONSTANT]
    pairs += list(getattr(task.model, "allowed", ()))
    out: dict[int, tuple[str, bytes]] = {}
    for t, data in pairs:
        if (id(data) not in out and len(data) > LARGE_CONSTANT_BYTES
                and full_value(t, data) is None):
            out[id(data)] = (bytes_digest(data), data)
    return out


class _Pickler(pickle.Pickler):
    def __init__(self, file: Any, reference: Any) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.reference = reference  # bytes -> its reference key, or None

    def persistent_id(self, obj: Any) -> Any:
        if type(obj) is bytes and (key := self.reference(obj)) is not None:
            return (key, len(obj))
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: Any, resolve: Any) -> None:
        super().__init__(file)
        self.resolve = resolve  # (key, size) -> bytes

    def persistent_load(self, pid: Any) -> bytes:
        return self.resolve(*pid)


def _dumps(obj: Any, reference: Any) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, reference).dump(obj)
    return buf.getvalue()


def _loads(data: bytes, resolve: Any) -> Any:
    return _Unpickler(io.BytesIO(data), resolve).load()


class _StandIns(dict):
    """The worker's stand-ins for one message's references: one per digest."""

    def __call__(self, key: str, size: int) -> bytes:
        if key not in self:
            head = cost.STAND_IN_MAGIC + key.encode()
            self[key] = head + bytes(size - len(head))
        return self[key]


# ---- the worker's side -------------------------------------------------------------------------


def _maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _serve(conn: Any) -> None:
    """The worker's loop: import once, then run tasks until the pipe closes."""
    import rewrites
    from accy.passes import rewriting

    rewrites.load()
    cost.STAND_INS = True
    conn.send(("ready", None, _maxrss()))
    send = _Sender(conn)
    while True:
        try:
            task = _loads(conn.recv_bytes(), _StandIns())
        except (EOFError, OSError):
            return
        try:
            out = ("done", _work(task, send, rewriting), _maxrss())
        except (BrokenPipeError, ConnectionResetError):
            return  # the parent is gone
        except BaseException as e:  # noqa: BLE001 - sent to the parent, raised there
            try:
                pickle.dumps(e)
            except Exception:  # noqa: BLE001
                from accy.errors import EGraphError

                e = EGraphError(f"{type(e).__name__}: {e}")
            out = ("error", e, _maxrss())
        try:
            send.send(out)
        except OSError:
            return


class _Sender:
    """The worker's messages to the parent, its stand-ins pickled back as references."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def send(self, message: Any) -> None:
        self.conn.send_bytes(_dumps(message, cost.stand_in_digest))


# first guess of extraction's cost (reading the e-graph, greedy-dag, acceptance by region,
# rebuilding), until one is measured: ~1.5e-5 s per e-node measured on a loaded 2-core machine
EXTRACT_S_PER_E_NODE = 4e-5
_CHECKPOINT_SPACING = 0.3  # of the time limit: the least time between two checkpoints
_CHEAP_SHARE = 0.1  # an extraction predicted within this share of the time left is cheap
_CHECKPOINT_EXTRACT_SHARE = 0.25  # of the time left: what a checkpoint's acceptance may take
# the final extraction's bounded parts end this share of the time limit (at least this many
# seconds) before the deadline: building, pickling and sending the program come after them
_FINISH_SHARE = 0.05
_FINISH_MIN_S = 0.05


def guard(report: SaturationReport, deadline: float, rate: float = EXTRACT_S_PER_E_NODE
          ) -> tuple[bool, bool]:
    """(go on, extract first) after a kept step: stop when the next step (the last one's time
    scaled by its growth, at most 16x) and the extraction after it (``rate`` seconds per
    e-node) would end past ``deadline``; extract before a step predicted to cost more than
    an extraction now. Used by the worker and by in-process runs alike."""
    its = [it for it in report.iterations if it.kept]
    last = its[-1]
    growth = last.e_nodes / max(its[-2].e_nodes if len(its) > 1 else report.initial_e_nodes, 1)
    factor = min(max(1.0, growth), 16.0)
    next_step = last.seconds * factor
    now_extract = rate * report.e_nodes
    if time.perf_counter() + next_step + now_extract * factor > deadline:
        return False, True
    return True, next_step > now_extract


def _work(task: Task, conn: Any, rewriting: Any) -> SaturationReport:
    """Saturate and extract ``task``, sending every improving extraction as it comes.

    Extraction does not follow every step: it runs at the end, and as a checkpoint (what a
    kill leaves) at a kept step when the last extraction (or the start) is at least
    ``_CHECKPOINT_SPACING`` of the time limit ago and either the next step is predicted to
    cost more than an extraction now or the extraction is cheap (predicted within
    ``_CHEAP_SHARE`` of the time left); the first cheap one comes at once, since one step
    of fast-math rules can run for minutes unpredicted. The run stops before a step whose
    predicted time plus the extraction after it would end past the deadline (extraction time
    scales with the e-graph: seconds per e-node as last measured, and asked again right after
    an extraction has measured it); acceptance by region stops at the deadline. An extraction
    predicted to end past the deadline is not started (the last checkpoint stands): a worker
    that finishes stays warm for the next call, a killed one does not. With
    ``task.patience``, the run stops (``no_gain``) after a checkpoint when that many
    extractions in a row found nothing cheaper than the best so far.
    """
    from accy.egraph.convert import add_context, extract, to_egraph
    from accy.egraph.driver import saturate

    start = time.perf_counter()
    deadline = start + task.time_limit_s
    finish = deadline - max(_FINISH_SHARE * task.time_limit_s, _FINISH_MIN_S)
    eg, quiet = rewriting._WARM.take(
        task.rulesets, task.names,
        [task.program] + ([task.context.program] if task.context is not None else []))
    eg.push()
    peg = to_egraph(task.program, eg)
    if task.context is not None:
        add_context(peg, task.context)
    best = task.input_cost
    rate = fixed_rate = EXTRACT_S_PER_E_NODE  # extraction, and its part no deadline bounds
    # (e-nodes, e-classes) last extracted: a step that changed neither left the same e-graph
    done_at: tuple[int, int] | None = None
    last = start  # when the last extraction ended
    stale = 0  # extractions in a row that found nothing cheaper than the best so far

    def extract_now(report: SaturationReport, final: bool = False, checkpoint: bool = False
                    ) -> None:
        nonlocal best, rate, fixed_rate, done_at, last, stale
        t0 = time.perf_counter()
        # the bounded parts (acceptance, sharing) leave time to build and send the program;
        # a checkpoint's take a share of the time left, so saturation goes on after it
        ends = t0 + _CHECKPOINT_EXTRACT_SHARE * max(finish - t0, 0.0) if checkpoint else finish
        x = extract(peg, task.model, extractor=task.extractor, input_cost=task.input_cost,
                    options=dict(task.extract_options), deadline=ends)
        last = time.perf_counter()
        rate = (last - t0) / max(report.e_nodes, 1)
        fixed_rate = (last - t0 - x.search_seconds) / max(report.e_nodes, 1)
        done_at = (report.e_nodes, report.e_classes)
        # ties go to the later extraction; the final one stands as the in-process run's does
        better = x.cost <= (task.input_cost if final else best)
        stale = 0 if pays(x.cost, best) or not pays(best, task.input_cost) else stale + 1
        if better:
            best = x.cost
        conn.send(("step", (report, x if better else None), _maxrss()))

    def fits(report: SaturationReport) -> bool:
        """Whether the part of an extraction now that no deadline bounds (reading the
        e-graph, choosing, rebuilding) is predicted to end in time (the first is tried
        anyway: there is nothing to lose)."""
        return done_at is None or time.perf_counter() + fixed_rate * report.e_nodes <= finish

    def on_step(report: SaturationReport) -> bool | str:
        go_on, risky = guard(report, deadline, rate)
        now = time.perf_counter()
        spaced = now - last >= _CHECKPOINT_SPACING * task.time_limit_s
        cheap = rate * report.e_nodes <= _CHEAP_SHARE * (deadline - now)
        if fits(report) and (not go_on or (cheap and (done_at is None or spaced))
                             or (risky and spaced)):
            extract_now(report, checkpoint=go_on)
            go_on = go_on and guard(report, deadline, rate)[0]  # with the rate just measured
            if go_on and task.patience and stale >= task.patience:
                return "no_gain"
        return go_on

    report = saturate(peg, task.rulesets, rules=task.names, iterations=task.iterations,
                      node_limit=task.node_limit, time_limit_s=task.time_limit_s,
                      match_limit=task.match_limit, on_step=on_step, capped=task.capped,
                      capped_iterations=task.capped_iterations,
                      restore=lambda: rewriting.reload(task.program, eg, task.context),
                      dormant=quiet)
    if done_at != (report.e_nodes, report.e_classes) and fits(report):
        extract_now(report, final=True)
    for _ in range(report.checkpoints + 1):  # the driver's checkpoints, then ours
        eg.pop()
    rewriting._WARM.give_back(task.rulesets, eg)
    return report
