"""Tools the model may call: name, description, JSON Schema for input, and the code that runs.

``input_schema`` is plain JSON Schema; :func:`tool_from_model` derives it from a pydantic model so
one class states the shape, the validation and the documentation.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

JsonDict = dict[str, Any]
ToolFn = Callable[[JsonDict], Any]

ASK_USER = "system_ask_user"


@dataclass(frozen=True)
class Tool:
    """A callable tool; ``execute`` returns anything JSON-serialisable (or a string)."""

    name: str
    description: str
    input_schema: JsonDict
    execute: ToolFn

    def spec(self) -> JsonDict:
        """The tool as the Messages API ``tools`` list expects it."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }


def tool_from_model(name: str, description: str, model: type[Any], execute: Callable[[Any], Any]) -> Tool:
    """Build a Tool whose schema comes from pydantic ``model``; ``execute`` gets it parsed."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)

    def run(args: JsonDict) -> Any:
        return execute(model.model_validate(args))

    return Tool(name=name, description=description, input_schema=schema, execute=run)


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
                "description": "Optional choices to offer.",
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
