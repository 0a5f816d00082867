"""All-or-nothing admission on HyperPod EKS through HyperPod task governance.

- templates: the task governance add-on at its pinned version, after the HyperPod cluster; one
  ComputeQuota per team equal to the config (default: team `training` holding every instance), the
  cluster policy only with priority classes, both after the add-on; the properties against the
  CloudFormation resource schemas cfn-lint ships (docs/facts/hyperpod.md#hyperpod-compute-quota-schema);
- never two Kueues on one cluster: task governance is the only Kueue installer in any template,
  and the HyperPod dependency chart at the pinned commit has none
  (docs/facts/hyperpod.md#hyperpod-dependency-chart-no-kueue);
- the config: teams, quotas and priority classes, each broken input one line naming the field;
- the queue names jobs use (`fminfra.eks.rules`) are the namespaces the quotas create.

Each check is shown to fail on a deliberately broken input (the `*_flags_*`/`*_rejects_*` tests).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import cfnlint
import jsonschema
import pytest
import regex

from fminfra.config import parse_config, read_yaml
from fminfra.core.errors import ConfigError
from fminfra.core.versions import load_versions, version
from fminfra.eks.rules import DEFAULT_TEAM, team_queue
from fminfra.hyperpod.constructs.task_governance import ADDON_NAME, ADDON_VERSION_KEY, COMPUTE_QUOTA_TYPE
from fminfra.topology import rules as topology
from tests.conftest import Synth, cdk_synth
from tests.contract import shapes
from tests.hyperpod.constructs.test_eks import created_before, dependency_graph

ROOT = Path(__file__).resolve().parents[3]
STAGING = read_yaml(ROOT / "config" / "staging.yaml")
POLICY_TYPE = "AWS::SageMaker::ClusterSchedulerConfig"
# What CloudFormation resolves the HyperPod cluster's ClusterArn attribute to (the schemas' form).
SAMPLE_CLUSTER_ARN = "arn:aws:sagemaker:us-east-1:111111111111:cluster/abcdefabcdef"
# The dependencies of the HyperPod dependency chart (helm_chart/HyperPodHelmChart/Chart.yaml of
# aws/sagemaker-hyperpod-cli at HYPERPOD_CLI_COMMIT; docs/facts/hyperpod.md#hyperpod-dependency-chart-no-kueue).
DEPENDENCY_CHART_DEPENDENCIES = (
    "cert-manager",
    "training-operators",
    "mlflow",
    "nvidia-device-plugin",
    "aws-efa-k8s-device-plugin",
    "neuron-device-plugin",
    "storage",
    "health-monitoring-agent",
    "mpi-operator",
    "deep-health-check",
    "job-auto-restart",
    "cluster-role-and-bindings",
    "namespaced-role-and-bindings",
    "team-role-and-bindings",
    "hyperpod-inference-operator",
    "hyperpod-patching",
    "gpu-operator",
)
RECORDED_AT_COMMIT = "011ca927123e02b35a399935bbb3ab1905fe33c7"


def _resources(synth: Synth, env: str, resource_type: str) -> dict[str, dict[str, Any]]:
    return synth.resources(env, "Compute", resource_type)


def _one_id(synth: Synth, env: str, resource_type: str) -> str:
    (lid,) = _resources(synth, env, resource_type)
    return lid


# --- the add-on and its order -----------------------------------------------------------------------


@pytest.mark.parametrize("env", ["staging", "cap-eks"])
def test_addon_is_pinned_and_ordered(synth: Synth, env: str) -> None:
    addons = {a["Properties"]["AddonName"]: (lid, a) for lid, a in _resources(synth, env, "AWS::EKS::Addon").items()}
    lid, addon = addons[ADDON_NAME]
    assert addon["Properties"]["AddonVersion"] == version(f"EKS_ADDON_{ADDON_VERSION_KEY}_1_34_VERSION") == "v1.6.0-eksbuild.1"
    graph = dependency_graph(synth.template(env, "Compute"))
    hyperpod = _one_id(synth, env, "AWS::SageMaker::Cluster")
    assert hyperpod in created_before(graph, lid)  # AWS installs it on an existing HyperPod EKS cluster
    quotas = [*_resources(synth, env, COMPUTE_QUOTA_TYPE), *_resources(synth, env, POLICY_TYPE)]
    assert quotas
    for quota in quotas:
        assert lid in created_before(graph, quota), f"{quota} must wait for the add-on that runs its Kueue"


# --- topology-aware scheduling: task governance's own, nothing to configure -------------------------


def tas_version_problems(versions: dict[str, str]) -> list[str]:
    """Pinned task governance versions older than the first that schedules topology-aware."""
    keys = [k for k in versions if k.startswith(f"EKS_ADDON_{ADDON_VERSION_KEY}_")]
    return [
        f"{k}={versions[k]}: task governance schedules topology-aware from v1.2.2"
        for k in keys
        if not topology.task_governance_supports_tas(versions[k])
    ]


def test_every_pinned_task_governance_schedules_topology_aware() -> None:
    """docs/facts/hyperpod.md#hyperpod-topology-labels: from add-on v1.2.2-eksbuild.1."""
    versions = load_versions()
    assert any(k.startswith(f"EKS_ADDON_{ADDON_VERSION_KEY}_") for k in versions)
    assert tas_version_problems(versions) == []
    old = {f"EKS_ADDON_{ADDON_VERSION_KEY}_1_34_VERSION": "v1.2.1-eksbuild.1"}
    assert tas_version_problems(old) == [
        f"EKS_ADDON_{ADDON_VERSION_KEY}_1_34_VERSION=v1.2.1-eksbuild.1: task governance schedules topology-aware from v1.2.2"
    ]


