"""Tags of a target name (docs/dump-format.md §8.7, docs/monitor-format.md §9): the filters the Trend Analyzer
offers."""

from __future__ import annotations

INDEX, DEFAULT, LAYER, MODULE, FUNCTION = "index", "default", "layer", "module", "function"
_MODULE_MARKERS = ("Module", "Cell")


def tags_of(target_name: str) -> list[tuple[str, str]]:
    """(tag_name, category) pairs in rule order, without repeats; empty when the name earns none."""
    parts = target_name.split(".")
    if len(parts) < 3:
        return []
    tags = [(parts[-2] + "." + parts[-1], INDEX)]
    if "parameters" in parts:
        tags.append(("parameters", DEFAULT))
    body, is_module = [], False
    for part in parts[:-2]:
        if part in _MODULE_MARKERS:
            tags.append((part, DEFAULT))
            is_module = True
        else:
            body.append(part)
    if not body:
        return []
    if not is_module:
        tags.append((".".join(body), FUNCTION))
    else:
        tags.extend(_module_tags(body))
    return list(dict.fromkeys(tags))


def _module_tags(body: list[str]) -> list[tuple[str, str]]:
    """Layers are `name.<digits>` pairs; the runs of parts between them are modules."""
    tags, done = [], [-1]
    for position, part in enumerate(body):
        if not part.isdigit():
            continue
        if position - 1 not in done:
            tags.append((body[position - 1] + "." + part, LAYER))
            before = ".".join(body[done[-1] + 1 : position - 1])
            if before:
                tags.append((before, MODULE))
        done.append(position)
    if done[-1] != len(body) - 1:
        tags.append((".".join(body[done[-1] + 1 :]), MODULE))
    return tags


def monitor_tags_of(target_name: str) -> list[tuple[str, str]]:
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
