"""dump.json as the rules read it: entries of small typed objects holding only the fields that
docs/dump-format.md §6-§7 use.

msgspec decodes the file straight into these objects and skips what the rules never read (shapes,
`requires_grad`, kwargs), which takes about a third less time than building every dict with orjson. A file
msgspec refuses (lone surrogates, numbers beyond float range, ...) is read by `jsonfile`'s generic path
instead and converted to the same objects, so the rules see one shape whichever way a file was read.

Every JSON value fits these types: an object becomes a `Tensor`, an `Entry` or a dict, depending on
where it stands, and anything else stays what JSON made it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from trendconv import jsonfile

UNSET = msgspec.UNSET


class Tensor(msgspec.Struct, gc=False):
    """Any JSON object standing where a tensor may be; `type` is UNSET when the object has none."""

    type: Any = UNSET
    dtype: Any = None
    Norm: Any = None  # noqa: N815 - msprobe's field names
    Max: Any = None  # noqa: N815
    Min: Any = None  # noqa: N815
    Mean: Any = None  # noqa: N815


# A slot of a list field or a parameter; a nested list keeps plain JSON inside, as it never gives a row.
Item = Tensor | list | None | str | int | float | bool
Value = Tensor | list[Item] | None | str | int | float | bool
_Field = list[Value] | dict[str, Any] | None | str | int | float | bool
_Parameters = dict[str, Value] | list | None | str | int | float | bool


class Entry(msgspec.Struct, gc=False):
    """A forward, recompute or backward entry; a field the entry lacks is UNSET."""

    input_args: _Field = UNSET
    output: _Field = UNSET
    input: _Field = UNSET
    parameters: _Parameters = UNSET
    is_recompute: Any = None


# A parameters_grad entry maps parameter names to values; any other JSON value is no entry at all.
_ENTRY = Entry | list | None | str | int | float | bool
_PARAMETERS_ENTRY = dict[str, Value] | list | None | str | int | float | bool
_ENTRY_DECODER = msgspec.json.Decoder(_ENTRY)
_PARAMETERS_DECODER = msgspec.json.Decoder(_PARAMETERS_ENTRY)


class _Dump(msgspec.Struct):
    data: dict[str, msgspec.Raw]


_DUMP_DECODER = msgspec.json.Decoder(_Dump)


class Refused(Exception):
    """msgspec cannot read this file as it stands; the generic JSON path must."""


def fast_entries(raw: bytes) -> dict[str, msgspec.Raw]:
    """The `data` object's entries, undecoded, with the bare NaN/Infinity tokens quoted if there are any."""
    try:
        return _DUMP_DECODER.decode(raw).data
    except (msgspec.DecodeError, RecursionError):
        pass
    quoted = jsonfile.quote_bare_tokens(raw)
    if quoted is raw:
        raise Refused
    try:
        return _DUMP_DECODER.decode(quoted).data
    except (msgspec.DecodeError, RecursionError):
        raise Refused from None


def generic_entries(raw: bytes, path: Path):
    """The whole document, read by the generic path (its errors name PATH); the caller checks its shape."""
    return jsonfile.parse_json_bytes(raw, path)


_OPEN_BRACE = ord("{")


def is_object(value) -> bool:
    """Whether an undecoded or plain JSON entry is an object, the one shape that can give rows."""
    if type(value) is msgspec.Raw:
        # A Raw the decoder made is never empty: it holds one whole JSON value.
        return memoryview(value)[0] == _OPEN_BRACE
    return isinstance(value, dict)


def entry_of(value, parameters: bool) -> Entry | dict:
    """An object entry (see `is_object`) as the rules read it: a dict of parameters when PARAMETERS (a
    parameters_grad entry), else an `Entry`.

    Raises Refused when msgspec cannot decode it (for example a lone surrogate in a string).
    """
    try:
        if type(value) is msgspec.Raw:
            decoder = _PARAMETERS_DECODER if parameters else _ENTRY_DECODER
            return decoder.decode(value)
        return msgspec.convert(value, _PARAMETERS_ENTRY if parameters else _ENTRY)
    except (msgspec.DecodeError, RecursionError):
        raise Refused from None
