"""Tags: the categories the Trend Analyzer knows (docs/trend-db.md), which each format's tag rules use, and
writing every metric's tags in one block of ids."""

from __future__ import annotations

from trendconv.loading import connection, schema
from trendconv.summaries import LoadSummary

INDEX, DEFAULT, LAYER, MODULE, FUNCTION = "index", "default", "layer", "module", "function"


def write_tags(conn: connection.Connection, by_metric: dict, names: dict[int, str], rule, summary: LoadSummary) -> None:
    """Tags per metric (metrics in BY_METRIC's order, each metric's targets in first-use order, each target's
    tags in RULE's order), and every (tag, target) link, sorted."""
    tag_ids: dict[tuple[str, str, int], int] = {}
    links = []
    earned: dict[int, list] = {}  # each target's tags, the same for every metric it has
    for metric, targets in by_metric.items():
        for target in targets:
            if target not in earned:
                earned[target] = rule(names[target])
            for tag_name, category in earned[target]:
                tag = tag_ids.setdefault((tag_name, category, metric), len(tag_ids) + 1)
                links.append((tag, target))
    conn.executemany(schema.INSERT_TAG, ((tid, *tag) for tag, tid in tag_ids.items()))
    links.sort()
    conn.executemany(schema.INSERT_TAG_TARGET, links)
    summary.tags, summary.tag_links = len(tag_ids), len(links)