def _mentions(value: Any, word: str, path: str = "") -> list[str]:
    """The keys and texts of a JSON value that mention `word`, by path."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in ([f"{path}{k}"] if word in k.lower() else []) + _mentions(v, word, f"{path}{k}.")]
    if isinstance(value, list):
        return [p for v in value for p in _mentions(v, word, path)]
    return [path.rstrip(".")] if isinstance(value, str) and word in value.lower() else []


def _botocore_mentions(shape: Any, word: str, path: str, seen: set[str]) -> list[str]:
    if shape.name in seen:
        return []
    seen.add(shape.name)
    found = [path] if word in (shape.documentation or "").lower() else []
    for name, member in getattr(shape, "members", {}).items():
        found += [f"{path}.{name}"] if word in name.lower() else []
        found += _botocore_mentions(member, word, f"{path}.{name}", seen)
    if getattr(shape, "member", None) is not None:
        found += _botocore_mentions(shape.member, word, f"{path}[]", seen)
    return found


def test_neither_quotas_nor_the_cluster_policy_configure_topology() -> None:
    """Nothing in AWS::SageMaker::ComputeQuota / ClusterSchedulerConfig (cfn-lint's schemas) nor in
    the SageMaker API's Create/Update requests (botocore's model) names a topology: task governance
    schedules topology-aware on its own (docs/facts/hyperpod.md#task-governance-tas-not-configurable),
    and fminfra configures nothing there nor touches task governance's Kueue objects."""
    for resource_type in (COMPUTE_QUOTA_TYPE, POLICY_TYPE):
        assert _mentions(_schema(resource_type), "topolog") == [], resource_type
    operations = ("CreateComputeQuota", "UpdateComputeQuota", "CreateClusterSchedulerConfig", "UpdateClusterSchedulerConfig")
    for operation in operations:
        assert _botocore_mentions(shapes.input_shape("sagemaker", operation), "topolog", operation, set()) == [], operation
    # The test of the test: a word both do name is found.
    assert _mentions(_schema(POLICY_TYPE), "priorit")
    assert _botocore_mentions(shapes.input_shape("sagemaker", "CreateClusterSchedulerConfig"), "priorit", "C", set())


def test_no_task_governance_without_hyperpod_eks(synth: Synth) -> None:
    for env in ("dev", "hp-slurm-inf"):
        addons = {a["Properties"]["AddonName"] for a in _resources(synth, env, "AWS::EKS::Addon").values()}
        assert ADDON_NAME not in addons
        assert _resources(synth, env, COMPUTE_QUOTA_TYPE) == {}


# --- quotas equal the config ------------------------------------------------------------------------


def _quotas(synth: Synth, env: str) -> dict[str, dict[str, int]]:
    found: dict[str, dict[str, int]] = {}
    for quota in _resources(synth, env, COMPUTE_QUOTA_TYPE).values():
        props = quota["Properties"]
        team = props["ComputeQuotaTarget"]["TeamName"]
        assert team not in found
        found[team] = {r["InstanceType"]: r["Count"] for r in props["ComputeQuotaConfig"]["ComputeQuotaResources"]}
    return found


def test_default_team_holds_every_training_instance(synth: Synth) -> None:
    cfg = synth.configs["staging"]
    assert cfg.compute.eks is not None and cfg.compute.eks.scheduling.teams is None  # the default, not written out
    expected: dict[str, int] = {}
    for g in cfg.compute.instance_groups:
        expected[g.spec.hyperpod_name] = expected.get(g.spec.hyperpod_name, 0) + g.count
    assert _quotas(synth, "staging") == {DEFAULT_TEAM: expected} == {"training": {"ml.p5en.48xlarge": 2}}
    assert _resources(synth, "staging", POLICY_TYPE) == {}  # no priority classes: no cluster policy
    (quota,) = _resources(synth, "staging", COMPUTE_QUOTA_TYPE).values()
    tags = {t["Key"]: t["Value"] for t in quota["Properties"]["Tags"]}
    assert tags == {"fminfra:environment": "staging", **cfg.tags}  # as the stage tags every taggable resource


def test_teams_and_priority_classes_follow_the_config(synth: Synth) -> None:
    cfg = synth.configs["cap-eks"]
    assert cfg.compute.eks is not None
    groups = {g.name: g.spec.hyperpod_name for g in cfg.compute.instance_groups}
    expected = {t.name: {groups[g]: n for g, n in t.instances.items()} for t in cfg.compute.eks.scheduling.teams or []}
    assert _quotas(synth, "cap-eks") == expected == {"research": {"ml.p5.48xlarge": 3}, "eval": {"ml.p5.48xlarge": 1}}
    (policy,) = _resources(synth, "cap-eks", POLICY_TYPE).values()
    classes = {c["Name"]: c["Weight"] for c in policy["Properties"]["SchedulerConfig"]["PriorityClasses"]}
    assert classes == cfg.compute.eks.scheduling.priority_classes == {"training": 50, "inference": 90}
    hyperpod = _one_id(synth, "cap-eks", "AWS::SageMaker::Cluster")
    for resource in [*_resources(synth, "cap-eks", COMPUTE_QUOTA_TYPE).values(), policy]:
        assert resource["Properties"]["ClusterArn"] == {"Fn::GetAtt": [hyperpod, "ClusterArn"]}


def test_quota_namespaces_are_the_queues_jobs_use(synth: Synth) -> None:
    for env in ("staging", "cap-eks"):
        for team in _quotas(synth, env):
            queue = team_queue("hyperpod-eks", team)
            assert (queue.namespace, queue.local_queue) == (f"hyperpod-ns-{team}", f"hyperpod-ns-{team}-localqueue")
            assert len(queue.local_queue) <= 63  # a label value (docs/facts/eks.md#kubernetes-label-syntax)
            assert queue.labels == {"kueue.x-k8s.io/queue-name": queue.local_queue}


# --- properties against the CloudFormation schemas cfn-lint ships -----------------------------------


@cache
def _schema(resource_type: str) -> dict[str, Any]:
    schemas = Path(cfnlint.__file__).parent / "data" / "schemas"
    digest = json.loads((schemas / "providers" / "us-east-1.json").read_text())[resource_type]
    return dict(json.loads((schemas / "resources" / f"{digest}.json").read_text()))


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    # The schemas' patterns use Unicode classes (\p{L}) as Java does: the `regex` module (cfn-lint's dependency).
    if isinstance(instance, str) and not regex.search(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_Validator = jsonschema.validators.extend(jsonschema.Draft7Validator, {"pattern": _pattern})


def _resolved(value: Any) -> Any:
    """Properties as CloudFormation passes them: the cluster ARN attribute resolved; any other intrinsic fails."""
    if isinstance(value, dict):
        if list(value) == ["Fn::GetAtt"] and value["Fn::GetAtt"][1] == "ClusterArn":
            return SAMPLE_CLUSTER_ARN
        assert not any(k == "Ref" or k.startswith("Fn::") for k in value), f"unexpected intrinsic {value}"
        return {k: _resolved(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolved(v) for v in value]
    return value


def schema_problems(resource_type: str, properties: dict[str, Any]) -> list[str]:
    schema = _schema(resource_type)
    read_only = {p.rsplit("/", 1)[1] for p in schema.get("readOnlyProperties", [])}
    found = [f"{p} is read-only" for p in properties if p in read_only]
    validator = _Validator(schema)
    found += [f"{'.'.join(map(str, e.absolute_path)) or '(properties)'}: {e.message}" for e in validator.iter_errors(_resolved(properties))]
    return found


@pytest.mark.parametrize("resource_type", [COMPUTE_QUOTA_TYPE, POLICY_TYPE])
def test_properties_match_the_cloudformation_schema_and_botocore(synth: Synth, resource_type: str) -> None:
    checked = 0
    for env in ("staging", "cap-eks"):
        for lid, resource in _resources(synth, env, resource_type).items():
            props = resource["Properties"]
            assert schema_problems(resource_type, props) == [], f"{env} {lid}"
            assert shapes.problems(shapes.CREATE_APIS[resource_type], props) == [], f"{env} {lid}"
            checked += 1
    assert checked


_QUOTA = {
    "Name": "staging-training",
    "ClusterArn": {"Fn::GetAtt": ["HyperPod", "ClusterArn"]},
    "ComputeQuotaConfig": {"ComputeQuotaResources": [{"InstanceType": "ml.p5en.48xlarge", "Count": 2}]},
    "ComputeQuotaTarget": {"TeamName": "training"},
    "ActivationState": "Enabled",
}


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("ComputeQuotaTarget", "TeamName"), "Training", "does not match"),
        (("ComputeQuotaConfig", "ComputeQuotaResources", 0, "Count"), -1, "less than the minimum"),
        (("ComputeQuotaConfig", "ComputeQuotaResources", 0, "InstanceType"), "p5en.48xlarge", "is not one of"),
        (("ComputeQuotaTarget", "Team"), "training", "Additional properties"),
        (("ActivationState",), "On", "is not one of"),
        (("Name",), "staging_training", "does not match"),
    ],
)
def test_schema_check_flags_broken_quotas(path: tuple[Any, ...], value: Any, expected: str) -> None:
    assert schema_problems(COMPUTE_QUOTA_TYPE, _QUOTA) == []
    assert shapes.problems(shapes.CREATE_APIS[COMPUTE_QUOTA_TYPE], _QUOTA) == []
    broken = copy.deepcopy(_QUOTA)
    node: Any = broken
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    found = schema_problems(COMPUTE_QUOTA_TYPE, broken)
    assert any(expected in p for p in found), found


