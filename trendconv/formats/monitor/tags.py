"""Tags of a monitor target name (docs/monitor-format.md §9): the filters the Trend Analyzer offers."""

from __future__ import annotations

from trendconv.loading.tags import LAYER, MODULE


def tags_of(target_name: str) -> list[tuple[str, str]]:
    """Tags of a monitor target (docs/monitor-format.md §9), walking the parts from last to first, without repeats.

    A word is a module tag; a number is a layer tag together with the word before it.
    """
    parts = target_name.split(".")
    tags = []
    for position in range(len(parts) - 1, -1, -1):
        part = parts[position]
        if not part.isdigit():
            tags.append((part, MODULE))
        elif position > 0 and not parts[position - 1].isdigit():
            tags.append((f"{parts[position - 1]}.{part}", LAYER))
    return list(dict.fromkeys(tags))
