"""The HyperPod EKS plan drain, deployed (fminfra/hyperpod/constructs/plan_drain.py):

- which groups it drains (`fminfra.hyperpod.rules.plan_drained`): a HyperPod EKS config with a
  training plan (cap-eks) gets the function, its schedule, both roles, the access entry and the
  RBAC; one without a plan (staging) and a Slurm one with a plan (prod: its nodes drain themselves) get none;
- the roles' least privilege: DescribeTrainingPlan on exactly the config's plans, DescribeCluster on
  the cluster, the schedule's role lambda:InvokeFunction on this function only;
- the access entry against the AWS::EKS::AccessEntry schema cfn-lint ships, the ClusterRole and
  its binding against Kubernetes v1.34.0's strict schemas (tests/data/rbac), and the ClusterRole
  evaluated as Kubernetes RBAC does against every request the handler sends in a drain against
  the fake API server (docs/facts/eks.md#k8s-rbac-request-attributes);
- the handler's `handler()` entry (DescribeCluster's endpoint and CA, the IAM token, urllib) against
  botocore's Stubber and the fake API server behind a local HTTP server.
Each check is also shown to fail on a deliberately broken input.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.parse
from datetime import UTC, datetime
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.stub import Stubber

from fminfra.hyperpod.constructs.plan_drain import PLAN_DRAIN_GROUP, PLAN_DRAIN_ROLE, plan_drain_rbac
from fminfra.hyperpod.constructs.plan_drain_handler import index
from fminfra.hyperpod.rules import PLAN_DRAIN_RBAC_RULES, PLAN_DRAIN_SCHEDULE, plan_drained
from tests.conftest import Synth
from tests.contract import registry
from tests.eks.constructs.test_accept_access import RBAC_SCHEMAS, schema_problems
from tests.fakes.k8s_drain_fakes import CLUSTER_CA_PEM, FakeKubernetes, request_attributes, serve

PLAN = "arn:aws:sagemaker:us-east-1:555555555555:training-plan/cap-eks-p5"
MANIFEST = "Custom::AWSCDK-EKS-KubernetesResource"


def _drain(synth: Synth, env: str) -> dict[str, dict[str, Any]]:
    if not any(s.display_name == f"{env}/Compute" for s in synth.stacks[env]):
        return {}
    return {lid: r for lid, r in (synth.template(env, "Compute").get("Resources") or {}).items() if lid.startswith("PlanDrain")}


def _one(resources: dict[str, dict[str, Any]], prefix: str) -> dict[str, Any]:
    (found,) = [r for lid, r in resources.items() if lid.startswith(prefix) and not lid.startswith(prefix + "Role")]
    return found


def _statements(resources: dict[str, dict[str, Any]], role_prefix: str) -> list[dict[str, Any]]:
    role_id = next(lid for lid, r in resources.items() if lid.startswith(role_prefix) and r["Type"] == "AWS::IAM::Role")
    return [
        s
        for r in resources.values()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in r["Properties"]["Roles"]
        for s in r["Properties"]["PolicyDocument"]["Statement"]
    ]


# --- which groups --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("orchestrator", "capacity", "drained"),
    [("eks", "training-plan", True), ("eks", "on-demand", False), ("slurm", "training-plan", False)],
)
def test_the_rule_drains_training_plan_groups_of_eks_clusters(orchestrator: str, capacity: str, drained: bool) -> None:
    assert plan_drained(orchestrator, capacity) is drained


def test_a_hyperpod_eks_config_with_a_plan_deploys_the_drain_and_others_do_not(synth: Synth) -> None:
    drain = _drain(synth, "cap-eks")
    assert {r["Type"] for r in drain.values()} == {
        MANIFEST,
        "AWS::EKS::AccessEntry",
        "AWS::IAM::Policy",
        "AWS::IAM::Role",
        "AWS::Lambda::EventInvokeConfig",
        "AWS::Lambda::Function",
        "AWS::Scheduler::Schedule",
    }
    for env, cfg in synth.configs.items():
        planned = any(plan_drained(cfg.compute.orchestrator, g.capacity.type) for g in cfg.compute.instance_groups)
        assert bool(_drain(synth, env)) == (planned and bool(cfg.compute.hyperpod)), env
    assert _drain(synth, "staging") == {} and _drain(synth, "prod") == {}  # EKS without a plan; Slurm with one


def test_the_function_runs_as_the_installer_does(synth: Synth) -> None:
    template = synth.template("cap-eks", "Compute")["Resources"]
    (installer,) = [r for lid, r in template.items() if lid.startswith("HyperPodDependenciesFunction")]
    (function,) = [r["Properties"] for r in _drain(synth, "cap-eks").values() if r["Type"] == "AWS::Lambda::Function"]
    assert function["VpcConfig"] == installer["Properties"]["VpcConfig"]  # the same subnets and security group
    assert function["Runtime"] == installer["Properties"]["Runtime"]
    assert function["Handler"] == "index.handler" and function["Timeout"] < 60  # within the schedule's minute


def test_the_schedule_delivers_the_handlers_event_every_minute(synth: Synth) -> None:
    drain = _drain(synth, "cap-eks")
    schedule = _one(drain, "PlanDrainSchedule")
    props = schedule["Properties"]
    assert props["ScheduleExpression"] == PLAN_DRAIN_SCHEDULE == "rate(1 minute)"
    function_id = next(lid for lid, r in drain.items() if r["Type"] == "AWS::Lambda::Function")
    assert props["Target"]["Arn"] == {"Fn::GetAtt": [function_id, "Arn"]}
    parts = props["Target"]["Input"]["Fn::Join"][1]
    event = json.loads("".join(p if isinstance(p, str) else "CLUSTER" for p in parts))
    assert event == {
        "Region": "us-east-1",
        "ClusterName": "CLUSTER",
        "Groups": [{"InstanceGroup": "train", "TrainingPlanArn": PLAN, "InstanceType": "ml.p5.48xlarge", "DrainSeconds": 600}],
    }
    assert [p for p in parts if not isinstance(p, str)] == [{"Ref": "EksClusterB2BDED5B"}]  # the cluster's name
    rbac_id = next(lid for lid, r in drain.items() if r["Type"] == MANIFEST)
    assert rbac_id in schedule["DependsOn"]


def test_a_failed_run_is_not_retried_by_lambda_either(synth: Synth) -> None:
    """Scheduler invokes the function asynchronously and Lambda's queue retries a failed run twice
    by default (docs/facts/eks.md#lambda-async-retries): the function's EventInvokeConfig turns that off,
    against the AWS::Lambda::EventInvokeConfig schema cfn-lint ships."""
    drain = _drain(synth, "cap-eks")
    function_id = next(lid for lid, r in drain.items() if r["Type"] == "AWS::Lambda::Function")
    (config,) = [r["Properties"] for r in drain.values() if r["Type"] == "AWS::Lambda::EventInvokeConfig"]
    assert config == {
        "FunctionName": {"Ref": function_id},
        "Qualifier": "$LATEST",
        "MaximumRetryAttempts": 0,
        "MaximumEventAgeInSeconds": 60,
    }
    resource_schema = registry.schema("AWS::Lambda::EventInvokeConfig", "us-east-1")
    assert resource_schema is not None
    resolved = {**config, "FunctionName": "fminfra-cap-eks-PlanDrainFunction"}  # Ref: the function's name
    assert registry.schema_errors(resource_schema, resolved) == []
    # Test of the test: the schema refuses what Lambda does not allow (retries 0-2, age from 60 s).
    assert registry.schema_errors(resource_schema, {**resolved, "MaximumRetryAttempts": 3, "MaximumEventAgeInSeconds": 59})


def test_the_roles_are_least_privilege(synth: Synth) -> None:
    drain = _drain(synth, "cap-eks")
    function_id = next(lid for lid, r in drain.items() if r["Type"] == "AWS::Lambda::Function")
    assert _statements(drain, "PlanDrainScheduleRole") == [
        {"Action": "lambda:InvokeFunction", "Effect": "Allow", "Resource": {"Fn::GetAtt": [function_id, "Arn"]}, "Sid": "InvokePlanDrain"}
    ]
    role = next(r for lid, r in drain.items() if lid.startswith("PlanDrainScheduleRole") and r["Type"] == "AWS::IAM::Role")
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": "555555555555"}}
    statements = _statements(drain, "PlanDrainRole")
    assert [(s["Action"], s["Resource"]) for s in statements] == [
        ("sagemaker:DescribeTrainingPlan", PLAN),  # exactly the config's plan
        ("eks:DescribeCluster", {"Fn::GetAtt": ["EksClusterB2BDED5B", "Arn"]}),
    ]


def test_the_access_entry_maps_the_role_to_the_drains_group_only(synth: Synth) -> None:
    drain = _drain(synth, "cap-eks")
    entry = next(r for r in drain.values() if r["Type"] == "AWS::EKS::AccessEntry")["Properties"]
    role_id = next(lid for lid, r in drain.items() if lid.startswith("PlanDrainRole") and r["Type"] == "AWS::IAM::Role")
    assert entry["PrincipalArn"] == {"Fn::GetAtt": [role_id, "Arn"]}
    assert entry["KubernetesGroups"] == [PLAN_DRAIN_GROUP] and entry["Type"] == "STANDARD"
    assert "AccessPolicies" not in entry  # no EKS access policy is this narrow
    resolved = {**entry, "PrincipalArn": "arn:aws:iam::555555555555:role/fminfra-cap-eks-PlanDrainRole"}  # GetAtt Arn
    assert schema_problems(resolved) == []
    assert any("is not of type 'array'" in p for p in schema_problems({**resolved, "KubernetesGroups": PLAN_DRAIN_GROUP}))


# --- RBAC ----------------------------------------------------------------------------------------


def _manifest_objects(synth: Synth) -> list[dict[str, Any]]:
    drain = _drain(synth, "cap-eks")
    rbac = next(r for r in drain.values() if r["Type"] == MANIFEST)
    entry_id = next(lid for lid, r in drain.items() if r["Type"] == "AWS::EKS::AccessEntry")
    assert entry_id in rbac["DependsOn"] and rbac["Properties"]["Overwrite"] is True
    objects = json.loads(rbac["Properties"]["Manifest"])
    for o in objects:  # CDK's prune label, on every object it applies
        labels = o["metadata"].pop("labels")
        assert [k for k in labels if not k.startswith("aws.cdk.eks/prune-")] == []
    return list(objects)


def k8s_problems(obj: dict[str, Any]) -> list[str]:
    import jsonschema

    recorded = json.loads(RBAC_SCHEMAS.read_text())
    files = {"ClusterRole": "clusterrole-rbac-v1.json", "ClusterRoleBinding": "clusterrolebinding-rbac-v1.json"}
    validator = jsonschema.Draft202012Validator({**recorded["kinds"][files[obj["kind"]]], "$defs": recorded["$defs"]})
    return [f"{obj['kind']} {'/'.join(map(str, e.absolute_path)) or '.'}: {e.message}" for e in validator.iter_errors(obj)]


def test_the_rbac_is_a_cluster_role_bound_to_the_group_and_matches_the_kubernetes_schemas(synth: Synth) -> None:
    objects = _manifest_objects(synth)
    assert objects == plan_drain_rbac()
    assert [p for o in objects for p in k8s_problems(o)] == []
    binding = objects[1]
    assert binding["subjects"] == [{"kind": "Group", "name": PLAN_DRAIN_GROUP, "apiGroup": "rbac.authorization.k8s.io"}]
    assert binding["roleRef"]["name"] == PLAN_DRAIN_ROLE
    broken = {**binding, "subjects": [{"kind": "Group", "group": PLAN_DRAIN_GROUP}]}
    assert any("'name' is a required property" in p for p in k8s_problems(broken))


def denied(rules: Any, calls: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The requests no rule allows (core group only: the handler sends nothing else)."""
    allowed = {(v, r) for rule in rules if "" in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    return [c for c in calls if request_attributes(*c) not in allowed]


def _drained_kube() -> FakeKubernetes:
    kube = FakeKubernetes()
    kube.add_node("hyperpod-i-0a", "train")
    kube.add_pod("training", "trainer-0", "hyperpod-i-0a")
    end = datetime(2027, 1, 17, 11, 30, tzinfo=UTC)
    group = {"InstanceGroup": "train", "TrainingPlanArn": PLAN, "InstanceType": "ml.p5.48xlarge", "DrainSeconds": 600}
    now = int(end.timestamp()) - 1800 - 300
    index.run({"Groups": [group]}, lambda _: {"EndTime": end}, kube.send, now)  # cordon and evict
    index.run({"Groups": [group]}, lambda _: {"EndTime": end.replace(day=24)}, kube.send, now)  # the end moved: uncordon
    return kube


def test_the_cluster_role_allows_every_request_of_a_drain_and_nothing_is_missing() -> None:
    kube = _drained_kube()
    assert {request_attributes(*c) for c in kube.calls} == {
        ("list", "nodes"),
        ("patch", "nodes"),
        ("list", "pods"),
        ("create", "pods/eviction"),
    }
    assert denied(PLAN_DRAIN_RBAC_RULES, kube.calls) == []
    without_eviction = [r for r in PLAN_DRAIN_RBAC_RULES if r["resources"] != ["pods/eviction"]]
    assert denied(without_eviction, kube.calls) == [c for c in kube.calls if c[1].endswith("/eviction")] != []


# --- handler() -----------------------------------------------------------------------------------


def test_handler_reaches_the_api_server_with_the_clusters_endpoint_ca_and_token(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKubernetes()
    kube.add_node("hyperpod-i-0a", "train")
    kube.add_pod("training", "trainer-0", "hyperpod-i-0a", labels={"app": "trainer"})
    kube.add_pod("training", "trainer-1", "hyperpod-i-0a", labels={"app": "trainer"})
    kube.add_budget("training", {"app": "trainer"}, min_available=1)  # the second eviction is answered 429
    end = datetime(2027, 1, 17, 11, 30, tzinfo=UTC)
    session = botocore.session.get_session()
    session.set_credentials("AKIDEXAMPLE", "secret")
    clients: dict[str, Any] = {}
    contexts: list[ssl.SSLContext] = []
    with serve(kube) as served:
        for service in ("eks", "sagemaker"):
            clients[service] = boto3.client(
                service, region_name="us-east-1", aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret"
            )
        eks_stub, sm_stub = Stubber(clients["eks"]), Stubber(clients["sagemaker"])
        ca = base64.b64encode(CLUSTER_CA_PEM.encode()).decode()
        eks_stub.add_response(
            "describe_cluster",
            {"cluster": {"name": "fminfra-cap-eks-eks", "endpoint": served.endpoint, "certificateAuthority": {"data": ca}}},
            {"name": "fminfra-cap-eks-eks"},
        )
        sm_stub.add_response(
            "describe_training_plan",
            {"TrainingPlanArn": PLAN, "TrainingPlanName": "cap-eks-p5", "Status": "Active", "EndTime": end},
            {"TrainingPlanName": PLAN},
        )

        def urlopen(request: Any, *, context: ssl.SSLContext, timeout: float) -> Any:
            import urllib.request

            contexts.append(context)
            return urllib.request.urlopen(request, context=context, timeout=timeout)

        event = {
            "Region": "us-east-1",
            "ClusterName": "fminfra-cap-eks-eks",
            "Groups": [{"InstanceGroup": "train", "TrainingPlanArn": PLAN, "InstanceType": "ml.p5.48xlarge", "DrainSeconds": 600}],
        }
        with eks_stub, sm_stub:
            lines = index.handler(
                event,
                None,
                client=lambda service, region: clients[service],
                session=session,
                urlopen=urlopen,
                clock=lambda: end.timestamp() - 1800 - 300,
            )
            eks_stub.assert_no_pending_responses()
            sm_stub.assert_no_pending_responses()
    assert kube.nodes["hyperpod-i-0a"]["spec"]["unschedulable"] is True
    assert "group train: hyperpod-i-0a: evicted training/trainer-0" in lines
    assert any("PodDisruptionBudget forbids it now" in line for line in lines)  # a 429 through urllib's HTTPError
    # The CA DescribeCluster gave is what verifies the server.
    assert contexts and all(c.verify_mode == ssl.CERT_REQUIRED for c in contexts)
    assert [dict(x[0] for x in c["subject"]) for c in contexts[0].get_ca_certs()] == [{"commonName": "fminfra-test-cluster-ca"}]
    # Every request carried the EKS token for this cluster.
    tokens = {headers["Authorization"] for _, _, headers in served.requests}
    (token,) = tokens
    encoded = token.removeprefix("Bearer k8s-aws-v1.")
    url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    query = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)
    assert urllib.parse.urlparse(url).netloc == "sts.us-east-1.amazonaws.com" and query["Action"] == ["GetCallerIdentity"]
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"][0].split(";")
    assert {h["Content-Type"] for m, _, h in served.requests if m == "PATCH"} == {"application/merge-patch+json"}


def test_handler_imports_nothing_from_fminfra() -> None:
    from pathlib import Path

    source = Path(index.__file__).read_text()
    assert "fminfra" not in source.replace("fminfra-", "").replace("fminfra.io/", "")