def test_schema_check_flags_a_missing_required_property_and_a_read_only_one() -> None:
    missing = {k: v for k, v in _QUOTA.items() if k != "ComputeQuotaTarget"}
    assert any("'ComputeQuotaTarget' is a required property" in p for p in schema_problems(COMPUTE_QUOTA_TYPE, missing))
    assert "ComputeQuotaId is read-only" in schema_problems(COMPUTE_QUOTA_TYPE, {**_QUOTA, "ComputeQuotaId": "abcdefabcdef"})
    policy = {"Name": "p", "ClusterArn": SAMPLE_CLUSTER_ARN, "SchedulerConfig": {"PriorityClasses": [{"Name": "train", "Weight": 101}]}}
    assert any("greater than the maximum" in p for p in schema_problems(POLICY_TYPE, policy))
    assert any("above PriorityWeight's maximum 100" in p for p in shapes.problems(shapes.CREATE_APIS[POLICY_TYPE], policy))


# --- never two Kueues -------------------------------------------------------------------------------


def kueue_installers(template: dict[str, Any]) -> list[str]:
    """Everything in a template that installs a Kueue controller: the task governance add-on, a
    Helm chart named kueue, or the HyperPod dependency chart with a value that enables a Kueue."""
    found = []
    for lid, resource in (template.get("Resources") or {}).items():
        props = resource.get("Properties") or {}
        if resource["Type"] == "AWS::EKS::Addon" and props.get("AddonName") == ADDON_NAME:
            found.append(f"{lid}: EKS add-on {ADDON_NAME}")
        elif resource["Type"] == "Custom::AWSCDK-EKS-HelmChart" and "kueue" in str(props.get("Chart", "")).lower():
            found.append(f"{lid}: Helm chart {props['Chart']}")
        elif resource["Type"] == "Custom::HyperPodDependencies" and "kueue" in str(props.get("Values", "")).lower():
            found.append(f"{lid}: HyperPod dependency chart values {props['Values']}")
    return found


