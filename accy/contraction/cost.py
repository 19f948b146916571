"""accy's cost units for contraction paths, path forms, and the evaluation of any path.

Units, stated once (everything in :mod:`accy.contraction` counts in these):

* **FLOPs of a step.** A step contracts ``k`` operands (``k == 2`` for every path accy's
  strategies return) over the union ``U`` of their letters; it costs
  ``(k - 1 + s) * prod(size[l] for l in U)`` where ``s`` is 1 when the step sums a letter
  away and 0 otherwise. For a pairwise step that is **2 x the product of all sizes involved
  when something is summed, else the product** (a plain outer or elementwise product); for a
  single operand it is the operand's size when it sums a letter and 0 when it only reorders.
* **Operand-local reductions.** A letter found in exactly one operand and not in the output
  is summed inside that operand before any pairwise step (what ``einsum-lowering`` does with
  ``reduce_sum``); it costs the operand's size, once, and is included in every path's FLOPs.
  Repeated letters within one operand (diagonals) are free views.
* **Size** of an intermediate: its number of elements. ``size`` of a path is its largest
  intermediate (the final result included); ``write`` is the sum over all intermediates.
* **Memory limit:** the largest intermediate allowed, in elements.
* **Objectives** ``flops``, ``size``, ``write`` pick the primary figure a search minimizes;
  ties on it are broken by the secondary figure (``write`` for ``flops``, ``flops`` for the
  others), see :meth:`PathCost.key`.

Paths come in two forms. **Linear** (opt_einsum's): each step lists positions in the current
operand list; those operands are removed and the result is appended at the end. **SSA**:
inputs are ids ``0..n-1`` and step ``j`` creates id ``n + j``; a step names the ids it
consumes. :func:`ssa_to_linear` and :func:`linear_to_ssa` convert; both check the path.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from accy.errors import AccyError

Objective = Literal["flops", "size", "write"]
OBJECTIVES: tuple[Objective, ...] = ("flops", "size", "write")
Path = list[tuple[int, ...]]
Indices = str | Collection[str]


class ContractionError(AccyError, ValueError):
    """A contraction problem, option or path is malformed, or no path satisfies the limits."""


@dataclass(frozen=True)
class PathCost:
    """What a path costs in accy's units (see the module docstring)."""

    flops: int
    size: int  # largest intermediate, in elements
    write: int  # elements written by all steps together

    def key(self, objective: Objective = "flops") -> tuple[int, int]:
        """(primary, secondary) figure for ``objective``: smaller is better."""
        if objective == "flops":
            return self.flops, self.write
        if objective == "size":
            return self.size, self.flops
        if objective == "write":
            return self.write, self.flops
        raise ContractionError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")


# ---- the canonical form of a problem -------------------------------------------------------


class Sizer(dict[int, int]):
    """``sizer[mask]``: the product of the sizes of the letters in a bitmask (exact integers,
    computed once per mask: a dict whose misses fill themselves in)."""

    def __init__(self, sizes: Sequence[int]) -> None:
        super().__init__({0: 1})
        self._tables: list[list[int]] = []
        for start in range(0, len(sizes), 8):
            chunk = sizes[start:start + 8]
            table = [1] * (1 << len(chunk))
            for b in range(1, len(table)):
                low = (b & -b).bit_length() - 1
                table[b] = table[b & (b - 1)] * chunk[low]
            self._tables.append(table)

    def __missing__(self, mask: int) -> int:
        value, rest, chunk = 1, mask, 0
        while rest:
            value *= self._tables[chunk][rest & 0xFF]
            rest >>= 8
            chunk += 1
        self[mask] = value
        return value


