"""The load stage, format-blind: a format's builder (trendconv.formats) fed its shards in order, and what every
builder shares: the SQLite schema text (`schema`), the connection (`connection`), building safely and publishing
atomically (`build`), inserting rows (`insert`) on a writer thread (`writer`), the read indexes (`indexes`),
sqlite_stat1 counts (`stat1`), ids (`ids`) and tags (`tags`)."""

from trendconv.loading.build import abandon, complete_build, open_build, prepare_build, publish, publish_all, writes_db
from trendconv.loading.insert import clean_values, insert_trend
from trendconv.loading.stage import Feeder, stage_shards

__all__ = [
    "Feeder",
    "abandon",
    "clean_values",
    "complete_build",
    "insert_trend",
    "open_build",
    "prepare_build",
    "publish",
    "publish_all",
    "stage_shards",
    "writes_db",
]