def test_no_template_installs_two_kueues(synth: Synth) -> None:
    counts = {s.display_name: len(kueue_installers(s.template)) for s in synth.all_templates()}
    assert all(n <= 1 for n in counts.values()), {k: v for k, v in counts.items() if v > 1}
    assert counts["staging/Compute"] == 1 and counts["cap-eks/Compute"] == 1


def test_kueue_check_flags_a_second_kueue() -> None:
    template = {
        "Resources": {
            "TaskGovernance": {"Type": "AWS::EKS::Addon", "Properties": {"AddonName": ADDON_NAME}},
            "Kueue": {"Type": "Custom::AWSCDK-EKS-HelmChart", "Properties": {"Chart": "kueue"}},
            "Deps": {"Type": "Custom::HyperPodDependencies", "Properties": {"Values": json.dumps({"kueue": {"enabled": True}})}},
            "Other": {"Type": "Custom::AWSCDK-EKS-HelmChart", "Properties": {"Chart": "dcgm-exporter"}},
        }
    }
    assert [f.split(":")[0] for f in kueue_installers(template)] == ["TaskGovernance", "Kueue", "Deps"]


def test_the_pinned_dependency_chart_has_no_kueue() -> None:
    assert version("HYPERPOD_CLI_COMMIT") == RECORDED_AT_COMMIT, "re-record DEPENDENCY_CHART_DEPENDENCIES at the new commit"
    assert not [d for d in DEPENDENCY_CHART_DEPENDENCIES if "kueue" in d]
    assert len(DEPENDENCY_CHART_DEPENDENCIES) == 17


