"""Turn one dump file set into normalized trend rows (no database ids), following §3.5-§7 of the spec."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field

import orjson
import pyarrow as pa

from trendconv.dump import construct as ct
from trendconv.dump import rules
from trendconv.errors import DataError, kind_of, where
from trendconv.jsonfile import read_json
from trendconv.scan import INT64_MAX, FileSet


@dataclass(frozen=True)
class ParseOptions:
    micro_step: bool = True
    mapping: tuple[tuple[str, str], ...] = ()

    @property
    def mapping_sha256(self) -> str:
        return hashlib.sha256(orjson.dumps([list(pair) for pair in self.mapping])).hexdigest()

    def describe(self) -> dict:
        return {"micro_step": self.micro_step, "mapping_sha256": self.mapping_sha256}


def options_text(described: dict) -> str:
    """A `describe()` document in words, for messages: `micro-step, mapping sha256 4f53cda18c2b`."""
    mode = "micro-step" if described.get("micro_step") else "no-micro-step"
    return f"{mode}, mapping sha256 {str(described.get('mapping_sha256'))[:12]}"


@dataclass
class Rows:
    """The rows of one file set, in processing order, kept per key where they share a value.

    Per row only the target name and the tensor dict are kept; the key-level columns are expanded
    with Arrow `take`, and the statistics are read in one pass per column at the end.
    """

    key: list[str] = field(default_factory=list)
    key_metric: list[str] = field(default_factory=list)
    key_index: list[int] = field(default_factory=list)
    key_local: list[int] = field(default_factory=list)
    row_key: list[int] = field(default_factory=list)
    target_name: list[str] = field(default_factory=list)
    tensors: list[dict] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    micro_steps: int = 1

    def __len__(self) -> int:
        return len(self.row_key)

    def metric_counts(self) -> Counter:
        per_key = Counter(self.row_key)
        counts = Counter()
        for position, metric in enumerate(self.key_metric):
            counts[metric] += per_key[position]
        return counts

    def columns(self) -> dict[str, pa.Array]:
        take = pa.array(self.row_key, pa.int32())
        columns = {
            "local_micro_step": pa.array(self.key_local, pa.int32()).take(take),
            "metric": pa.array(self.key_metric, pa.string()).dictionary_encode().take(take),
            "target_name": pa.array(self.target_name, pa.string()).dictionary_encode(),
            "micro_step": pa.array(self.key_index, pa.int64()).take(take),
            "key": pa.array(self.key, pa.string()).dictionary_encode().take(take),
        }
        for column, stat in zip(("norm", "max", "min", "mean"), rules.STAT_KEYS):
            columns[column] = _stat_column([tensor.get(stat) for tensor in self.tensors])
        return columns


def _stat_column(values: list) -> pa.Array:
    """Numbers, booleans and nulls convert in Arrow as §7 says; strings and huge ints need raw_stat."""
    try:
        return pa.array(values, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array([rules.raw_stat(value) for value in values], pa.float64())


@dataclass(frozen=True)
class _Naming:
    """What construct.json says about the keys of one file: micro steps and renumbered names."""

    steps: dict[str, int]
    names: dict[str, str]


def parse_file_set(file_set: FileSet, options: ParseOptions) -> Rows:
    naming = _naming(file_set, options)
    dump = read_json(file_set.dump_json)
    data = _data_of(dump, file_set)
    rows = Rows(micro_steps=ct.micro_step_count(naming.steps))
    for key, entry in data.items():
        try:
            _add_key(rows, key, entry, naming, options)
        except rules.EntryError as exc:
            raise DataError(f"{_where(file_set, key)}: {exc}") from None
    return rows


def _where(file_set: FileSet, key: str | None = None) -> str:
    return where(file_set.dump_json, step=file_set.step, rank=file_set.rank, key=key)


def _naming(file_set: FileSet, options: ParseOptions) -> _Naming:
    if not options.micro_step:
        return _Naming({}, {})
    path = file_set.construct_json
    if not path.is_file():
        raise DataError(
            f"{path}: construct.json not found (step {file_set.step}, rank {file_set.rank}); "
            "micro-step mode needs it, use --no-micro-step to convert without it"
        )
    steps = ct.micro_steps(ct.unpack_construct(read_json(path), path), path)
    return _Naming(steps, ct.renumber(steps))


def _data_of(dump, file_set: FileSet) -> dict:
    if not isinstance(dump, dict):
        raise DataError(f"{_where(file_set)}: top level is {kind_of(dump)}, expected an object")
    if "data" not in dump:
        raise DataError(f"{_where(file_set)}: no 'data' object at the top level")
    if not isinstance(dump["data"], dict):
        raise DataError(f"{_where(file_set)}: 'data' is {kind_of(dump['data'])}, expected an object")
    return dump["data"]


def _add_key(rows: Rows, key: str, entry, naming: _Naming, options: ParseOptions) -> None:
    if not isinstance(entry, dict):
        rows.skipped[rules.SKIP_NOT_OBJECT] += 1
        return
    name, lookup = _name_and_lookup(key, naming)
    if not name:
        rows.skipped[rules.SKIP_NOT_IN_CONSTRUCT] += 1
        return
    classified = rules.classify(rules.apply_mapping(name, options.mapping), entry)
    if classified is None:
        rows.skipped[rules.SKIP_NO_METRIC] += 1
        return
    metric, stripped = classified
    prefix, index = rules.split_index(stripped)
    if index > INT64_MAX:
        raise rules.EntryError(f"target index {index} does not fit a 64-bit integer")
    rows.key.append(key)
    rows.key_metric.append(metric)
    rows.key_index.append(index)
    rows.key_local.append(naming.steps.get(lookup, 0))
    position = len(rows.key) - 1
    for start, values in rules.tensor_groups(metric, entry):
        if type(values) is dict:
            for name, value in values.items():
                _add_tensor(rows, position, prefix + start + name, rules.choose_parameter(value))
            continue
        for index, value in enumerate(values):
            if rules.is_eligible(value):  # the common case, without building a name for skipped items
                rows.row_key.append(position)
                rows.target_name.append(f"{prefix}{start}{index}")
                rows.tensors.append(value)
            else:
                rows.skipped[rules.skip_reason(value)] += 1


def _add_tensor(rows: Rows, position: int, target: str, value) -> None:
    if rules.is_eligible(value):
        rows.row_key.append(position)
        rows.target_name.append(target)
        rows.tensors.append(value)
    else:
        rows.skipped[rules.skip_reason(value)] += 1


def _name_and_lookup(key: str, naming: _Naming) -> tuple[str | None, str]:
    """§3.5: the renumbered name (micro-step mode) or the key, with the parameters_grad fallback."""
    name = naming.names.get(key) if naming.names else key
    if not name and "parameters_grad" in key:
        return key, key.replace(".parameters_grad", ".forward")
    return name, key
