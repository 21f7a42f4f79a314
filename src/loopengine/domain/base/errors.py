"""One error tree for the whole library (standard library only).

    LoopengineError
    ├── InvalidInput          bad request data, e.g. editedArgs failing the schema (400)
    │   └── WrongKind         a question's pendingId sent to the approval route (400)
    ├── NotFound              unknown agent or turn (404)
    ├── Forbidden             the decider may not decide this item (403)
    ├── Conflict              the request contradicts current state, e.g. argsHash mismatch (409)
    ├── VersionConflict       a compare-and-set lost its race; carries the current record
    ├── AlreadyExists         a create found the key taken
    ├── ModelError            the model call failed
    │   ├── RetryableModelError   overload, rate limit, timeout, 5xx: worth trying again
    │   └── FatalModelError       bad request, auth: retrying will not help
    ├── StoreError            the storage backend failed (after its own bounded retries)
    ├── DeliveryError         a notification could not be delivered (recorded, never fatal)
    ├── ToolOutcomeUnknown    a tool's request went out and no answer came: recorded ``unknown``
    └── ConfigError           an agent folder or rules file is malformed
        └── AgentUnavailable  one agent's folder is broken; requests to that agent answer 503

Adapters raise these ``from`` the SDK's exception; handlers map them to HTTP status in one table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class LoopengineError(Exception):
    """Base of every error loopengine raises on purpose."""

    code = "error"


class InvalidInput(LoopengineError):
    """The caller sent something that cannot be accepted as it is."""

    code = "invalid_input"


class WrongKind(InvalidInput):
    """A pendingId of the other kind was sent to this route."""

    code = "wrong_kind"


class NotFound(LoopengineError):
    """The named agent, turn or session does not exist."""

    code = "not_found"


class Forbidden(LoopengineError):
    """The caller is known but may not do this."""

    code = "forbidden"


class Conflict(LoopengineError):
    """The request contradicts the current state; ``details`` go into the error body."""

    code = "conflict"

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.details = details or {}


class VersionConflict(LoopengineError):
    """A conditional write found a different version; ``current`` is what is stored now."""

    code = "version_conflict"

    def __init__(self, message: str, current: Any = None) -> None:
        super().__init__(message)
        self.current = current


class AlreadyExists(LoopengineError):
    """A create found its key already taken."""

    code = "already_exists"


class ModelError(LoopengineError):
    """The model call failed."""

    code = "model_error"
    retryable = False


class RetryableModelError(ModelError):
    """Transient model failure (overload, rate limit, timeout, 5xx)."""

    retryable = True


class FatalModelError(ModelError):
    """Permanent model failure (bad request, authentication)."""


class StoreError(LoopengineError):
    """The storage backend failed."""

    code = "store_error"


class DeliveryError(LoopengineError):
    """A notification could not be delivered; the caller records it and moves on."""

    code = "delivery_error"


class ToolOutcomeUnknown(LoopengineError):
    """A tool sent its request and no answer came back: it may have taken effect.

    A tool raises it (the MCP client does, after a timeout or a dropped connection) so the call is
    recorded as ``unknown``, not as a failure, and is never run again.
    """

    code = "tool_outcome_unknown"


class ConfigError(LoopengineError):
    """An agent folder, rules file or environment setting is malformed."""

    code = "config_error"


class AgentUnavailable(ConfigError):
    """One agent's folder is broken (YAML, rules, tools.py); ``problems`` say where, file:line each.

    Only requests to that agent fail (503); every other agent keeps working.
    """

    code = "agent_unavailable"

    def __init__(self, message: str, problems: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.problems = tuple(problems)