@dataclass(frozen=True)
class Network:
    """A validated contraction problem with letters as bits (letters sorted, bit i = letters[i]).

    ``operands`` are the operands' letter masks as given; ``local`` the letters summed inside
    one operand (in one operand only, not in the output); ``reduced`` the operand masks after
    those local reductions, which is what the pairwise steps see.
    """

    letters: tuple[str, ...]
    sizes: tuple[int, ...]
    operands: tuple[int, ...]
    output: int
    local: int
    reduced: tuple[int, ...]
    size: Sizer

    def mask(self, letters: Iterable[str]) -> int:
        index = {c: i for i, c in enumerate(self.letters)}
        out = 0
        for c in letters:
            out |= 1 << index[c]
        return out

    def holders(self) -> list[int]:
        """For each letter, the bitmask of the operands holding it (after local reductions)."""
        out = [0] * len(self.letters)
        for i, m in enumerate(self.reduced):
            for bit in bits(m):
                out[bit] |= 1 << i
        return out

    def local_cost(self) -> tuple[int, int, int]:
        """(flops, largest, written) of the operand-local reductions done before the path."""
        flops = largest = written = 0
        for full, reduced in zip(self.operands, self.reduced, strict=True):
            if full != reduced:
                flops += self.size[full]
                largest = max(largest, self.size[reduced])
                written += self.size[reduced]
        return flops, largest, written


def _letters(term: Indices, what: str) -> list[str]:
    if isinstance(term, str):
        return list(term)
    if isinstance(term, Collection):
        bad = [c for c in term if not isinstance(c, str)]
        if bad:
            raise ContractionError(f"{what} has letters that are not strings: {bad[:3]}")
        return sorted(term)
    raise ContractionError(f"{what} must be a string or a set of letters, "
                           f"got {type(term).__name__}")


def network(inputs: Sequence[Indices], output: Indices, size_dict: Mapping[str, int]) -> Network:
    """Check a problem ``(inputs, output, size_dict)`` and put it in canonical form.

    Raises :class:`ContractionError` for no operands, an output letter in no input, a repeated
    output letter, or a letter without a valid size.
    """
    if isinstance(inputs, str) or not isinstance(inputs, Sequence):
        raise ContractionError("inputs must be a sequence of index terms (one per operand), got "
                               f"{type(inputs).__name__}")
    if not inputs:
        raise ContractionError("a contraction needs at least one operand")
    terms = [_letters(t, f"operand {i}") for i, t in enumerate(inputs)]
    out = _letters(output, "the output")
    if len(set(out)) != len(out):
        raise ContractionError(f"output {''.join(out)!r} repeats a letter")
    seen = {c for t in terms for c in t}
    missing = [c for c in out if c not in seen]
    if missing:
        raise ContractionError(f"output letters {missing} appear in no input")
    for c in sorted(seen):
        size = size_dict.get(c) if isinstance(size_dict, Mapping) else None
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ContractionError(f"letter {c!r} needs a size (a non-negative int) in size_dict, "
                                   f"got {size!r}")
    letters = tuple(sorted(seen))
    sizes = tuple(int(size_dict[c]) for c in letters)
    index = {c: i for i, c in enumerate(letters)}
    masks = tuple(sum(1 << index[c] for c in set(t)) for t in terms)
    out_mask = sum(1 << index[c] for c in out)
    once = twice = 0
    for m in masks:
        twice |= once & m
        once |= m
    local = once & ~twice & ~out_mask
    reduced = tuple(m & ~local for m in masks)
    return Network(letters, sizes, masks, out_mask, local, reduced, Sizer(sizes))


def sizes_from_shapes(terms: Sequence[str], shapes: Sequence[Sequence[int]]) -> dict[str, int]:
    """The size of every letter of ``terms`` from the operand ``shapes``.

    >>> sizes_from_shapes(["ij", "jk"], [(2, 3), (3, 4)])
    {'i': 2, 'j': 3, 'k': 4}

    Raises :class:`ContractionError` when a term's length differs from its operand's rank or a
    letter has two sizes (no size-1 broadcasting: accy's einsum needs equal sizes).
    """
    if len(terms) != len(shapes):
        raise ContractionError(f"{len(terms)} terms for {len(shapes)} operand shapes")
    sizes: dict[str, int] = {}
    where: dict[str, int] = {}
    for i, (term, shape) in enumerate(zip(terms, shapes, strict=True)):
        if len(term) != len(shape):
            raise ContractionError(f"term {term!r} has {len(term)} letters but operand {i} has "
                                   f"shape {list(shape)}")
        for c, d in zip(term, shape, strict=True):
            if c in sizes and sizes[c] != d:
                raise ContractionError(f"inconsistent sizes for letter {c!r}: {sizes[c]} in "
                                       f"operand {where[c]} and {d} in operand {i}")
            sizes.setdefault(c, int(d))
            where.setdefault(c, i)
    return sizes