# --- the config -------------------------------------------------------------------------------------


def _with_scheduling(scheduling: dict[str, Any], data: dict[str, Any] | None = None) -> dict[str, Any]:
    result = copy.deepcopy(data or STAGING)
    result["compute"]["eks"]["scheduling"] = scheduling
    result["compute"]["eks"].pop("accept_access", None)  # its team rule: tests/eks/constructs/test_accept_access.py
    return result


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "f.yaml")
    assert len(info.value.problems) == 1, info.value.problems
    return info.value.problems[0]


@pytest.mark.parametrize(
    ("scheduling", "expected"),
    [
        (
            {"teams": [{"name": "Research", "instances": {"workers": 1}}]},
            "compute.eks.scheduling.teams[0].name: must be 1-40 lowercase letters, digits and hyphens",
        ),
        ({"teams": [{"name": "r" * 41}]}, "compute.eks.scheduling.teams[0].name: must be 1-40"),
        (
            {"teams": [{"name": "a", "instances": {"workers": 2}}, {"name": "b", "instances": {"workers": 1}}]},
            "compute.eks.scheduling.teams: the teams hold 3 instances of group 'workers', whose count is 2; allowed: at most 2 in all",
        ),
        (
            {"teams": [{"name": "a", "instances": {"wrokers": 1}}]},
            "compute.eks.scheduling.teams[0].instances: 'wrokers' is not an instance group; allowed: workers",
        ),
        ({"teams": [{"name": "a", "instances": {"workers": -1}}]}, "teams[0].instances['workers']: must be 0 or more instances, got -1"),
        ({"teams": [{"name": "a"}, {"name": "a"}]}, "compute.eks.scheduling.teams[1].name: 'a' is already a team"),
        ({"teams": []}, "compute.eks.scheduling.teams: list at least one team"),
        ({"priority_classes": {"train": 101}}, "compute.eks.scheduling.priority_classes['train']: weight must be 0-100, got 101"),
        ({"priority_classes": {f"c{i}": 1 for i in range(11)}}, "compute.eks.scheduling.priority_classes: at most 10 priority classes"),
        ({"task_governance": False, "teams": [{"name": "a"}]}, "compute.eks.scheduling.teams: needs task_governance: true"),
        ({"team": []}, "compute.eks.scheduling.team: unknown field"),
    ],
)
def test_config_rejects(scheduling: dict[str, Any], expected: str) -> None:
    assert expected in _error(_with_scheduling(scheduling))


def test_priority_classes_where_the_region_lists_no_cluster_policies_are_refused() -> None:
    # cfn-lint 1.58's resource types for us-west-2 (staging's region) lack AWS::SageMaker::ClusterSchedulerConfig,
    # though both sources offer compute quotas there: `fminfra gate` fails the template there (E3006), so validate
    # refuses it (it used to warn, then the gate failed).
    assert _error(_with_scheduling({"priority_classes": {"training": 50}})) == (
        "f.yaml: compute.eks.scheduling.priority_classes: HyperPod task governance cluster policies "
        "(AWS::SageMaker::ClusterSchedulerConfig) are not in cfn-lint's CloudFormation resource types for us-west-2 "
        "(`fminfra gate` fails on E3006 there); regions that offer them: ap-northeast-1, ap-south-1, eu-central-1, "
        "eu-north-1, eu-south-2, us-east-1, us-west-1; allowed here: no priority_classes"
    )
    cfg = _in_region(_with_scheduling({"priority_classes": {"training": 50}}), "us-east-1", "use1")
    assert "compute.eks.scheduling.priority_classes" not in {f.path: f.message for f in cfg.warnings()}


