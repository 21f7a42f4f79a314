"""Secrets at runtime: the environment with secrets read from AWS Secrets Manager merged over it.

In AWS a function's environment holds no secret values, only where to find them: for a variable
``NAME`` (``LOOPENGINE_ADMIN_AUTH``, ``ANTHROPIC_API_KEY``, ...), ``<BASE>_SECRET_ARN`` names a
Secrets Manager secret (its ARN or name), where ``BASE`` is ``NAME`` without a trailing
``_SECRET`` (:func:`arn_variable`): ``LOOPENGINE_ADMIN_AUTH_SECRET_ARN``,
``LOOPENGINE_MAGIC_LINK_SECRET_ARN``, ``LOOPENGINE_DEFAULT_WEBHOOK_SECRET_ARN``, ...

:func:`environ` is ``os.environ`` with every such ``NAME`` answered from its secret (read with
Powertools Parameters' ``get_secret`` and cached for :data:`MAX_AGE` seconds, so a rotated secret
is picked up without a redeploy). A ``NAME`` with no ``..._SECRET_ARN`` is the plain variable, as
locally (``loopengine dev``, tests). A secret that cannot be read is a ``ConfigError`` naming the
variable, never the value. Values are never logged.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

from loopengine.domain.base.errors import ConfigError

ARN_SUFFIX = "_SECRET_ARN"
MAX_AGE = 300
"""Seconds a secret read from Secrets Manager is reused before it is read again."""


def arn_variable(name: str) -> str:
    """The variable naming ``name``'s secret: ``<name without a trailing _SECRET>_SECRET_ARN``."""
    return name.removesuffix("_SECRET") + ARN_SUFFIX


def read_secret(secret_id: str, variable: str) -> str:
    """The secret's string, cached for :data:`MAX_AGE` s; ``ConfigError`` when it cannot be read."""
    from aws_lambda_powertools.utilities.parameters import get_secret

    try:
        value = get_secret(secret_id, max_age=MAX_AGE)
    except Exception as exc:  # any failure to read: say which variable, never a value
        raise ConfigError(f"cannot read the secret for {variable} ({type(exc).__name__})") from None
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"the secret for {variable} is not UTF-8 text") from None
    if not isinstance(value, str):
        raise ConfigError(f"the secret for {variable} must be a plain string")
    return value


class SecretEnv(Mapping[str, str]):
    """``base`` with each ``NAME`` whose ``<BASE>_SECRET_ARN`` is set answered from Secrets Manager."""

    def __init__(self, base: Mapping[str, str]) -> None:
        self.base = base

    def _secret_id(self, key: str) -> str | None:
        if key.endswith(ARN_SUFFIX):
            return None
        return self.base.get(arn_variable(key)) or None

    def __getitem__(self, key: str) -> str:
        secret_id = self._secret_id(key)
        if secret_id is not None:
            return read_secret(secret_id, key)
        return self.base[key]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and (self._secret_id(key) is not None or key in self.base)

    def _names(self) -> set[str]:
        names = set(self.base)
        for key, value in self.base.items():
            if key.endswith(ARN_SUFFIX) and value:  # both spellings answer: X and X_SECRET
                stem = key.removesuffix(ARN_SUFFIX)
                names |= {stem, stem + "_SECRET"}
        return names

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._names()))

    def __len__(self) -> int:
        return len(self._names())


def environ() -> SecretEnv:
    """The process environment with its secrets resolved (each read when asked for, then cached)."""
    return SecretEnv(os.environ)
