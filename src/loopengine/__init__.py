"""loopengine: durable tool-calling agents that pause for a human.

The public API lives here; what an agent's ``tools.py``, a scripted model or an application that embeds
the engine needs is imported from ``loopengine`` itself, so moves inside the package never break it::

    from loopengine import Tool, tool_from_model          # a tool
    from loopengine import call, say, use                 # a scripted (offline) model
    from loopengine import build_engine                   # the engine, from settings

Names are loaded on first use (PEP 562): importing ``loopengine`` costs nothing a Lambda route does not
need. The map of the package is docs/architecture.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # tools
    "Tool": "loopengine.authoring.tools",
    "tool_from_model": "loopengine.authoring.tools",
    "ToolContext": "loopengine.authoring.context",
    "new_id": "loopengine.domain.base.ids",
    # messages and the model port (for scripted models)
    "Message": "loopengine.domain.messages",
    "TextBlock": "loopengine.domain.messages",
    "ToolUseBlock": "loopengine.domain.messages",
    "ToolResultBlock": "loopengine.domain.messages",
    "ModelRequest": "loopengine.app.ports",
    "ModelResponse": "loopengine.app.ports",
    "call": "loopengine.models.scripted",
    "say": "loopengine.models.scripted",
    "use": "loopengine.models.scripted",
    "ScriptedModel": "loopengine.models.scripted",
    # embedding the engine
    "Engine": "loopengine.app.engine",
    "build_engine": "loopengine.bootstrap",
    "Principal": "loopengine.domain.principals",
    "Approval": "loopengine.domain.decisions",
    "Denial": "loopengine.domain.decisions",
    "Reply": "loopengine.domain.decisions",
    "AgentRegistry": "loopengine.authoring.registry",
    # the receiving side of a webhook
    "verify_webhook": "loopengine.channels.signing",
}
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from loopengine.app.engine import Engine as Engine
    from loopengine.app.ports import ModelRequest as ModelRequest
    from loopengine.app.ports import ModelResponse as ModelResponse
    from loopengine.authoring.context import ToolContext as ToolContext
    from loopengine.authoring.registry import AgentRegistry as AgentRegistry
    from loopengine.authoring.tools import Tool as Tool
    from loopengine.authoring.tools import tool_from_model as tool_from_model
    from loopengine.bootstrap import build_engine as build_engine
    from loopengine.channels.signing import verify_webhook as verify_webhook
    from loopengine.domain.base.ids import new_id as new_id
    from loopengine.domain.decisions import Approval as Approval
    from loopengine.domain.decisions import Denial as Denial
    from loopengine.domain.decisions import Reply as Reply
    from loopengine.domain.messages import (
        Message as Message,
    )
    from loopengine.domain.messages import (
        TextBlock as TextBlock,
    )
    from loopengine.domain.messages import (
        ToolResultBlock as ToolResultBlock,
    )
    from loopengine.domain.messages import (
        ToolUseBlock as ToolUseBlock,
    )
    from loopengine.domain.principals import Principal as Principal
    from loopengine.models.scripted import (
        ScriptedModel as ScriptedModel,
    )
    from loopengine.models.scripted import (
        call as call,
    )
    from loopengine.models.scripted import (
        say as say,
    )
    from loopengine.models.scripted import (
        use as use,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'loopengine' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
