"""The JSON shapes that cross boundaries untyped on purpose (tool arguments, stored blobs): one alias each."""

from __future__ import annotations

from typing import Any

JsonDict = dict[str, Any]
"""A JSON object: tool arguments and results, stored forms, wire bodies."""
