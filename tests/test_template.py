"""Deployment checks: template.yaml, the offline SAM transform, requirements.txt, sample events.

Nothing here needs AWS credentials, Docker or a network: cfn-lint and samtranslator run in
process, and the managed-policy lookup the transform would make against IAM is stubbed (the
template names no AWS managed policy by its bare name, so an empty map is the complete answer).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

from loopengine.http import secrets
from tests.design_routes import DESIGN_ROUTES, PUBLIC_ROUTES

# One pytest-xdist worker runs them all: one loads cfn-lint and the SAM translator and transforms the template
pytestmark = pytest.mark.xdist_group("template")

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "template.yaml"
EVENTS = ROOT / "events"
REGION = "us-east-1"
BASIC_ADMIN_SECRET = "Basic YWRtaW46c2VjcmV0"  # admin:secret

# Every secret the functions read, with the parameter naming its Secrets Manager secret.
SECRET_ENV = {
    "ANTHROPIC_API_KEY": "AnthropicApiKeySecretName",
    "LOOPENGINE_DEFAULT_WEBHOOK_SECRET": "DefaultWebhookSecretName",
    "LOOPENGINE_ADMIN_AUTH": "AdminAuthSecretName",
    "LOOPENGINE_SLACK_SIGNING_SECRET": "SlackSigningSecretName",
    "LOOPENGINE_MAGIC_LINK_SECRET": "MagicLinkSecretName",
}
# Which secrets each function reads: every function runs turns and notifies (model key, webhook
# secret, magic-link key for emailed links); only the api checks credentials and Slack clicks.
RUNS_TURNS = {"ANTHROPIC_API_KEY", "LOOPENGINE_DEFAULT_WEBHOOK_SECRET", "LOOPENGINE_MAGIC_LINK_SECRET"}
FUNCTION_SECRETS = {
    "ApiFunction": RUNS_TURNS | {"LOOPENGINE_ADMIN_AUTH", "LOOPENGINE_SLACK_SIGNING_SECRET"},
    "ResumeFunction": RUNS_TURNS,
    "ScheduleFunction": RUNS_TURNS,
}


def _offline_policies() -> Any:
    """A managed-policy loader that answers the transform's lookup without calling IAM.

    (cfn-lint and the SAM translator are imported by the tests that use them: collecting this
    module in every pytest-xdist worker stays cheap.)
    """
    from samtranslator.translator.managed_policy_translator import ManagedPolicyLoader

    class OfflineManagedPolicyLoader(ManagedPolicyLoader):
        def __init__(self) -> None:
            super().__init__(iam_client=None)

        def load(self) -> dict[str, str]:
            return {}

    return OfflineManagedPolicyLoader()


def _describe(matches: list[Any]) -> str:
    return "\n".join(str(m) for m in matches)


def _sam_template() -> dict[str, Any]:
    template: dict[str, Any] = yaml_parse(TEMPLATE.read_text())
    return template


@pytest.fixture(scope="module")
def sam_template() -> dict[str, Any]:
    return _sam_template()


@pytest.fixture(scope="module")
def transformed() -> dict[str, Any]:
    template = _sam_template()
    # What `sam package` does: the local CodeUri becomes the uploaded artifact.
    template["Globals"]["Function"]["CodeUri"] = "s3://artifacts/loopengine.zip"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_DEFAULT_REGION", REGION)  # the translator reads the region from boto3
        from samtranslator.translator.transform import transform

        result: dict[str, Any] = transform(template, {"AWS::Region": REGION}, _offline_policies())
    return result


def _resources(template: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == type_}


def _routes(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Route key -> OpenAPI operation of the HTTP API's body (SAM template or transformed)."""
    api = template["Resources"]["HttpApi"]["Properties"]
    body = api.get("DefinitionBody") or api["Body"]
    return {f"{m.upper()} {path}": op for path, item in body["paths"].items() for m, op in item.items()}


def _http_events() -> dict[str, dict[str, Any]]:
    loaded = {p.name: json.loads(p.read_text()) for p in sorted(EVENTS.glob("*.json"))}
    return {name: ev for name, ev in loaded.items() if "routeKey" in ev}


# --------------------------------------------------------------------------- (a) cfn-lint


