"""The timing settings a deployment may override, read and checked without loading the engine.

``loopengine dev`` checks them once at start (a malformed value fails there, not in every
environment) before anything heavy is imported; :mod:`loopengine.bootstrap` applies them to the
Runtime's fields of the same names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from loopengine.domain.base.errors import ConfigError

TIMINGS = {
    "lease_seconds": "LOOPENGINE_LEASE_SECONDS",
    "handoff_grace": "LOOPENGINE_HANDOFF_GRACE_SECONDS",
    "model_retry_seconds": "LOOPENGINE_MODEL_RETRY_SECONDS",
}
"""Runtime timing fields and the variables that override them (local and test use)."""


def timings(env: Mapping[str, str]) -> dict[str, float]:
    """The :data:`TIMINGS` overrides set in ``env``, by Runtime field; ``ConfigError`` if malformed."""
    out: dict[str, float] = {}
    for field_name, var in TIMINGS.items():
        raw = (env.get(var) or "").strip()
        if not raw:
            continue
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(f"{var} must be a number of seconds greater than 0, not {raw[:40]!r}")
        out[field_name] = value
    return out
