"""ResumeInvoker over Lambda's asynchronous invoke (``InvocationType=Event``).

The payload is ``{"turnId": ...}``. A turn records the resume function's published version when
it starts, and every resume of it invokes that qualified version, so code published while a turn
is parked governs the next turn, not the parked one. ``qualifier`` is this deployment's version,
used for turns that recorded none. The boto3 client is created on first use (a client built at import
time would escape moto in tests and pay its cost on routes that never resume anything).
"""

from __future__ import annotations

import json
from typing import Any

from loopengine.domain.base.errors import StoreError


class LambdaInvoker:
    """Invoke the resume function asynchronously."""

    def __init__(
        self, function_name: str, qualifier: str | None = None, client: Any = None, pin: bool = True
    ) -> None:
        self.function_name = function_name
        self.qualifier = qualifier
        self.pin = pin
        self._client = client

    def _lambda(self) -> Any:
        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.client(
                "lambda", config=Config(retries={"mode": "standard", "max_attempts": 5})
            )
        return self._client

    def invoke(self, turn_id: str, version: str | None = None) -> None:
        """Queue the resume of ``turn_id`` on its pinned ``version``; delivered at least once.

        With ``pin=False`` (operator override, ``LOOPENGINE_PIN_RESUME_VERSION=false``) every turn
        resumes on this deployment's current version instead.
        """
        kwargs: dict[str, Any] = {
            "FunctionName": self.function_name,
            "InvocationType": "Event",
            "Payload": json.dumps({"turnId": turn_id}).encode(),
        }
        qualifier = (version if self.pin else None) or self.qualifier
        if qualifier:
            kwargs["Qualifier"] = qualifier
        try:
            self._lambda().invoke(**kwargs)
        except Exception as exc:  # botocore errors: surface as a domain error
            raise StoreError(f"could not queue the resume of {turn_id}: {exc}") from exc