def test_cfn_lint_passes_on_the_sam_template() -> None:
    from cfnlint.api import ManualArgs, lint_file

    matches = lint_file(TEMPLATE, config=ManualArgs(regions=[REGION]))
    assert matches == [], _describe(matches)


# ----------------------------------------------------------- (b) offline SAM transform + lint


def test_transformed_template_passes_cfn_lint(transformed: dict[str, Any]) -> None:
    # Circular dependencies only exist after the transform (E3004 catches them here).
    from cfnlint.api import ManualArgs, lint

    matches = lint(json.dumps(transformed), config=ManualArgs(regions=[REGION]))
    assert matches == [], _describe(matches)


def test_every_function_publishes_a_snapstart_version_behind_the_live_alias(
    transformed: dict[str, Any],
) -> None:
    functions = _resources(transformed, "AWS::Lambda::Function")
    assert set(functions) == {"ApiFunction", "ResumeFunction", "ScheduleFunction"}
    aliases = _resources(transformed, "AWS::Lambda::Alias")
    for name, fn in functions.items():
        props = fn["Properties"]
        assert props["Runtime"] == "python3.12"
        assert props["SnapStart"] == {"ApplyOn": "PublishedVersions"}
        assert props["TracingConfig"] == {"Mode": "Active"}
        assert f"{name}Aliaslive" in aliases
    # Parked turns resume on the version they recorded, so published versions are retained.
    versions = _resources(transformed, "AWS::Lambda::Version").values()
    assert {v["DeletionPolicy"] for v in versions} == {"Retain"}


def test_callers_invoke_the_published_resume_version(transformed: dict[str, Any]) -> None:
    versions = _resources(transformed, "AWS::Lambda::Version")
    resume_version = next(k for k in versions if k.startswith("ResumeFunctionVersion"))
    pinned = {"Fn::GetAtt": [resume_version, "Version"]}
    for name in ("ApiFunction", "ScheduleFunction"):
        env = transformed["Resources"][name]["Properties"]["Environment"]["Variables"]
        assert env["LOOPENGINE_RESUME_FUNCTION"] == {"Ref": "ResumeFunction"}
        assert env["LOOPENGINE_RESUME_VERSION"] == pinned
    # The resume worker hands long turns to itself by its fixed name, through its alias.
    resume = transformed["Resources"]["ResumeFunction"]["Properties"]
    assert resume["Environment"]["Variables"]["LOOPENGINE_RESUME_FUNCTION"] == resume["FunctionName"]
    assert resume["Environment"]["Variables"]["LOOPENGINE_RESUME_VERSION"] == "live"
    # Async-invoke settings are per qualifier: the invoked version carries its own.
    configs = _resources(transformed, "AWS::Lambda::EventInvokeConfig")
    version_config = configs["ResumeVersionEventInvokeConfig"]["Properties"]
    assert version_config["Qualifier"] == pinned
    assert version_config["MaximumRetryAttempts"] == 2
    assert version_config["DestinationConfig"]["OnFailure"]["Destination"] == {
        "Fn::GetAtt": ["FailureQueue", "Arn"]
    }


def test_no_secret_value_reaches_a_function_environment(
    sam_template: dict[str, Any], transformed: dict[str, Any]
) -> None:
    # read at runtime (handlers/secrets.py), never resolved into the environment at deploy time
    assert "{{resolve:" not in TEMPLATE.read_text()
    for name, fn in _resources(transformed, "AWS::Lambda::Function").items():
        env = fn["Properties"]["Environment"]["Variables"]
        # the plain names are declared only so `sam local --env-vars` can set them: empty in AWS
        assert all(env[key] == "" for key in set(env) & set(SECRET_ENV)), name
    for parameter in SECRET_ENV.values():
        declared = sam_template["Parameters"][parameter]
        assert (declared["Type"], declared["Default"]) == ("String", ""), parameter


@pytest.mark.parametrize("function", sorted(FUNCTION_SECRETS))
def test_each_function_is_told_where_exactly_its_secrets_are(
    function: str, sam_template: dict[str, Any], transformed: dict[str, Any]
) -> None:
    env = transformed["Resources"][function]["Properties"]["Environment"]["Variables"]
    given = {k for k in env if k.endswith(secrets.ARN_SUFFIX)}
    wanted = FUNCTION_SECRETS[function]
    assert given == {secrets.arn_variable(name) for name in wanted}, function
    for name in wanted:
        parameter = SECRET_ENV[name]
        condition, value, unset = env[secrets.arn_variable(name)]["Fn::If"]
        assert (value, unset) == ({"Ref": parameter}, {"Ref": "AWS::NoValue"}), name
        assert sam_template["Conditions"][condition] == {
            "Fn::Not": [{"Fn::Equals": [{"Ref": parameter}, ""]}]
        }, name


