"""deploy/: the autoscaling examples of docs/scale-out.md are valid for what
reads them, checked offline against schemas vendored in deploy/schemas
(KEDA's ScaledObject CRD, the CloudWatch agent's configuration) and against
botocore's own models of the ECS and Application Auto Scaling APIs (the
request shapes the AWS CLI validates with)."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import botocore.session
import jsonschema
import pytest
import yaml
from botocore.validate import validate_parameters

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def strict(schema):
    """The API server prunes or refuses fields a structural schema does not
    name (kubectl apply --validate=strict refuses them): JSON Schema allows
    them unless told, so a misspelt field would pass. Objects that name
    their properties and do not keep unknown fields get
    additionalProperties: false."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def keda_schema():
    schema = json.loads((DEPLOY / "schemas" / "keda-scaledobject-v1alpha1.json").read_text())
    schema.pop("$comment")
    # apiVersion, kind and metadata are the API server's (ObjectMeta), not the CRD's to describe
    schema["properties"]["metadata"] = {"type": "object", "required": ["name"],
                                        "properties": {"name": {"type": "string"}, "namespace": {"type": "string"},
                                                       "labels": {"type": "object"},
                                                       "annotations": {"type": "object"}}}
    return strict(schema)


def test_the_keda_scaled_object_is_valid_and_asks_for_the_suggested_hosts():
    [scaled] = yaml.safe_load_all((DEPLOY / "kubernetes" / "keda-scaledobject.yaml").read_text())
    jsonschema.Draft7Validator(keda_schema()).validate(scaled)
    assert (scaled["apiVersion"], scaled["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    assert trigger["metadata"]["threshold"] == "1"  # ceil(suggested / 1) pods
    assert_names_exported(trigger["metadata"]["query"])


def test_the_schema_check_catches_a_misspelt_field():
    [scaled] = yaml.safe_load_all((DEPLOY / "kubernetes" / "keda-scaledobject.yaml").read_text())
    scaled["spec"]["maxReplicas"] = scaled["spec"].pop("maxReplicaCount")
    with pytest.raises(jsonschema.ValidationError, match="maxReplicas"):
        jsonschema.Draft7Validator(keda_schema()).validate(scaled)


def test_the_pods_may_patch_their_own_deletion_cost():
    account, role, binding = yaml.safe_load_all((DEPLOY / "kubernetes" / "worker-protection.yaml").read_text())
    assert (account["kind"], role["kind"], binding["kind"]) == ("ServiceAccount", "Role", "RoleBinding")
    [rule] = role["rules"]
    assert rule["resources"] == ["pods"] and "patch" in rule["verbs"] and rule["apiGroups"] == [""]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0]["name"] == account["metadata"]["name"]


def aws_input(service: str, operation: str):
    return botocore.session.get_session().get_service_model(service).operation_model(operation).input_shape


def test_the_ecs_target_tracking_policy_is_a_valid_put_scaling_policy_request():
    policy = json.loads((DEPLOY / "ecs" / "scaling-policy.json").read_text())
    validate_parameters(policy, aws_input("application-autoscaling", "PutScalingPolicy"))
    metrics = policy["TargetTrackingScalingPolicyConfiguration"]["CustomizedMetricSpecification"]["Metrics"]
    names = {m["MetricStat"]["Metric"]["MetricName"] for m in metrics if "MetricStat" in m}
    assert "fairlane_suggested_hosts" in names
    assert_names_exported(" ".join(names - {"DesiredTaskCount"}))
    [returned] = [m for m in metrics if m.get("ReturnData")]
    ids = {m["Id"] for m in metrics} - {returned["Id"]}
    assert set(re.findall(r"[a-z_]+", returned["Expression"])) == ids


def test_the_ecs_task_definition_is_valid_and_lets_the_worker_drain():
    task = json.loads((DEPLOY / "ecs" / "worker-task-definition.json").read_text())
    validate_parameters(task, aws_input("ecs", "RegisterTaskDefinition"))
    [container] = task["containerDefinitions"]
    env = {e["name"]: e["value"] for e in container["environment"]}
    assert env["FAIRLANE_SCALE_PROTECTION"] == "ecs"
    # SIGKILL no sooner than the grace period + 15 s (docs/operations.md, "Deploying")
    assert container["stopTimeout"] >= float(env["FAIRLANE_SHUTDOWN_GRACE_S"]) + 15


def test_the_cloudwatch_agent_config_is_valid_and_publishes_what_the_policy_reads():
    schema = json.loads((DEPLOY / "schemas" / "cloudwatch-agent-config.json").read_text())
    schema.pop("$comment")
    config = json.loads((DEPLOY / "ecs" / "cloudwatch-agent.json").read_text())
    jsonschema.Draft4Validator(schema).validate(config)
    emf = config["logs"]["metrics_collected"]["prometheus"]["emf_processor"]
    policy = json.loads((DEPLOY / "ecs" / "scaling-policy.json").read_text())
    [suggested] = [m for m in policy["TargetTrackingScalingPolicyConfiguration"]["CustomizedMetricSpecification"]
                   ["Metrics"] if m["Id"] == "suggested"]
    assert suggested["MetricStat"]["Metric"]["Namespace"] == emf["metric_namespace"]
    [declaration] = emf["metric_declaration"]
    assert any(re.fullmatch(s, "fairlane_suggested_hosts") for s in declaration["metric_selectors"])
    scrape = yaml.safe_load((DEPLOY / "ecs" / "prometheus.yaml").read_text())
    assert re.fullmatch(declaration["label_matcher"], scrape["scrape_configs"][0]["job_name"])


def assert_names_exported(text: str) -> None:
    """Every fairlane_* series `text` names is one /metrics exports."""
    source = (ROOT / "project" / "metrics.py").read_text()
    for name in re.findall(r"fairlane_[a-z_]+", text):
        assert f'"{name}"' in source, f"{name} is not a series of /metrics"
