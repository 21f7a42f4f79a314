"""Ask SAM CLI's own providers what ``sam local`` would do with a template; print it as JSON.

Runs under the SAM CLI's own interpreter (``.venv-sam``, see the Makefile: aws-sam-cli pins an
exact boto3 that the project's environment must not be held to), never imported by the suite:

    .venv-sam/bin/python tests/sam_cli_probe.py '{"template": "template.yaml", "cwd": ".",
        "overrides": {}, "disable_authorizer": false, "env_file": "events/env.json"}'

A JSON list of such requests gets a JSON list of answers, from the one interpreter (importing SAM
CLI costs about 2 s of CPU).

Output: ``routes`` (what ``sam local start-api`` mounts: ``[route, function logical id, handler]``,
the function as ``SamFunctionProvider`` finds it under the route's function name), ``functions``
(logical id -> handler, function name, timeout) and, with ``env_file``, ``env`` (logical id -> the
environment ``sam local invoke --env-vars <env_file>`` gives that function).
"""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any


def probe(request: dict[str, Any]) -> dict[str, Any]:
    """What SAM CLI's providers report for ``request`` (see the module docstring)."""
    from samcli.commands.local.lib.local_lambda import LocalLambdaRunner
    from samcli.lib.providers.api_provider import ApiProvider
    from samcli.lib.providers.sam_function_provider import SamFunctionProvider
    from samcli.lib.providers.sam_stack_provider import SamLocalStackProvider

    stacks, _ = SamLocalStackProvider.get_stacks(
        request["template"], parameter_overrides=request.get("overrides") or None
    )
    functions = SamFunctionProvider(stacks)
    api = ApiProvider(
        stacks, cwd=request["cwd"], disable_authorizer=request.get("disable_authorizer", False)
    ).api
    routes = []
    for route in api.routes:
        fn = functions.get(route.function_name) if route.function_name else None
        for method in route.methods:
            routes.append([f"{method} {route.path}", fn.name if fn else None, fn.handler if fn else None])
    out: dict[str, Any] = {
        "routes": routes,
        "functions": {
            fn.name: {"handler": fn.handler, "functionname": fn.functionname, "timeout": fn.timeout}
            for fn in functions.get_all()
        },
    }
    if request.get("env_file"):
        with open(request["env_file"]) as fh:
            values = json.load(fh)
        # the container runtime is not needed to build the environment
        runner = LocalLambdaRunner(
            None, functions, request["cwd"], request["cwd"], aws_region="us-east-1", env_vars_values=values
        )
        out["env"] = {fn.name: runner._make_env_vars(fn).resolve() for fn in functions.get_all()}
    return out


def main() -> None:
    """Read the request (or a list of them) from argv[1], print the answer (or the list of answers)."""
    request = json.loads(sys.argv[1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SAM CLI's use of APIs samtranslator/jsonschema deprecate
        answer = [probe(one) for one in request] if isinstance(request, list) else probe(request)
        print(json.dumps(answer))


if __name__ == "__main__":
    main()