def test_scheduling_only_with_hyperpod_eks() -> None:
    data = read_yaml(ROOT / "tests" / "configs" / "hp-slurm-inference.yaml")
    data["compute"].setdefault("eks", {})["scheduling"] = {"teams": [{"name": "a"}]}
    assert "compute.eks.scheduling: only with orchestrator eks" in _error(data)


def test_task_governance_off_creates_no_quota() -> None:
    cfg = parse_config(_with_scheduling({"task_governance": False}), "f.yaml")
    assert cfg.compute.scheduling_teams() == [] and cfg.compute.team_quotas() == {}


def test_validate_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "staging.yaml"
    path.write_text(json.dumps(_with_scheduling({"teams": [{"name": "a", "instances": {"workers": 3}}]})))
    result = subprocess.run([sys.executable, "-m", "fminfra", "validate", str(path)], capture_output=True, text=True, cwd=ROOT, check=False)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "warning" not in line]
    assert errors == [
        f"{path}: compute.eks.scheduling.teams: the teams hold 3 instances of group 'workers', whose count is 2; allowed: at most 2 in all"
    ]
    assert "Traceback" not in result.stderr


def _in_seoul(data: dict[str, Any]) -> dict[str, Any]:
    # Neither source offers AWS::SageMaker::ComputeQuota in ap-northeast-2 (cfn-lint 1.58: its resource types for
    # the region and the resource schema's description).
    data = copy.deepcopy(data)
    data["region"], data["network"]["az_ids"], data["network"]["compute_az_id"] = "ap-northeast-2", ["apne2-az1", "apne2-az2"], "apne2-az1"
    data["compute"]["eks"].pop("accept_access", None)  # needs task governance: tests/eks/constructs/test_accept_access.py
    return data


def _in_region(data: dict[str, Any], region: str, az_prefix: str, instance_type: str = "ml.p5en.48xlarge") -> Any:
    data = copy.deepcopy(data)
    data["compute"]["eks"].pop("accept_access", None)  # needs task governance: tests/eks/constructs/test_accept_access.py
    data["region"], data["network"]["az_ids"] = region, [f"{az_prefix}-az1", f"{az_prefix}-az2"]
    data["network"]["compute_az_id"] = f"{az_prefix}-az1"
    data["compute"]["instance_groups"][0]["instance_type"] = instance_type
    data["compute"].pop("inference_node_groups", None)  # g6e is not offered everywhere; not what these tests are about
    return parse_config(data, "f.yaml")


def test_default_is_off_with_a_warning_where_the_region_has_no_quotas() -> None:
    cfg = parse_config(_in_seoul(STAGING), "f.yaml")
    assert cfg.compute.team_quotas() == {}
    warnings = {f.path: f.message for f in cfg.warnings()}
    assert "not offered in ap-northeast-2: no team queues" in warnings["compute.eks.scheduling.task_governance"]
    assert "compute.eks.scheduling.task_governance" not in {f.path: f.message for f in parse_config(STAGING, "f.yaml").warnings()}


def test_teams_where_the_region_has_no_quotas_are_rejected() -> None:
    problem = _error(_in_seoul(_with_scheduling({"teams": [{"name": "a", "instances": {"workers": 2}}]})))
    assert problem == (
        "f.yaml: compute.eks.scheduling.task_governance: HyperPod task governance compute quotas (AWS::SageMaker::ComputeQuota) "
        "are not in cfn-lint's CloudFormation resource types for ap-northeast-2 (`fminfra gate` fails on E3006 there); "
        "regions that offer them: ap-south-1, ap-southeast-1, ap-southeast-2, ca-central-1, eu-central-1, eu-west-1, "
        "eu-west-2, sa-east-1, us-east-1, us-east-2, us-west-2; allowed here: task_governance: false"
    )


