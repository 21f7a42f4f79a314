"""JSON Schema validation of tool arguments (the ``jsonschema`` library, imported on first use)."""

from __future__ import annotations

from functools import cache
from typing import Any

from loopengine.domain.base.errors import InvalidInput


@cache
def _validator_for(schema_json: str) -> Any:
    import json

    import jsonschema

    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate_args(schema: dict[str, Any], args: Any, what: str) -> None:
    """Raise ``InvalidInput`` naming every problem when ``args`` does not satisfy ``schema``."""
    import json

    validator = _validator_for(json.dumps(schema, sort_keys=True))
    problems = sorted(validator.iter_errors(args), key=lambda e: list(e.absolute_path))
    if problems:
        detail = "; ".join(
            f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}" for e in problems
        )
        raise InvalidInput(f"{what} do not match the tool's input schema: {detail}")
