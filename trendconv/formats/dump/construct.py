"""construct.json: give every construct key a micro step (its root call) and a per-micro-step name.

Implements docs/dump-format.md §3.2-§3.4. Unlike the reference, cycles and list/object parents are reported
as data errors instead of crashing, and deep chains are resolved without recursion.
"""

from __future__ import annotations

from pathlib import Path

from trendconv import int64
from trendconv.errors import DataError, kind_of

MEGATRON_KEY = "megatron_micro_step_number"
_ROOT_PREFIXES = ("Module", "Cell", "optimizer")


def unpack_construct(obj, path: Path) -> dict:
    """The parent mapping, with the Megatron `[parent, micro_step]` form reduced to parents
    (docs/dump-format.md §3.2)."""
    if not isinstance(obj, dict):
        raise DataError(f"{path}: top level is {kind_of(obj)}, expected an object")
    if MEGATRON_KEY not in obj:
        return obj
    unpacked = {}
    for key, value in obj.items():
        if key == MEGATRON_KEY:
            continue
        if isinstance(value, list):
            if len(value) != 2:
                raise DataError(f"{path}: key {key!r}: expected [parent, micro_step], got a list of {len(value)}")
            value = value[0]
        unpacked[key] = value
    return unpacked


def parent_table(construct: dict) -> dict:
    """Pass 1: root nodes numbered in order of appearance, other non-null parents kept as they are."""
    parents, roots = {}, 0
    for key, value in construct.items():
        if value is not None:
            parents[key] = value
        elif ".backward" in key:
            parents[key] = None
        elif key.startswith(_ROOT_PREFIXES):
            parents[key] = roots
            roots += 1
    return parents


def micro_steps(construct: dict, path: Path) -> dict[str, int]:
    """Pass 2: the micro step of every construct key whose parent chain ends at an integer."""
    parents = parent_table(construct)
    resolved: dict[str, object] = {}  # chains share their tails: resolve each node once
    result = {}
    for key in construct:
        value = _resolve(key, parents, resolved, path)
        if isinstance(value, int):
            if not int64.fits(value):
                raise DataError(
                    f"{path}: key {key!r}: micro step {value} (where its parent chain ends) does not fit a 64-bit "
                    "integer"
                )
            result[key] = int(value)
    return result


def _resolve(node, parents: dict, resolved: dict, path: Path):
    chain: dict[str, None] = {}  # the nodes walked, in order; a dict, so that the cycle test is not a list scan
    while True:
        if isinstance(node, str):
            node = node.replace(".backward", ".forward").replace(".parameters_grad", ".forward")
            if node in resolved:
                node = resolved[node]
                break
        elif isinstance(node, (list, dict)):
            raise DataError(f"{path}: a parent is {kind_of(node)} ({node!r:.60}); expected a name or null")
        if not isinstance(node, str) or node not in parents:
            break
        if node in chain:
            raise DataError(f"{path}: cycle in the parent chain at key {node!r}")
        chain[node] = None
        node = parents[node]
    for visited in chain:
        resolved[visited] = node
    return node


def micro_step_count(steps: dict[str, int]) -> int:
    return max(steps.values()) + 1 if steps else 1


def renumber(steps: dict[str, int]) -> dict[str, str]:
    """docs/dump-format.md §3.4: inside each micro step, number each family's calls 0, 1, 2, ... in ordinal order."""
    families: dict[tuple[int, str], list[tuple[int, str, str, str]]] = {}
    names = {}
    for key, step in steps.items():
        numbered = _family_of(key)
        if numbered is None:
            names[key] = key  # no number: the key is its own family, ordinal 0, name unchanged
            continue
        family, ordinal, before, after = numbered
        families.setdefault((step, family), []).append((ordinal, key, before, after))
    for members in families.values():
        members.sort(key=lambda member: member[0])
        for new_index, (_, key, before, after) in enumerate(members):
            names[key] = f"{before}{new_index}{after}"
    return {key: names[key] for key in steps}


def _family_of(key: str) -> tuple[str, int, str, str] | None:
    """(family, ordinal, text before the number, text after it), or None for a key without a number.

    Module style `X.forward.7`: the last part is the number; API style `X.y.7.forward`: the second-to-last.
    """
    head, dot, last = key.rpartition(".")
    ordinal = _digits(last)
    if ordinal is not None:
        return head, ordinal, head + dot, ""
    if dot:
        front, dot2, second = head.rpartition(".")
        ordinal = _digits(second)
        if ordinal is not None:
            return front + dot2 + last, ordinal, front + dot2, dot + last
    return None


def _digits(part: str) -> int | None:
    """Python's `isdigit` + `int()`, as the reference uses them; digits int() refuses count as none."""
    if not part.isdigit():
        return None
    try:
        return int(part)
    except ValueError:
        return None