def test_priority_classes_where_neither_source_offers_quotas_are_rejected() -> None:
    data = _in_seoul(_with_scheduling({"task_governance": False}))
    data["compute"]["eks"]["scheduling"] = {"task_governance": True, "priority_classes": {"training": 50}}
    with pytest.raises(ConfigError) as info:
        parse_config(data, "f.yaml")
    assert [p.split(":")[1].strip() for p in info.value.problems] == [
        "compute.eks.scheduling.task_governance",
        "compute.eks.scheduling.priority_classes",
    ]
    assert (
        "cluster policies (AWS::SageMaker::ClusterSchedulerConfig) are not in cfn-lint's CloudFormation resource types for ap-northeast-2"
        in (info.value.problems[1])
    )


# Regions from each case of cfn-lint 1.58's two sources on AWS::SageMaker::ComputeQuota
# (docs/facts/hyperpod.md#hyperpod-compute-quota-schema): (region, AZ ID prefix, a HyperPod GPU type offered there,
# in the per-region resource types, in the schema's description).
BOTH = [("us-east-1", "use1", "ml.p5en.48xlarge"), ("us-west-2", "usw2", "ml.p5en.48xlarge")]
PROVIDER_ONLY = [("ca-central-1", "cac1", "ml.p5.48xlarge")]
DESCRIBED_ONLY = [
    ("us-west-1", "usw1", "ml.p5en.48xlarge"),
    ("ap-northeast-1", "apne1", "ml.p5.48xlarge"),
    ("eu-north-1", "eun1", "ml.p5en.48xlarge"),
]


def test_the_region_cases_are_what_the_data_says() -> None:
    """The regions below stand for each case only while the shipped data says so."""
    from fminfra.core.regional import compute_quota_sources

    cases = {r: (s.provider, s.described) for r, _, _ in BOTH + PROVIDER_ONLY + DESCRIBED_ONLY if (s := compute_quota_sources(r))}
    assert cases == {
        **{r: (True, True) for r, _, _ in BOTH},
        **{r: (True, False) for r, _, _ in PROVIDER_ONLY},
        **{r: (False, True) for r, _, _ in DESCRIBED_ONLY},
    }
    assert compute_quota_sources("ap-northeast-2") == type(compute_quota_sources("us-east-1"))(False, False)


@pytest.mark.parametrize(("region", "az_prefix", "instance_type"), BOTH)
def test_default_is_on_where_both_sources_list_the_region(region: str, az_prefix: str, instance_type: str) -> None:
    cfg = _in_region(STAGING, region, az_prefix, instance_type)
    assert cfg.compute.team_quotas() == {DEFAULT_TEAM: {instance_type: 2}}
    assert "compute.eks.scheduling.task_governance" not in {f.path: f.message for f in cfg.warnings()}


@pytest.mark.parametrize(("region", "az_prefix", "instance_type"), PROVIDER_ONLY + DESCRIBED_ONLY)
def test_where_the_sources_disagree_default_is_off(region: str, az_prefix: str, instance_type: str) -> None:
    cfg = _in_region(STAGING, region, az_prefix, instance_type)
    assert cfg.compute.team_quotas() == {}
    warning = {f.path: f.message for f in cfg.warnings()}["compute.eks.scheduling.task_governance"]
    assert warning.startswith(f"task governance is off (the sources disagree on {region}: cfn-lint's CloudFormation resource types")
    assert "no all-or-nothing admission" in warning
    # "Set task_governance: true to try it" only where the gate's list (cfn-lint's) has the type
    assert ("Set task_governance: true" in warning) == ((region, az_prefix, instance_type) in PROVIDER_ONLY)


@pytest.mark.parametrize(("region", "az_prefix", "instance_type"), PROVIDER_ONLY)
def test_asking_where_only_cfn_lint_lists_quotas_warns(region: str, az_prefix: str, instance_type: str) -> None:
    for scheduling in ({"task_governance": True}, {"teams": [{"name": "a", "instances": {"workers": 2}}]}):
        asked = _in_region(_with_scheduling(scheduling), region, az_prefix, instance_type)
        assert asked.compute.team_quotas() == {("a" if "teams" in scheduling else DEFAULT_TEAM): {instance_type: 2}}
        warning = {f.path: f.message for f in asked.warnings()}["compute.eks.scheduling.task_governance"]
        assert warning == (
            f"the sources disagree on {region}: cfn-lint's CloudFormation resource types for {region} include "
            f"AWS::SageMaker::ComputeQuota, the resource schema's description (also the CDK CfnComputeQuota page) does not list "
            f"{region}; the compute quotas may fail to deploy here (set task_governance: false if they do)"
        )


