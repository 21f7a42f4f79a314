"""The DynamoDB client: botocore's standard retries, and a session that costs little to make again.

Each :func:`new_client` gets a botocore session of its own (its own credentials, its own connection
pool: what a client made after a SnapStart restore needs) on this process's one data loader.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def new_client(max_attempts: int = 5) -> DynamoDBClient:
    """A DynamoDB client making at most ``max_attempts`` tries per call.

    Retries are botocore's ``standard`` mode: throttling, 5xx and timeouts, with jittered backoff.
    Region, credentials and ``AWS_ENDPOINT_URL_DYNAMODB`` come from the usual boto3 sources.
    """
    import boto3
    from botocore.config import Config

    config = Config(
        retries={"mode": "standard", "total_max_attempts": max_attempts}, connect_timeout=3, read_timeout=10
    )
    return boto3.session.Session(botocore_session=_botocore_session()).client("dynamodb", config=config)


_LOADER: list[Any] = []
"""The first session's data loader, which holds the service models and endpoint data it parsed."""


def _botocore_session() -> Any:
    """A new botocore session (its own credentials and connections) on this process's one data loader.

    A client from an all-new session costs about 100 ms of CPU, most of it parsing botocore's JSON
    service model and endpoint data again; on the shared loader about 11 ms. Nothing a loader holds
    is per account or per connection, so a client made after a SnapStart restore is still new.
    """
    import botocore.session

    core = botocore.session.get_session()
    if _LOADER:
        core.register_component("data_loader", _LOADER[0])
    else:
        _LOADER.append(core.get_component("data_loader"))
    return core