def _secret_grants(transformed: dict[str, Any], function: str) -> dict[str, str]:
    """Secret parameter -> the condition its GetSecretValue grant is under, for one function's role."""
    role = transformed["Resources"][f"{function}Role"]["Properties"]
    grants: dict[str, str] = {}
    for policy in role["Policies"]:
        condition = policy["Fn::If"][0] if "Fn::If" in policy else ""
        if "Fn::If" in policy:
            assert policy["Fn::If"][2] == {"Ref": "AWS::NoValue"}
            policy = policy["Fn::If"][1]
        for statement in policy["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if not any(str(a).lower().startswith("secretsmanager:") for a in actions):
                assert "secretsmanager" not in json.dumps(statement), statement
                continue
            assert actions == ["secretsmanager:GetSecretValue"], statement
            assert statement["Effect"] == "Allow"
            resource = statement["Resource"]["Fn::Sub"]
            match = re.fullmatch(
                r"arn:\$\{AWS::Partition\}:secretsmanager:\$\{AWS::Region\}:\$\{AWS::AccountId\}"
                r":secret:\$\{(\w+)\}-\?\?\?\?\?\?",
                resource,
            )
            assert match, resource  # one named secret (plus its 6-character suffix), no wildcard
            assert match.group(1) not in grants, "granted twice"
            grants[match.group(1)] = condition
    return grants


@pytest.mark.parametrize("function", sorted(FUNCTION_SECRETS))
def test_each_function_may_read_exactly_its_secrets(
    function: str, sam_template: dict[str, Any], transformed: dict[str, Any]
) -> None:
    grants = _secret_grants(transformed, function)
    assert set(grants) == {SECRET_ENV[name] for name in FUNCTION_SECRETS[function]}, function
    for parameter, condition in grants.items():
        # granted only when the parameter names a secret
        assert sam_template["Conditions"][condition] == {
            "Fn::Not": [{"Fn::Equals": [{"Ref": parameter}, ""]}]
        }, parameter


def test_the_api_alone_holds_the_credentials_and_the_slack_secret() -> None:
    only_api = {"LOOPENGINE_ADMIN_AUTH", "LOOPENGINE_SLACK_SIGNING_SECRET"}
    assert only_api <= FUNCTION_SECRETS["ApiFunction"]
    assert not only_api & (FUNCTION_SECRETS["ResumeFunction"] | FUNCTION_SECRETS["ScheduleFunction"])


# --------------------------------------------------------------- (c) requirements are current


def test_src_requirements_txt_is_current() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_requirements.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("profile", ["default", "dev"])
def test_samconfig_profile_deploys_with_known_parameters(profile: str, sam_template: dict[str, Any]) -> None:
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())
    assert config["version"] == 0.1
    deploy = config[profile]["deploy"]["parameters"]
    assert deploy["capabilities"] == "CAPABILITY_IAM"
    assert deploy["resolve_s3"] is True
    assert deploy["confirm_changeset"] is True
    declared = sam_template["Parameters"]
    for override in shlex.split(deploy["parameter_overrides"]):
        name, _, value = override.partition("=")
        assert name in declared, f"{profile}: unknown parameter {name}"
        allowed = declared[name].get("AllowedValues")
        assert allowed is None or value in [str(a) for a in allowed], f"{profile}: {override}"
    stack = config[profile]["global"]["parameters"]["stack_name"]
    assert stack == {"default": "loopengine", "dev": "loopengine-dev"}[profile]


# ------------------------------------------------------------------- (d) routes and events


def test_template_routes_are_designs_route_table(sam_template: dict[str, Any]) -> None:
    assert set(_routes(sam_template)) == DESIGN_ROUTES