@pytest.mark.parametrize(("region", "az_prefix", "instance_type"), DESCRIBED_ONLY)
def test_asking_where_only_the_description_lists_quotas_is_refused(region: str, az_prefix: str, instance_type: str) -> None:
    # us-west-1, ap-northeast-1 and eu-north-1 list ClusterSchedulerConfig but not ComputeQuota in cfn-lint's
    # resource types: `fminfra gate` fails a compute quota there (E3006), so asking for one is refused (it used to warn).
    for scheduling in ({"task_governance": True}, {"teams": [{"name": "a", "instances": {"workers": 2}}]}, {"priority_classes": {"t": 5}}):
        data = _with_scheduling(scheduling)
        data["compute"]["eks"].pop("accept_access", None)
        data["region"], data["network"]["az_ids"] = region, [f"{az_prefix}-az1", f"{az_prefix}-az2"]
        data["network"]["compute_az_id"] = f"{az_prefix}-az1"
        data["compute"]["instance_groups"][0]["instance_type"] = instance_type
        data["compute"].pop("inference_node_groups", None)
        assert _error(data).startswith(
            "f.yaml: compute.eks.scheduling.task_governance: HyperPod task governance compute quotas "
            f"(AWS::SageMaker::ComputeQuota) are not in cfn-lint's CloudFormation resource types for {region} "
        )


def test_plan_lists_the_teams_their_quotas_and_queues() -> None:
    from fminfra.ops.plan import render_plan

    text = render_plan(parse_config(STAGING, "f.yaml"))
    assert "  team training: 16 GPUs (2 x ml.p5en.48xlarge); queue hyperpod-ns-training-localqueue in hyperpod-ns-training" in text
    assert "scheduling:" not in render_plan(parse_config(_with_scheduling({"task_governance": False}), "f.yaml"))


def _l1_problem(module: Any, pinned: str) -> str | None:
    """Why the quota should now be an L1 class: the installed aws-cdk-lib has `CfnComputeQuota`."""
    if hasattr(module, "CfnComputeQuota"):
        return (
            f"aws-cdk-lib {pinned} has CfnComputeQuota: use it in fminfra/hyperpod/constructs/task_governance.py in place of the "
            "CfnResource and drop its CloudFormation-Validate::F3006 acknowledgment "
            "(docs/facts/hyperpod.md#hyperpod-compute-quota-schema)"
        )
    return None


def test_compute_quota_is_a_cfn_resource_only_while_the_pinned_cdk_lacks_the_l1() -> None:
    """CfnComputeQuota exists from aws-cdk-lib 2.276.0 (the CDK API reference); the pin is older. Raising
    the pin makes this fail until the CfnResource and its F3006 acknowledgment go."""
    import types
    from importlib.metadata import version as installed

    from aws_cdk import aws_sagemaker

    pinned = regex.search(r"^aws-cdk-lib==(\S+)$", (ROOT / "requirements.txt").read_text(), regex.M)
    assert pinned and installed("aws-cdk-lib") == pinned[1]
    assert _l1_problem(aws_sagemaker, pinned[1]) is None
    assert "CfnComputeQuota" in (_l1_problem(types.SimpleNamespace(CfnComputeQuota=object), "2.276.0") or "")
    fact = (ROOT / "docs" / "facts" / "hyperpod.md").read_text()
    entry = fact[fact.index("### hyperpod-compute-quota-schema") :].split("\n### ")[0]
    assert f"aws-cdk-lib=={pinned[1]}" in entry and "`CfnComputeQuota` exists from aws-cdk-lib 2.276.0" in entry


def test_the_cdk_cli_refuses_priority_classes_where_the_region_lacks_the_type_in_validate_s_words(tmp_path: Path) -> None:
    """us-west-2: cfn-lint's resource types and the CDK's own "CloudFormation Validate" data both lack
    AWS::SageMaker::ClusterSchedulerConfig there (F3006; E3006 in `fminfra gate`): `cdk synth` stops on validate's
    one line, before either, and the CDK's finding is no longer acknowledged."""
    import yaml

    data = _with_scheduling({"priority_classes": {"high": 90, "low": 10}})
    assert data["region"] == "us-west-2"
    path = tmp_path / "prio.yaml"
    path.write_text(yaml.safe_dump({**data, "name": "prio"}))
    result = cdk_synth(path, tmp_path / "out", "prio/Compute")
    assert result.returncode != 0
    assert f"{path}: compute.eks.scheduling.priority_classes: HyperPod task governance cluster policies" in result.stderr
    assert "F3006" not in result.stderr and "Traceback" not in result.stderr
