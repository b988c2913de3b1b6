"""Turn one dump file set into normalized trend rows (no database ids), following docs/dump-format.md §3.5-§7."""

from __future__ import annotations

import hashlib
import operator
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa

from trendconv import int64, native
from trendconv.errors import DataError, kind_of, place
from trendconv.formats.dump import construct as ct
from trendconv.formats.dump import decode, rules
from trendconv.formats.dump.decode import Tensor
from trendconv.formats.dump.scan import FileSet
from trendconv.jsonfile import parse_json_exact, read_bytes
from trendconv.options import ParseOptions, apply_mapping
from trendconv.scan.fs import is_file

# None where it could not be compiled or TRENDCONV_PURE turns it off: the Python path gives the same rows.
_extract = native.extension(native.EXTRACT)


class _KeyedRows:
    """What both kinds of rows share: per key, its name, metric, target index and local micro step; per
    row, the position of its key (`row_key`)."""

    key: list[str]
    key_metric: list[str]
    key_index: list[int]
    key_local: list[int]

    def metric_counts(self) -> Counter:
        """Rows per metric; a metric whose keys gave no row counts 0."""
        counts = Counter(dict.fromkeys(self.key_metric, 0))
        counts.update(map(self.key_metric.__getitem__, self._row_keys()))
        return counts

    def _columns(self, take: pa.Array, names: pa.Array, stats: list[pa.Array]) -> dict[str, pa.Array]:
        """The shard's row columns: the key-level ones expanded with Arrow `take` (TAKE: row -> key)."""
        return {
            "local_micro_step": pa.array(self.key_local, pa.int64()).take(take),
            "metric": pa.array(self.key_metric, pa.string()).dictionary_encode().take(take),
            "target_name": names.dictionary_encode(),
            "micro_step": pa.array(self.key_index, pa.int64()).take(take),
            "key": pa.array(self.key, pa.string()).dictionary_encode().take(take),
            **dict(zip(("norm", "max", "min", "mean"), stats)),
        }


@dataclass
class Rows(_KeyedRows):
    """The rows of one file set read in Python, in processing order, kept per key where they share a value.

    Per row only the target name and the decoded tensor are kept; the key-level columns are expanded
    with Arrow `take`, and the statistics of all rows are gathered at the end, in one pass.
    """

    key: list[str] = field(default_factory=list)
    key_metric: list[str] = field(default_factory=list)
    key_index: list[int] = field(default_factory=list)
    key_local: list[int] = field(default_factory=list)
    row_key: list[int] = field(default_factory=list)
    target_name: list[str] = field(default_factory=list)
    tensors: list[Tensor] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    micro_steps: int = 1

    def __len__(self) -> int:
        return len(self.row_key)

    def _row_keys(self) -> list[int]:
        return self.row_key

    def columns(self) -> dict[str, pa.Array]:
        stats = [_stat_column(values) for values in self._stat_values()]
        return self._columns(pa.array(self.row_key, pa.int32()), pa.array(self.target_name, pa.string()), stats)

    def _stat_values(self) -> list[tuple]:
        """The four statistics of every row, column by column, gathered in C."""
        return list(zip(*map(_STATS_OF, self.tensors))) or [()] * len(rules.STAT_KEYS)


@dataclass
class ExtractedRows(_KeyedRows):
    """The rows of one file set as the C reader (`_extract`) gives them: the per-key lists of `Rows`, the
    row columns already in Arrow."""

    key: list[str]
    key_metric: list[str]
    key_index: list[int]
    key_local: list[int]
    row_key: pa.Array
    target_name: pa.Array
    stats: list[pa.Array]
    skipped: Counter
    micro_steps: int

    def __len__(self) -> int:
        return len(self.row_key)

    def _row_keys(self) -> list[int]:
        return self.row_key.to_pylist()

    def columns(self) -> dict[str, pa.Array]:
        return self._columns(self.row_key, self.target_name, self.stats)


_STATS_OF = operator.attrgetter(*rules.STAT_KEYS)


