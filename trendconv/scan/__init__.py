"""What every format's scan shares: looking at DATA's directories, where one that cannot be read is a data error
(each format's own scan is in its package, trendconv.formats.<name>.scan)."""

from trendconv.scan.fs import check_data, is_dir, is_file, list_dir

__all__ = ["check_data", "is_dir", "is_file", "list_dir"]
