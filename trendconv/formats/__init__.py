"""Input formats: the `Format` contract (trendconv.formats.contract), one package per format, the registry."""

from trendconv.formats.contract import Builder, Format, Scanned
from trendconv.formats.lookup import AUTO, chosen, detect, get, names
from trendconv.formats.registry import FORMATS

__all__ = ["AUTO", "FORMATS", "Builder", "Format", "Scanned", "chosen", "detect", "get", "names"]