def test_jwt_authorizer_guards_exactly_the_authenticated_routes(
    sam_template: dict[str, Any],
) -> None:
    # Conditional: with JwtIssuer empty no operation names an authorizer (the app checks HTTP
    # Basic). The false branches are values, not AWS::NoValue, which SAM CLI cannot read.
    conditional_jwt = {"Fn::If": ["UseJwtAuthorizer", [{"jwt": []}], []]}
    for key, op in _routes(sam_template).items():
        if key in PUBLIC_ROUTES:
            assert "security" not in op, key
        else:
            assert op["security"] == conditional_jwt, key
    body = sam_template["Resources"]["HttpApi"]["Properties"]["DefinitionBody"]
    condition, schemes, off = body["components"]["securitySchemes"]["Fn::If"]
    assert (condition, off) == ("UseJwtAuthorizer", {})
    authorizer = schemes["jwt"]["x-amazon-apigateway-authorizer"]
    assert authorizer["type"] == "jwt"
    assert authorizer["identitySource"] == "$request.header.Authorization"
    assert authorizer["jwtConfiguration"] == {
        "issuer": {"Ref": "JwtIssuer"},
        "audience": {"Ref": "JwtAudience"},
    }


def test_every_route_invokes_the_api_functions_live_alias(
    sam_template: dict[str, Any], transformed: dict[str, Any]
) -> None:
    api_fn = sam_template["Resources"]["ApiFunction"]["Properties"]
    assert api_fn["FunctionName"] == {"Fn::Sub": "${AWS::StackName}-api"}
    alias_arn = (
        "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:${AWS::StackName}-api:live"
    )
    for key, op in _routes(transformed).items():
        integration = op["x-amazon-apigateway-integration"]
        assert integration["type"] == "aws_proxy", key
        assert integration["payloadFormatVersion"] == "2.0", key
        assert integration["uri"] == {"Fn::Sub": alias_arn}, key
    # the transform keeps the API's logical id (Outputs and LOOPENGINE_PUBLIC_URL use it)
    assert transformed["Resources"]["HttpApi"]["Type"] == "AWS::ApiGatewayV2::Api"
    # API Gateway may invoke exactly that alias, from this API only
    permission = transformed["Resources"]["HttpApiInvokePermission"]["Properties"]
    assert permission["FunctionName"] == {"Ref": "ApiFunctionAliaslive"}
    assert permission["Principal"] == "apigateway.amazonaws.com"
    assert "${HttpApi}/*" in permission["SourceArn"]["Fn::Sub"]
    stages = _resources(transformed, "AWS::ApiGatewayV2::Stage")
    [stage] = stages.values()
    assert stage["Properties"]["StageName"] == "$default"
    assert stage["Properties"]["AutoDeploy"] is True
    assert stage["Properties"]["DefaultRouteSettings"]["ThrottlingRateLimit"] == 100
    assert "AccessLogSettings" in stage["Properties"]


def test_every_event_file_parses() -> None:
    files = sorted(EVENTS.glob("*.json"))
    assert files
    for path in files:
        json.loads(path.read_text())


def test_every_route_has_a_sample_event(sam_template: dict[str, Any]) -> None:
    covered = {ev["routeKey"] for ev in _http_events().values()}
    assert set(_routes(sam_template)) <= covered
    assert covered <= DESIGN_ROUTES, "a sample event names a route the API does not have"


@pytest.mark.parametrize("name", sorted(_http_events()))
def test_http_event_is_a_consistent_v2_payload(name: str) -> None:
    ev = _http_events()[name]
    method, route = ev["routeKey"].split(" ", 1)
    assert ev["version"] == "2.0"
    assert ev["isBase64Encoded"] is False
    ctx = ev["requestContext"]
    assert ctx["stage"] == "$default"
    assert ctx["routeKey"] == ev["routeKey"]
    assert ctx["http"]["method"] == method
    assert ctx["http"]["path"] == ev["rawPath"]
    assert ctx["http"]["sourceIp"]
    assert ctx["requestId"]
    assert isinstance(ev["rawQueryString"], str)
    assert "body" not in ev or isinstance(ev["body"], str)
    params = ev.get("pathParameters", {})
    assert route.format(**params) == ev["rawPath"]
    assert set(re.findall(r"{(\w+)}", route)) == set(params)
    has_basic = ev["headers"].get("authorization") == BASIC_ADMIN_SECRET
    assert has_basic is (ev["routeKey"] not in PUBLIC_ROUTES)


