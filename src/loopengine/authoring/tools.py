"""Tools the model may call: name, description, JSON Schema for input, and the code that runs.

``input_schema`` is plain JSON Schema; :func:`tool_from_model` derives it from a pydantic model so
one class states the shape, the validation and the documentation.

The code is ``fn(args)``, or ``fn(args, ctx: ToolContext)`` to be told about the call (see
:mod:`.context`): the context parameter is recognised by its annotation only. It may be ``async def``
(or return an awaitable); the engine runs either kind on the same at-most-once path, within the
tool's ``timeout`` (:mod:`loopengine.app.worker.tool_calls`).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loopengine.authoring.context import MAX_TOOL_TIMEOUT, ToolContext
from loopengine.domain.base.jsontypes import JsonDict

ToolFn = Callable[..., Any]
"""``fn(args)`` or ``fn(args, ctx: ToolContext)``, plain or ``async``."""

ASK_USER = "system_ask_user"
_UNRESOLVED_CONTEXT = re.compile(r"^(?:None\|)?(?:loopengine\.)?ToolContext(?:\|None)?$")
"""A string annotation naming ToolContext that cannot be evaluated (imported under TYPE_CHECKING)."""


@dataclass(frozen=True, slots=True)
class Tool:
    """A callable tool; ``execute`` returns anything JSON-serialisable (or a string).

    ``timeout`` (seconds, up to 600) bounds one call; ``None`` leaves it to agent.yaml's
    ``tool_timeouts:`` or the default (20 s). agent.yaml wins over this field.
    """

    name: str
    description: str
    input_schema: JsonDict
    execute: ToolFn
    timeout: float | None = None

    def __post_init__(self) -> None:
        if not callable(self.execute):
            raise TypeError(
                f"tool {self.name!r}: execute must be callable, not {type(self.execute).__name__}"
            )
        check_timeout(self.timeout, f"tool {self.name!r}")

    def spec(self) -> JsonDict:
        """The tool as the Messages API ``tools`` list expects it."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }

    def invoke(self, args: JsonDict, ctx: ToolContext) -> Any:
        """Call ``execute`` (with ``ctx`` if it asks for one): its value, or an awaitable for async code."""
        return call_with_context(self.execute, args, ctx)


def check_timeout(timeout: float | None, where: str) -> None:
    """ValueError unless ``timeout`` is ``None`` or a number of seconds in (0, 600]."""
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not math.isfinite(timeout):
        raise ValueError(f"{where}: timeout must be a number of seconds, not {timeout!r}")
    if not 0 < timeout <= MAX_TOOL_TIMEOUT:
        raise ValueError(
            f"{where}: timeout must be more than 0 and at most {MAX_TOOL_TIMEOUT:g} s, not {timeout:g}"
        )


def context_parameter(fn: Callable[..., Any]) -> inspect.Parameter | None:
    """The parameter of ``fn`` annotated ``ToolContext`` (or ``ToolContext | None``), if any."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature takes no context
        return None
    hints = _annotations(fn)
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if _names_context(hints.get(param.name, param.annotation)):
            return param
    return None


def _annotations(fn: Callable[..., Any]) -> dict[str, Any]:
    """``fn``'s annotations with string ones evaluated (``inspect.get_annotations(eval_str=True)``).

    One naming what its module imports only under ``TYPE_CHECKING`` cannot be evaluated: then they
    stay as written, and :func:`_names_context` reads the string.
    """
    target = inspect.unwrap(fn)
    try:
        return inspect.get_annotations(target, eval_str=True)
    except NameError:
        return inspect.get_annotations(target)
    except Exception:  # not a function, class or module (a callable object): its signature's own
        return {}


def _names_context(annotation: Any) -> bool:
    if annotation is inspect.Parameter.empty:
        return False
    if isinstance(annotation, str):
        return bool(_UNRESOLVED_CONTEXT.match(annotation.replace(" ", "")))
    if annotation is ToolContext:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return ToolContext in typing.get_args(annotation)
    return False


def call_with_context(fn: Callable[..., Any], first: Any, ctx: ToolContext | None) -> Any:
    """``fn(first)``, or ``fn(first, <its context parameter>=ctx)`` when ``fn`` asks for the context.

    Without a context (code calling a tool directly, e.g. its tests) ``fn`` gets none.
    """
    param = context_parameter(fn) if ctx is not None else None
    if param is None:
        return fn(first)
    positional = (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD)
    if param.kind in positional and next(iter(inspect.signature(fn).parameters)) == param.name:
        return fn(ctx, first)
    if param.kind is param.POSITIONAL_ONLY:
        return fn(first, ctx)
    return fn(first, **{param.name: ctx})


def tool_from_model(
    name: str,
    description: str,
    model: type[Any],
    execute: Callable[..., Any],
    timeout: float | None = None,
) -> Tool:
    """Build a Tool whose schema comes from pydantic ``model``; ``execute`` gets it parsed.

    ``execute(model)`` or ``execute(model, ctx: ToolContext)``, plain or ``async def``.
    """
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)

    def run(args: JsonDict, ctx: ToolContext | None = None) -> Any:
        return call_with_context(execute, model.model_validate(args), ctx)

    return Tool(name=name, description=description, input_schema=schema, execute=run, timeout=timeout)


ASK_USER_SPEC: JsonDict = {
    "name": ASK_USER,
    "description": (
        "Ask the user a question when you are genuinely unsure instead of guessing. "
        "The turn pauses until they answer; the answer comes back as this tool's result."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "What you need to know."},
            "options": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Optional choices to offer; the answer is one of them.",
            },
            "allow_free_text": {
                "type": "boolean",
                "description": "With options: whether the user may also answer in their own words "
                "(default false).",
            },
        },
        "required": ["question"],
    },
}


def result_text(value: Any) -> str:
    """Render a tool's return value as tool_result text (JSON unless it already is a string)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def args_hash(tool: str, args: JsonDict) -> str:
    """Stable hash of a tool call (tool + canonical args): what an approver was shown."""
    canonical = json.dumps({"tool": tool, "args": args}, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()[:32]
