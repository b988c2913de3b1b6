"""Tags of a dump target name (docs/dump-format.md §8.7): the filters the Trend Analyzer offers."""

from __future__ import annotations

from trendconv.loading.tags import DEFAULT, FUNCTION, INDEX, LAYER, MODULE

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