def _schedule_inputs(sam_template: dict[str, Any]) -> dict[str, Any]:
    events = sam_template["Resources"]["ScheduleFunction"]["Properties"]["Events"]
    return {name: json.loads(e["Properties"]["Input"]) for name, e in events.items()}


def test_schedule_events_match_the_rule_inputs(sam_template: dict[str, Any]) -> None:
    # An EventBridge rule with Input delivers exactly that JSON to the function.
    inputs = _schedule_inputs(sam_template)
    assert json.loads((EVENTS / "schedule_turn.json").read_text()) == inputs["ExampleUnattendedTurn"]
    assert json.loads((EVENTS / "schedule_sweep.json").read_text()) == inputs["ExpirySweep"]
    assert inputs["ExpirySweep"] == {"action": "sweep"}


def test_resume_event_names_a_turn() -> None:
    event = json.loads((EVENTS / "resume.json").read_text())
    assert set(event) == {"turnId"}
    assert event["turnId"].startswith("trn_")


def _statements(transformed: dict[str, Any], function: str) -> list[dict[str, Any]]:
    role = transformed["Resources"][f"{function}Role"]["Properties"]
    statements: list[dict[str, Any]] = []
    for policy in role["Policies"]:
        policy = policy["Fn::If"][1] if "Fn::If" in policy else policy
        statements += policy["PolicyDocument"]["Statement"]
    return statements


def test_every_function_can_reach_the_sns_and_queue_notifier_channels(transformed: dict[str, Any]) -> None:
    # notifier channels `sns` and `queue` default to these variables (loopengine.channels.sns.send / .sqs)
    for name in ("ApiFunction", "ResumeFunction", "ScheduleFunction"):
        env = transformed["Resources"][name]["Properties"]["Environment"]["Variables"]
        assert env["LOOPENGINE_SNS_TOPIC_ARN"] == {"Ref": "Topic"}, name
        assert env["LOOPENGINE_SQS_QUEUE_URL"] == {"Ref": "NotificationQueue"}, name
        by_action = {json.dumps(s["Action"]): s["Resource"] for s in _statements(transformed, name)}
        topic = by_action[json.dumps(["sns:Publish"])]["Fn::Sub"][1]["topicName"]
        queue = by_action[json.dumps(["sqs:SendMessage*"])]["Fn::Sub"][1]["queueName"]
        assert topic == {"Fn::GetAtt": ["Topic", "TopicName"]}, name
        assert queue == {"Fn::GetAtt": ["NotificationQueue", "QueueName"]}, name
    queue_props = transformed["Resources"]["NotificationQueue"]["Properties"]
    assert queue_props["SqsManagedSseEnabled"] is True


# ------------------------------------------------------- (e) Claude on Bedrock: exactly one model

BEDROCK_ACTIONS = ["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"]
MODEL_ID = "anthropic.claude-sonnet-4-5-20250929-v1:0"
PROFILE_ID = "eu.anthropic.claude-sonnet-4-5-20250929-v1:0"
PROFILE_ARN = f"arn:aws:bedrock:eu-west-1:111122223333:inference-profile/{PROFILE_ID}"


def _holds(condition: str, conditions: dict[str, Any], params: dict[str, str]) -> bool:
    """Evaluate one of the template's conditions for the given parameter values."""

    def value(node: Any) -> Any:
        if isinstance(node, dict) and "Ref" in node:
            return params[node["Ref"]]
        if isinstance(node, dict) and "Condition" in node:
            return _holds(node["Condition"], conditions, params)
        if isinstance(node, dict) and "Fn::Equals" in node:
            left, right = node["Fn::Equals"]
            return value(left) == value(right)
        if isinstance(node, dict) and "Fn::Not" in node:
            return not value(node["Fn::Not"][0])
        if isinstance(node, dict) and "Fn::And" in node:
            return all(value(n) for n in node["Fn::And"])
        assert isinstance(node, str), node
        return node

    return bool(value(conditions[condition]))