def is_index_symbol(c: str) -> bool:
    """Whether ``c`` may name an index in a spec: an ASCII letter, or any non-ASCII character
    (opt_einsum's :func:`opt_einsum.get_symbol` numbers indices past the 52 letters with
    ``chr(i + 140)`` and up, which includes non-letters such as ``'×'``, unassigned code
    points such as ``'\u0378'`` and even a few non-ASCII spaces), so a spec can hold any
    number of indices. The separators ``,``, ``->`` and the spaces removed are ASCII."""
    return c.isalpha() if c.isascii() else True


def parse_spec(spec: str) -> tuple[list[str], str]:
    """Split ``"ij,jk->ik"`` into terms and output (implicit output: letters seen once, sorted).

    >>> parse_spec("ij,jk")
    (['ij', 'jk'], 'ik')
    """
    if not isinstance(spec, str):
        raise ContractionError(f"an einsum spec is a string, got {type(spec).__name__}")
    text = spec.replace(" ", "")
    if "..." in text:
        raise ContractionError(f"spec {spec!r}: ellipsis is not supported; spell letters out")
    lhs, arrow, out = text.partition("->")
    terms = lhs.split(",")
    for t in [*terms, out]:
        if any(not is_index_symbol(c) for c in t):
            raise ContractionError(f"spec {spec!r}: term {t!r} has characters that are not "
                                   f"index symbols (letters, or opt_einsum.get_symbol's)")
    if not arrow:
        letters = "".join(terms)
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return terms, out


# ---- path forms ----------------------------------------------------------------------------


def _steps(path: Iterable[Sequence[int]]) -> list[tuple[int, ...]]:
    try:
        steps = [tuple(step) for step in path]
    except TypeError:
        raise ContractionError("a path is a sequence of tuples of operand positions") from None
    for j, step in enumerate(steps):
        if not step or any(isinstance(p, bool) or not isinstance(p, int) for p in step):
            raise ContractionError(f"bad path: step {j} {step!r} must be a non-empty tuple of ints")
        if len(set(step)) != len(step):
            raise ContractionError(f"bad path: step {j} {step!r} names an operand twice")
    return steps


def linear_to_ssa(path: Iterable[Sequence[int]], n: int | None = None) -> Path:
    """The SSA form of a linear path (checked when ``n``, the operand count, is given).

    >>> linear_to_ssa([(1, 2), (0, 1)])
    [(1, 2), (0, 3)]
    """
    steps = _steps(path)
    if n is None:
        n = sum(len(s) for s in steps) - len(steps) + 1
    live = list(range(n))
    fresh = n
    out: Path = []
    for j, step in enumerate(steps):
        bad = [p for p in step if not 0 <= p < len(live)]
        if bad:
            raise ContractionError(f"bad path: step {j} {step} names position(s) {bad} but only "
                                   f"{len(live)} operands remain")
        out.append(tuple(live[p] for p in step))
        for p in sorted(step, reverse=True):
            del live[p]
        live.append(fresh)
        fresh += 1
    if len(live) != 1:
        raise ContractionError(f"bad path: it leaves {len(live)} operands uncontracted")
    return out


def ssa_to_linear(path: Iterable[Sequence[int]], n: int | None = None) -> Path:
    """The linear form of an SSA path (checked when ``n``, the operand count, is given).

    >>> ssa_to_linear([(1, 2), (0, 3)])
    [(1, 2), (0, 1)]
    """
    steps = _steps(path)
    if n is None:
        n = sum(len(s) for s in steps) - len(steps) + 1
    live = list(range(n))  # sorted ids; position of an id = its index here
    out: Path = []
    for j, step in enumerate(steps):
        positions = []
        for sid in step:
            pos = _find(live, sid)
            if pos < 0:
                state = "already consumed" if sid < n + j else "not created yet"
                raise ContractionError(f"bad path: step {j} {step} names SSA id {sid}, {state}")
            positions.append(pos)
        out.append(tuple(positions))
        for pos in sorted(positions, reverse=True):
            del live[pos]
        live.append(n + j)
    if len(live) != 1:
        raise ContractionError(f"bad path: it leaves {len(live)} operands uncontracted")
    return out


