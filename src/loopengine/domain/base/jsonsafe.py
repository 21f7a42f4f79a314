r"""Request data as the product accepts it: UTF-8 text without lone surrogates, and strict JSON.

Every route reads request data through these functions, so bad input is refused (``InvalidInput``,
a 400) before anything changes state:

* text must be valid UTF-8; a ``str`` must hold no lone surrogate (``"\ud800"`` escapes in JSON,
  or bytes that a lenient decoder smuggled in) — stores and SDKs cannot encode them;
* JSON may nest at most :data:`MAX_DEPTH` arrays/objects, checked by a linear scan *before* the
  parser recurses, so a 100 000-deep ``[[[[`` is a clean refusal, never a ``RecursionError``;
* numbers must be finite: ``NaN``, ``Infinity``, ``-Infinity`` and literals that overflow to
  infinity (``1e999``) are refused, since they slip through numeric rules (``nan > 10000`` is false).

Syntax errors raise :class:`BadJson` (a subclass, so callers may answer them with their own code).
Standard library only; pure functions.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from loopengine.domain.base.errors import InvalidInput
from loopengine.domain.base.limits import MAX_JSON_DEPTH

MAX_DEPTH = MAX_JSON_DEPTH
"""The deepest nesting of arrays and objects a request may carry."""

_SURROGATE = re.compile("[\ud800-\udfff]")
_STRUCTURE = re.compile(r'[\\"\[\]{}]')


class BadJson(InvalidInput):
    """The text is not JSON at all (syntax)."""

    code = "bad_json"


def check_text(text: str, what: str = "request data") -> str:
    """``text`` unchanged when it holds no lone surrogate; InvalidInput naming ``what`` otherwise."""
    if not text.isascii() and _SURROGATE.search(text):
        raise InvalidInput(f"{what} contains a lone surrogate (not valid Unicode text)")
    return text


def decode_utf8(raw: bytes, what: str = "request body") -> str:
    """``raw`` as strict UTF-8 text; InvalidInput naming ``what`` when it is not."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{what} is not valid UTF-8") from None


def nesting_depth(text: str, limit: int = MAX_DEPTH) -> int:
    """The deepest array/object nesting of JSON ``text`` (stops counting once past ``limit``).

    A linear scan over brackets, quotes and backslashes outside and inside strings; no recursion.
    Correct for valid JSON; for invalid JSON it returns some number and the parser refuses the text.
    """
    depth = deepest = 0
    in_string = False
    skip_to = -1
    for match in _STRUCTURE.finditer(text):
        at = match.start()
        if at < skip_to:  # the character escaped by a backslash
            continue
        char = match.group()
        if in_string:
            if char == "\\":
                skip_to = at + 2
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif char in "]}":
            depth -= 1
    return deepest


class _NotFinite:
    """What the parser makes of ``NaN`` / ``Infinity`` / ``-Infinity``, so the walk can say where."""

    def __init__(self, literal: str) -> None:
        self.literal = literal


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,40}")


def _step(path: str, key: object) -> str:
    """``path`` extended by an object key or a list index (``editedArgs.amount``, ``items[3]``)."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if isinstance(key, str) and _IDENTIFIER.fullmatch(key):
        return f"{path}.{key}" if path else key
    shown = json.dumps(key)[:40]  # ASCII-escaped, so a lone surrogate shows as \udXXX
    return f"{path}[{shown}]"


def _where(what: str, path: str) -> str:
    return f"{what} at {path[:120]}" if path else what


def check_value(value: Any, what: str = "request data") -> Any:
    """``value`` unchanged when it holds nothing the edge refuses; InvalidInput naming the place otherwise.

    Every string (keys too) must be free of lone surrogates, every number finite, nesting at most
    MAX_DEPTH. Iterative (an explicit stack), so any depth is safe.
    """
    stack: list[tuple[Any, int, str]] = [(value, 0, "")]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, str):
            check_text(item, _where(what, path))
        elif isinstance(item, _NotFinite):
            raise InvalidInput(
                f"{_where(what, path)}: numbers must be finite ({item.literal} is not accepted)"
            )
        elif isinstance(item, float) and not math.isfinite(item):
            raise InvalidInput(f"{_where(what, path)}: numbers must be finite")
        elif isinstance(item, dict | list | tuple):
            if depth >= MAX_DEPTH:
                raise InvalidInput(f"{_where(what, path)}: JSON nested deeper than {MAX_DEPTH} levels")
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in pairs:
                if isinstance(key, str) and not key.isascii() and _SURROGATE.search(key):
                    raise InvalidInput(f"{_where(what, path)}: a key contains a lone surrogate")
                stack.append((child, depth + 1, _step(path, key)))
    return value


def parse_json(raw: bytes | str, what: str = "request body") -> Any:
    """Parse ``raw`` as strict JSON (see the module docstring); raises InvalidInput / BadJson."""
    text = decode_utf8(raw, what) if isinstance(raw, bytes | bytearray) else check_text(raw, what)
    if nesting_depth(text) > MAX_DEPTH:
        raise InvalidInput(f"{what}: JSON nested deeper than {MAX_DEPTH} levels")
    try:
        value = json.loads(text, parse_constant=_NotFinite)  # 1e999 parses to inf: the walk refuses it
    except (ValueError, RecursionError):
        raise BadJson(f"{what} is not valid JSON") from None
    return check_value(value, what)