def _resolve(node: Any, params: dict[str, str], conditions: dict[str, Any]) -> Any:
    """``Fn::Sub``, ``Ref`` and ``Fn::If`` resolved (pseudo-parameters: aws, eu-west-1, one account)."""
    pseudo = {"AWS::Partition": "aws", "AWS::Region": "eu-west-1", "AWS::AccountId": "111122223333", **params}
    if isinstance(node, dict) and "Fn::Sub" in node:
        return re.sub(r"\$\{([^}]+)\}", lambda m: pseudo[m.group(1)], node["Fn::Sub"])
    if isinstance(node, dict) and node.get("Ref") == "AWS::NoValue":
        return None
    if isinstance(node, dict) and "Ref" in node:
        return pseudo[node["Ref"]]
    if isinstance(node, dict) and "Fn::If" in node:
        condition, then, otherwise = node["Fn::If"]
        return _resolve(then if _holds(condition, conditions, params) else otherwise, params, conditions)
    if isinstance(node, dict):
        return {k: _resolve(v, params, conditions) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve(v, params, conditions) for v in node]
    return node


def _bedrock_statements(transformed: dict[str, Any], function: str, params: dict[str, str]) -> list[Any]:
    """The statements of ``function``'s role that mention Bedrock, for these parameters (else defaults)."""
    defaults = {name: str(p.get("Default", "")) for name, p in transformed["Parameters"].items()}
    params = {**defaults, **params}
    conditions = transformed["Conditions"]
    found = []
    for policy in transformed["Resources"][f"{function}Role"]["Properties"]["Policies"]:
        if "Fn::If" in policy:
            condition, policy, otherwise = policy["Fn::If"]
            if not _holds(condition, conditions, params):
                assert otherwise == {"Ref": "AWS::NoValue"}
                continue
        found += [s for s in policy["PolicyDocument"]["Statement"] if "bedrock" in json.dumps(s)]
    return [_resolve(s, params, conditions) for s in found]


@pytest.mark.parametrize("function", sorted(FUNCTION_SECRETS))
def test_each_function_may_invoke_exactly_the_configured_bedrock_model_and_only_with_provider_bedrock(
    function: str, transformed: dict[str, Any]
) -> None:
    anthropic = {"ModelProvider": "anthropic", "BedrockModelId": MODEL_ID, "BedrockInferenceProfile": ""}
    assert _bedrock_statements(transformed, function, anthropic) == []
    model = {**anthropic, "ModelProvider": "bedrock"}
    assert _bedrock_statements(transformed, function, model) == [
        {
            "Sid": "InvokeBedrockModel",
            "Effect": "Allow",
            "Action": BEDROCK_ACTIONS,
            "Resource": f"arn:aws:bedrock:eu-west-1::foundation-model/{MODEL_ID}",
        }
    ]
    # through a cross-Region profile: the profile, and the model in any Region only by way of it
    profile = {**model, "BedrockInferenceProfile": PROFILE_ID}
    assert _bedrock_statements(transformed, function, profile) == [
        {
            "Sid": "InvokeBedrockInferenceProfile",
            "Effect": "Allow",
            "Action": BEDROCK_ACTIONS,
            "Resource": PROFILE_ARN,
        },
        {
            "Sid": "InvokeBedrockModelThroughTheProfile",
            "Effect": "Allow",
            "Action": BEDROCK_ACTIONS,
            "Resource": f"arn:aws:bedrock:*::foundation-model/{MODEL_ID}",
            "Condition": {"StringEquals": {"bedrock:InferenceProfileArn": PROFILE_ARN}},
        },
    ]
    # and the code is told the provider, and which of the two to call
    env = transformed["Resources"][function]["Properties"]["Environment"]["Variables"]
    assert env["LOOPENGINE_MODEL_PROVIDER"] == {"Ref": "ModelProvider"}
    defaults = {name: str(p.get("Default", "")) for name, p in transformed["Parameters"].items()}
    told = [
        _resolve(env["LOOPENGINE_BEDROCK_MODEL"], {**defaults, **p}, transformed["Conditions"])
        for p in (anthropic, model, profile)
    ]
    assert told == [None, MODEL_ID, PROFILE_ID]


def test_provider_bedrock_without_a_model_id_is_refused_at_deploy(sam_template: dict[str, Any]) -> None:
    rule = sam_template["Rules"]["BedrockNeedsAModel"]
    assert rule["RuleCondition"] == {"Fn::Equals": [{"Ref": "ModelProvider"}, "bedrock"]}
    assert rule["Assertions"][0]["Assert"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "BedrockModelId"}, ""]}]}
