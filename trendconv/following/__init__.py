"""Following a training run: converting DATA as it is written, appending to the databases in place
(`trendconv run --follow`, docs/live.md)."""

from trendconv.following.loop import follow
from trendconv.following.summary import Batch, FollowSummary

__all__ = ["Batch", "FollowSummary", "follow"]
