"""Request data as the product accepts it: UTF-8 text without lone surrogates, and strict JSON.

Every route reads request data through these functions, so bad input is refused (``InvalidInput``,
a 400) before anything changes state:

* text must be valid UTF-8; a ``str`` must hold no lone surrogate (``"\\ud800"`` escapes in JSON,
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

from loopengine.errors import InvalidInput

MAX_DEPTH = 64
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


class _NotFinite(ValueError):
    """A number literal the parser met that is not finite (raised through ``json.loads``)."""


def _refuse_constant(name: str) -> Any:
    raise _NotFinite(f"{name} is not accepted")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(f"{text[:40]} overflows")
    return value


def check_value(value: Any, what: str = "request data") -> Any:
    """``value`` unchanged when every string (keys too) is surrogate-free and every float finite.

    Iterative (an explicit stack), so any depth is safe; also refuses nesting past MAX_DEPTH.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            check_text(item, what)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidInput(f"{what}: numbers must be finite")
        elif isinstance(item, dict | list | tuple):
            if depth >= MAX_DEPTH:
                raise InvalidInput(f"{what}: JSON nested deeper than {MAX_DEPTH} levels")
            if isinstance(item, dict):
                for key, child in item.items():
                    if isinstance(key, str):
                        check_text(key, what)
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
    return value


def parse_json(raw: bytes | str, what: str = "request body") -> Any:
    """Parse ``raw`` as strict JSON (see the module docstring); raises InvalidInput / BadJson."""
    text = decode_utf8(raw, what) if isinstance(raw, bytes | bytearray) else check_text(raw, what)
    if nesting_depth(text) > MAX_DEPTH:
        raise InvalidInput(f"{what}: JSON nested deeper than {MAX_DEPTH} levels")
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except _NotFinite as exc:
        raise InvalidInput(f"{what}: numbers must be finite ({exc})") from None
    except (ValueError, RecursionError):
        raise BadJson(f"{what} is not valid JSON") from None
    return check_value(value, what)