def _stat_column(values) -> pa.Array:
    """Numbers, booleans and nulls convert in Arrow as docs/dump-format.md §7 says; strings and huge ints need
    raw_stat."""
    try:
        return pa.array(values, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array([value if type(value) is float else rules.raw_stat(value) for value in values], pa.float64())


@dataclass
class _Naming:
    """What construct.json says about the keys of one file: micro steps and renumbered names.

    `keys` remembers, per dump key, what `_key_info` found (the naming and the mapping fix it), so a
    key seen in an earlier file set with the same construct.json costs one dict lookup.
    """

    steps: dict[str, int]
    names: dict[str, str]
    keys: dict[str, tuple | str] = field(default_factory=dict)

    @property
    def micro_steps(self) -> int:
        return ct.micro_step_count(self.steps)


# Namings by (construct.json digest, mapping); file sets of one training run usually share their
# construct.json, so a worker resolves and renumbers it once. A few entries bound the memory.
_NAMING_CACHE: dict[tuple, _Naming] = {}
_NAMING_CACHE_SIZE = 4


def parse_file_set(file_set: FileSet, options: ParseOptions) -> Rows | ExtractedRows:
    naming = _naming(file_set, options)
    raw = read_bytes(file_set.dump_json)
    if _extract is not None:
        try:
            return _extracted_rows(raw, naming, options)
        except (_extract.Refused, rules.EntryError):
            pass  # the Python path reads what the C reader refuses, and words the errors
    if raw.isascii():  # msgspec leaves the UTF-8 of entries it skips unchecked; ASCII needs no check
        try:
            return _rows(decode.fast_entries(raw), file_set, naming, options)
        except decode.Refused:
            pass
    data = _data_of(decode.generic_entries(raw, file_set.dump_json), file_set)
    return _rows(data, file_set, naming, options)


_SLOT_SKIPS = (
    rules.SKIP_NOT_OBJECT,
    rules.SKIP_NULL,
    rules.SKIP_NESTED,
    rules.SKIP_NON_TENSOR,
    rules.SKIP_TYPE,
    rules.SKIP_DTYPE,
)


def _extracted_rows(raw: bytes, naming: _Naming, options: ParseOptions) -> ExtractedRows:
    def key_rules(key: str) -> tuple | str:
        info = naming.keys[key] = _key_info(key, naming, options)
        return info

    keys, metrics, indexes, local, row_key, offsets, names, stats, count, skipped = _extract.extract(
        raw, naming.keys, key_rules, rules.raw_stat, _SLOT_SKIPS, rules.TENSOR_TYPES, rules.FLOAT_DTYPES
    )
    return ExtractedRows(
        keys,
        metrics,
        indexes,
        local,
        row_key=pa.Array.from_buffers(pa.int32(), count, [None, pa.py_buffer(row_key)]),
        target_name=pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(names)]),
        stats=[_buffer_column(count, values, validity) for values, validity in stats],
        skipped=Counter(skipped),
        micro_steps=naming.micro_steps,
    )


def _buffer_column(count: int, values: bytes, validity: bytes | None) -> pa.Array:
    bitmap = None if validity is None else pa.py_buffer(validity)
    return pa.Array.from_buffers(pa.float64(), count, [bitmap, pa.py_buffer(values)])


def _rows(data: dict, file_set: FileSet, naming: _Naming, options: ParseOptions) -> Rows:
    """The rows of DATA's entries (undecoded or plain JSON), in file order."""
    rows = Rows(micro_steps=naming.micro_steps)
    for key, entry in data.items():
        try:
            _add_key(rows, key, entry, naming, options)
        except rules.EntryError as exc:
            raise DataError(f"{_place(file_set, key)}: {exc}") from None
    return rows


def _place(file_set: FileSet, key: str | None = None) -> str:
    return place(file_set.dump_json, step=file_set.step, rank=file_set.rank, key=key)


def _naming(file_set: FileSet, options: ParseOptions) -> _Naming:
    if not options.micro_step:
        return _cached_naming((None, options.mapping), lambda: _Naming({}, {}))
    path = file_set.construct_json
    if not is_file(path):
        raise DataError(
            f"{path}: construct.json not found (step {file_set.step}, rank {file_set.rank}); "
            "micro-step mode needs it, use `micro_step=False` to convert without it"
        )
    raw = read_bytes(path)

    def build() -> _Naming:
        steps = ct.micro_steps(ct.unpack_construct(parse_json_exact(raw, path), path), path)
        return _Naming(steps, ct.renumber(steps))

    return _cached_naming((hashlib.sha256(raw).digest(), options.mapping), build)


