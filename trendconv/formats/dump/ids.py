"""Target ids of dump data as msprobe data2db gives them (docs/dump-format.md §8.4), replayed per shard in Arrow."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from trendconv.loading import ids

# msprobe data2db's row buffer (docs/dump-format.md §8.4): where its flushes fall decides the target ids.
MSPROBE_BATCH_ROWS = 5000


class TargetIds:
    """Target ids as msprobe data2db numbers them (docs/dump-format.md §8.4), and each metric's first uses of
    targets, which decide the tag ids.

    msprobe gives a target its id when a flush first inserts it; a flush comes after a key that leaves a
    multiple of 5000 rows in the buffer, and at each file end. A flush inserts, metric by metric in id
    order, the targets that metric uses for the first time, in first-seen order; every attempted insert
    takes a sequence value, so a target another metric created first leaves a gap.

    Work is per shard in Arrow, not per row. Each distinct (name, index) gets a *slot* (a dense number in
    first-seen order): the pair packs into one int64 key (the name as a number given on first sight), and
    `known` holds the key of every slot in order, so `index_in` gives the slots of a shard's rows and the
    nulls are the new targets. A use is (metric << 32 | slot); its first row places it in a flush.
    """

    _INDEX_BITS = 31
    _INDEX_LIMIT = 1 << _INDEX_BITS
    _SHIFT = pa.scalar(_INDEX_BITS, pa.int64())

    def __init__(self) -> None:
        self.sequence = 0  # the last value msprobe's AUTOINCREMENT handed out: sqlite_sequence
        self._slots: dict[tuple[str, int], int] = {}  # (name, index) -> slot, in slot order
        self._slot_ids = pa.array([], pa.int64())  # slot -> target id
        self._name_numbers: dict[str, int] = {}
        self._names: list[str] = []
        self._known_keys: list[int] = []  # by slot; a target whose index does not pack: -(slot + 1)
        self._known = pa.array([], pa.int64())
        self._uses: list[pa.Array] = []  # (metric << 32 | slot), each first use once, in order of first row
        self._used = pa.array([], pa.int64())

    @property
    def targets(self) -> dict[tuple[str, int], int]:
        """(name, index) -> target id, in order of first sight."""
        return dict(zip(self._slots, self._slot_ids.to_pylist()))

    @property
    def metric_targets(self) -> int:
        """How many distinct (metric, target) pairs the rows hold."""
        return len(self._used)

    @property
    def by_metric(self) -> dict[int, dict[int, None]]:
        """metric id -> target ids (as dict keys), both in order of first use."""
        first, slot_ids = ids.FirstUses(), self._slot_ids.to_pylist()
        for uses in self._uses:
            first.add(uses.to_pylist(), slot_ids.__getitem__)
        return first.by_metric

    def target_ids(
        self, names: pa.DictionaryArray, indexes: pa.Array, metric_ids: pa.Array, flushes: list[int]
    ) -> pa.Array:
        """The target id of every row of one file's rows (in file order); FLUSHES: the rows at which msprobe
        flushed inside the file (see `flush_starts`)."""
        known_slots = len(self._slots)
        if len(indexes) and pc.max(indexes).as_py() >= self._INDEX_LIMIT:
            slots = self._slots_unpacked(names, indexes)
        else:
            slots = self._slots_packed(names, indexes)
        self._insert_new_uses(ids.uses(metric_ids, slots), flushes, known_slots)
        return self._slot_ids.take(slots)

    def known_ids(self, names: pa.DictionaryArray, indexes: pa.Array, metric_ids: pa.Array) -> pa.Array | None:
        """The target id of every row, if no row brings a target or a use of one not seen before (then no insert
        of msprobe's takes a number, and the rows of several files can be looked up at once); else None, and
        nothing is changed."""
        numbers = [self._name_numbers.get(name) for name in names.dictionary.to_pylist()]
        if None in numbers or (len(indexes) and pc.max(indexes).as_py() >= self._INDEX_LIMIT):
            return None
        keys = pc.add(pc.shift_left(pa.array(numbers, pa.int64()).take(names.indices), self._SHIFT), indexes)
        positions = pc.index_in(keys, value_set=self._known)
        if positions.null_count:
            return None
        slots = positions.cast(pa.int64())
        distinct = pc.unique(ids.uses(metric_ids, slots))
        if not pc.all(pc.is_in(distinct, value_set=self._used)).as_py():
            return None
        return self._slot_ids.take(slots)

    def _slots_packed(self, names: pa.DictionaryArray, indexes: pa.Array) -> pa.Array:
        numbers = pa.array([self._name_number(name) for name in names.dictionary.to_pylist()], pa.int64())
        keys = pc.add(pc.shift_left(numbers.take(names.indices), self._SHIFT), indexes)
        positions = pc.index_in(keys, value_set=self._known)
        if positions.null_count:
            mask = self._INDEX_LIMIT - 1
            for key in pc.unique(keys.filter(positions.is_null())).to_pylist():
                self._new_slot(self._names[key >> self._INDEX_BITS], key & mask)
            self._known = pa.array(self._known_keys, pa.int64())
            positions = pc.index_in(keys, value_set=self._known)
        return positions.cast(pa.int64())

    def _slots_unpacked(self, names: pa.DictionaryArray, indexes: pa.Array) -> pa.Array:
        """Indexes beyond 31 bits: the pairs of the shard, one by one."""
        pairs = list(zip(pc.take(names.dictionary, names.indices).to_pylist(), indexes.to_pylist()))
        slots = {}
        for pair in pairs:
            if pair not in slots:
                known = self._slots.get(pair)
                slots[pair] = known if known is not None else self._new_slot(*pair)
        self._known = pa.array(self._known_keys, pa.int64())
        return pa.array([slots[pair] for pair in pairs], pa.int64())

    def _name_number(self, name: str) -> int:
        number = self._name_numbers.get(name)
        if number is None:
            number = self._name_numbers[name] = len(self._names)
            self._names.append(name)
        return number

    def _new_slot(self, name: str, index: int) -> int:
        slot = self._slots[(name, index)] = len(self._slots)
        packs = index < self._INDEX_LIMIT
        self._known_keys.append((self._name_number(name) << self._INDEX_BITS) + index if packs else -(slot + 1))
        return slot

    def _insert_new_uses(self, uses: pa.Array, flushes: list[int], known_slots: int) -> None:
        """msprobe's inserts for the uses first seen in this file: each takes the next sequence value, and a
        slot new in this file gets the value of its first insert as its id."""
        distinct = pc.unique(uses)
        new = distinct.filter(pc.invert(pc.is_in(distinct, value_set=self._used)))
        if not len(new):
            return
        self._uses.append(new)
        self._used = pa.concat_arrays([self._used, new])
        inserts = _insert_order(new, pc.index_in(new, value_set=uses), flushes)
        fresh = pa.array(range(known_slots, len(self._slots)), pa.int64())
        first_insert = pc.index_in(fresh, value_set=ids.target_of(inserts))
        new_ids = pc.add(first_insert.cast(pa.int64()), pa.scalar(self.sequence + 1, pa.int64()))
        self._slot_ids = pa.concat_arrays([self._slot_ids, new_ids])
        self.sequence += len(inserts)


def _insert_order(uses: pa.Array, first_rows: pa.Array, flushes: list[int]) -> pa.Array:
    """USES (first seen at FIRST_ROWS) in msprobe's insert order: by flush, then metric, then first row."""
    flush = pa.repeat(pa.scalar(0, pa.int64()), len(uses))
    for start in flushes:
        flush = pc.add(flush, pc.greater_equal(first_rows, pa.scalar(start, pa.int64())).cast(pa.int64()))
    keys = pa.table({"flush": flush, "metric": ids.metric_of(uses), "row": first_rows})
    return uses.take(pc.sort_indices(keys, [(name, "ascending") for name in keys.column_names]))


def flush_starts(keys: pa.ChunkedArray, batch: int = MSPROBE_BATCH_ROWS) -> list[int]:
    """The rows of one file that start a new msprobe flush: a flush follows the key that leaves a
    non-zero multiple of BATCH rows in the buffer, and the buffer empties at each flush, so the flushes
    fall exactly where a key ends at a multiple of BATCH rows (a key's rows are contiguous, keys unique)."""
    candidates = range(batch, len(keys), batch)
    if not candidates:
        return []
    around = keys.take([row for start in candidates for row in (start - 1, start)]).to_pylist()
    return [start for start, before, after in zip(candidates, around[::2], around[1::2]) if before != after]
