"""ResumeInvoker over Lambda's asynchronous invoke (``InvocationType=Event``).

The payload is ``{"turnId": ...}``. ``qualifier`` pins the published version of the resume
function a turn is resumed by. The boto3 client is created on first use (a client built at import
time would escape moto in tests and pay its cost on routes that never resume anything).
"""

from __future__ import annotations

import json
from typing import Any

from loopengine.errors import StoreError


class LambdaInvoker:
    """Invoke the resume function asynchronously."""

    def __init__(self, function_name: str, qualifier: str | None = None, client: Any = None) -> None:
        self.function_name = function_name
        self.qualifier = qualifier
        self._client = client

    def _lambda(self) -> Any:
        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.client(
                "lambda", config=Config(retries={"mode": "standard", "max_attempts": 5})
            )
        return self._client

    def invoke(self, turn_id: str) -> None:
        """Queue the resume of ``turn_id``; Lambda delivers it at least once."""
        kwargs: dict[str, Any] = {
            "FunctionName": self.function_name,
            "InvocationType": "Event",
            "Payload": json.dumps({"turnId": turn_id}).encode(),
        }
        if self.qualifier:
            kwargs["Qualifier"] = self.qualifier
        try:
            self._lambda().invoke(**kwargs)
        except Exception as exc:  # botocore errors: surface as a domain error
            raise StoreError(f"could not queue the resume of {turn_id}: {exc}") from exc
