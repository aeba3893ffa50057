"""Reading a user's data file: the file half of the input boundary.

Every file memcalc reads (a model spec, an HF config.json, a GPU profile, a quiz bank or
progress file) is read here, so that each way a file can be wrong is one line naming it:
missing, a directory, unreadable (permissions, a path too long, a NUL byte), too large, not
UTF-8, malformed, nested too deeply, or holding a number no field could take. Nothing here
raises anything but ``MemcalcError``.

>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "x.json"
>>> _ = p.write_bytes(b'{"a": [[[1]]]}')
>>> read_data_file(p)
{'a': [[[1]]]}
>>> _ = p.write_bytes(b'{"a": "\\xff"}')
>>> read_data_file(p)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
memcalc.errors.MemcalcError: .../x.json: not UTF-8 text (byte 0xff at offset 7)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from memcalc.errors import MemcalcError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MAX_FILE_BYTES = 16 * 2**20
"""Largest data file read (the largest real HF config.json is tens of KiB)."""
MAX_DEPTH = 32
"""Deepest nesting of tables and lists (a spec has three levels; a config.json a few)."""
MAX_DIGITS = 30
"""Most digits of an integer in a file (every bound memcalc states is below 10^20)."""

_LONG_INT = re.compile(rf"(?<![\w.\"'])[-+]?\d{{{MAX_DIGITS + 1},}}(?![\w.])")


def shown(path: Path | str, limit: int = 120) -> str:
    """``path`` as an error message shows it: whole, or its start and end when very long."""
    text = str(path).replace("\x00", "\\0")
    if len(text) <= limit:
        return text
    return text[: limit // 2] + "..." + text[-limit // 2 :]


def read_text_file(path: Path, what: str = "") -> str:
    """The UTF-8 text of ``path``; every way reading can fail is one ``MemcalcError`` naming
    the file (``what``: the flag or role to name first, e.g. ``--gpu``)."""
    where = f"{what}: {shown(path)}" if what else shown(path)
    try:
        if path.is_dir():
            raise MemcalcError(f"{where}: is a directory, not a file")
        if not path.exists():
            raise MemcalcError(f"{where}: no such file")
        if not path.is_file():
            raise MemcalcError(f"{where}: not a regular file")
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise MemcalcError(
                f"{where}: {size:,} bytes is too large for a data file (at most {MAX_FILE_BYTES:,})"
            )
        raw = path.read_bytes()
    except PermissionError:
        raise MemcalcError(f"{where}: permission denied (cannot read the file)") from None
    except OSError as e:
        raise MemcalcError(f"{where}: cannot read: {e.strerror or e}") from None
    except ValueError as e:  # a NUL byte in the path
        raise MemcalcError(f"{where}: not a usable path ({e})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise MemcalcError(f"{where}: too large for a data file (at most {MAX_FILE_BYTES:,})")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MemcalcError(
            f"{where}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})"
        ) from None


def _depth(value: Any) -> int:
    """How deeply ``value`` nests lists and tables (iteratively: no recursion limit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            items: Any = item.values()
        elif isinstance(item, list):
            items = item
        else:
            continue
        deepest = max(deepest, depth)
        if depth <= MAX_DEPTH:
            stack.extend((v, depth + 1) for v in items)
    return deepest


def parse_data(text: str, kind: str, where: str) -> Any:
    """``text`` parsed as ``kind`` (``toml``, ``yaml`` or ``json``), with the limits of this
    module."""
    long_int = _LONG_INT.search(text)
    if long_int:
        digits = len(long_int.group().lstrip("+-"))
        line = text.count("\n", 0, long_int.start()) + 1
        raise MemcalcError(
            f"{where}: line {line}: an integer of {digits:,} digits is past any bound "
            f"(at most {MAX_DIGITS} digits)"
        )
    try:
        if kind == "yaml":
            data = _yaml(text, where)
        else:
            data = tomllib.loads(text) if kind == "toml" else json.loads(text)
    except json.JSONDecodeError as e:
        raise MemcalcError(
            f"{where}: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}"
        ) from None
    except tomllib.TOMLDecodeError as e:
        raise MemcalcError(f"{where}: malformed TOML: {e}") from None
    except RecursionError:
        raise MemcalcError(f"{where}: nested too deeply (at most {MAX_DEPTH} levels)") from None
    except ValueError as e:  # e.g. a number Python refuses to convert
        raise MemcalcError(f"{where}: malformed {kind.upper()}: {e}") from None
    if _depth(data) > MAX_DEPTH:
        raise MemcalcError(f"{where}: nested too deeply (at most {MAX_DEPTH} levels)")
    return data


def _yaml(text: str, where: str) -> Any:
    """YAML (PyYAML's safe loader: plain data, no tags that build objects)."""
    try:
        import yaml
    except ImportError:  # pragma: no cover - a core dependency
        raise MemcalcError(f"{where}: reading YAML needs PyYAML (pip install pyyaml)") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise MemcalcError(f"{where}: malformed YAML{at}: {problem}") from None


SUFFIX_KINDS = {".toml": "toml", ".yaml": "yaml", ".yml": "yaml"}
"""How a data file is parsed, by suffix (anything else: JSON)."""


def read_data_file(path: Path, what: str = "") -> dict[str, Any]:
    """A .toml, .yaml / .yml or .json file (by suffix; anything else is read as JSON) parsed
    into a dict."""
    text = read_text_file(path, what)
    where = f"{what}: {shown(path)}" if what else shown(path)
    data = parse_data(text, SUFFIX_KINDS.get(path.suffix.lower(), "json"), where)
    if not isinstance(data, dict):
        raise MemcalcError(f"{where}: expected a table/object at the top level")
    return data