def _find(sorted_ids: list[int], sid: int) -> int:
    lo, hi = 0, len(sorted_ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if sorted_ids[mid] < sid:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < len(sorted_ids) and sorted_ids[lo] == sid else -1


def tree_to_ssa(tree: object, n: int) -> list[tuple[int, ...]]:
    """The SSA path of a tree of nested pairs over operand ids (children first, left first).

    >>> tree_to_ssa(((0, 1), 2), 3)
    [(0, 1), (2, 3)]
    """
    path: list[tuple[int, ...]] = []
    ids: list[int] = []
    stack: list[tuple[object, bool]] = [(tree, False)]
    while stack:  # no recursion: trees of long chains are deep
        t, expanded = stack.pop()
        if isinstance(t, int):
            ids.append(t)
        elif expanded:
            right, left = ids.pop(), ids.pop()
            path.append((min(left, right), max(left, right)))
            ids.append(n + len(path) - 1)
        else:
            stack += [(t, True), (t[1], False), (t[0], False)]  # type: ignore[index]
    return path


def naive_path(n: int) -> Path:
    """The left-to-right path ``((x0 x1) x2) x3 ...`` in linear form ([(0,)] for one operand)."""
    if n < 1:
        raise ContractionError("a contraction needs at least one operand")
    if n == 1:
        return [(0,)]
    return ssa_to_linear([(0, 1)] + [(n + j - 1, j + 1) for j in range(1, n - 1)], n)


# ---- evaluating a path ---------------------------------------------------------------------


def ssa_cost(net: Network, ssa: Sequence[tuple[int, ...]]) -> PathCost:
    """Cost of a checked SSA path over ``net`` (local reductions included)."""
    flops, largest, written = net.local_cost()
    tensors = dict(enumerate(net.reduced))
    counts: dict[int, int] = {}
    for m in tensors.values():
        for bit in bits(m):
            counts[bit] = counts.get(bit, 0) + 1
    fresh = len(net.reduced)
    for step in ssa:
        masks = [tensors.pop(s) for s in step]
        union = 0
        for m in masks:
            union |= m
            for bit in bits(m):
                counts[bit] -= 1
        kept = union & (net.output | sum(1 << b for b in bits(union) if counts[b] > 0))
        for bit in bits(kept):
            counts[bit] += 1
        summed = 1 if union & ~kept else 0
        flops += (len(masks) - 1 + summed) * net.size[union]
        result = net.size[kept]
        largest = max(largest, result)
        written += result
        tensors[fresh] = kept
        fresh += 1
    if len(net.reduced) == 1 and not ssa:  # a lone operand is its own result
        largest = max(largest, net.size[net.reduced[0]])
    return PathCost(flops, largest, written)


def bits(mask: int) -> list[int]:
    """Positions of the set bits of ``mask``, lowest first."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def path_cost(
    inputs: Sequence[Indices],
    output: Indices,
    size_dict: Mapping[str, int],
    path: Iterable[Sequence[int]],
    form: Literal["linear", "ssa"] = "linear",
) -> PathCost:
    """Evaluate any path (pairwise or not) in accy's units.

    >>> path_cost(["ij", "jk", "kl"], "il", {"i": 2, "j": 3, "k": 4, "l": 5}, [(0, 1), (0, 1)])
    PathCost(flops=128, size=10, write=18)
    """
    net = network(inputs, output, size_dict)
    if form == "linear":
        ssa = linear_to_ssa(path, len(net.operands))
    elif form == "ssa":
        ssa = linear_to_ssa(ssa_to_linear(path, len(net.operands)), len(net.operands))
    else:
        raise ContractionError(f"unknown path form {form!r}; valid: 'linear', 'ssa'")
    return ssa_cost(net, ssa)