def _cached_naming(cache_key: tuple, build) -> _Naming:
    naming = _NAMING_CACHE.pop(cache_key, None)
    if naming is None:
        naming = build()  # errors are not cached: each file set reports its own path
        while len(_NAMING_CACHE) >= _NAMING_CACHE_SIZE:
            del _NAMING_CACHE[next(iter(_NAMING_CACHE))]
    _NAMING_CACHE[cache_key] = naming  # most recently used last
    return naming


def _data_of(dump, file_set: FileSet) -> dict:
    if not isinstance(dump, dict):
        raise DataError(f"{_place(file_set)}: top level is {kind_of(dump)}, expected an object")
    if "data" not in dump:
        raise DataError(f"{_place(file_set)}: no 'data' object at the top level")
    if not isinstance(dump["data"], dict):
        raise DataError(f"{_place(file_set)}: 'data' is {kind_of(dump['data'])}, expected an object")
    return dump["data"]


def _key_info(key: str, naming: _Naming, options: ParseOptions) -> tuple | str:
    """A skip reason, or (metric, forward, target prefix, target index, local micro step) of a key.

    For a forward key the metric is recompute when its entry says `is_recompute`: the one part of the
    outcome that depends on the entry rather than the key, left to the caller.
    """
    name, lookup = _name_and_lookup(key, naming)
    if not name:
        return rules.SKIP_NOT_IN_CONSTRUCT
    classified = rules.classify(apply_mapping(name, options.mapping), _NOT_RECOMPUTE)
    if classified is None:
        return rules.SKIP_NO_METRIC
    metric, stripped = classified
    prefix, index = rules.split_index(stripped)
    if not int64.fits(index):
        raise rules.EntryError(f"target index {index} does not fit a 64-bit integer")
    return metric, metric == rules.FORWARD, prefix, index, naming.steps.get(lookup, 0)


_NOT_RECOMPUTE: dict = {}
_TENSOR_TYPES, _FLOAT_DTYPES = rules.TENSOR_TYPES, rules.FLOAT_DTYPES


def _add_key(rows: Rows, key: str, entry, naming: _Naming, options: ParseOptions) -> None:
    if not decode.is_object(entry):
        rows.skipped[rules.SKIP_NOT_OBJECT] += 1
        return
    info = naming.keys.get(key)
    if info is None:
        info = naming.keys[key] = _key_info(key, naming, options)
    if type(info) is str:
        rows.skipped[info] += 1
        return
    metric, forward, prefix, index, local = info
    entry = decode.entry_of(entry, parameters=metric == rules.PARAMETERS_GRAD)
    if forward and entry.is_recompute:
        metric = rules.RECOMPUTE
    groups = rules.tensor_groups(metric, entry)  # may raise: before this key adds anything
    position = len(rows.key)
    rows.key.append(key)
    rows.key_metric.append(metric)
    rows.key_index.append(index)
    rows.key_local.append(local)
    row_key, target_name, tensors, skipped = rows.row_key, rows.target_name, rows.tensors, rows.skipped
    for start, values in groups:
        base = prefix + start
        if type(values) is dict:
            for name, value in values.items():
                value = rules.choose_parameter(value)
                if type(value) is Tensor and value.type in _TENSOR_TYPES and value.dtype in _FLOAT_DTYPES:
                    row_key.append(position)
                    target_name.append(base + name)
                    tensors.append(value)
                else:
                    skipped[rules.skip_reason(value)] += 1
            continue
        index = 0
        for value in values:
            # eligible (rules.skip_reason would say None), tested inline: this is the hot path
            if type(value) is Tensor and value.type in _TENSOR_TYPES and value.dtype in _FLOAT_DTYPES:
                row_key.append(position)
                target_name.append(f"{base}{index}")
                tensors.append(value)
            else:
                skipped[rules.skip_reason(value)] += 1
            index += 1


def _name_and_lookup(key: str, naming: _Naming) -> tuple[str | None, str]:
    """docs/dump-format.md §3.5: the renumbered name (micro-step mode) or the key, with the parameters_grad fallback."""
    name = naming.names.get(key) if naming.names else key
    if not name and "parameters_grad" in key:
        return key, key.replace(".parameters_grad", ".forward")
    return name, key
