"""The acceptance gate's access to a HyperPod EKS cluster (fminfra/eks/constructs/accept_access.py):

- the access entry's properties against the AWS::EKS::AccessEntry schema cfn-lint ships, its
  principal (the OIDC stack's acceptance role), only where `compute.eks.accept_access` is set;
- the Namespace, Role and RoleBinding against Kubernetes v1.34.0's strict schemas (tests/data/rbac);
- the Role, evaluated as Kubernetes RBAC does (a rule allows a request when its verb, API group
  and resource match and the Role is in the request's namespace; for the namespace object itself the
  request's namespace is its name: docs/facts/eks.md#k8s-rbac-request-attributes), against every
  request `fminfra accept` makes in a full run against the fake kubectl of tests/fakes/kubectl_fake.py;
- the config and pipeline.yaml rules that tie the field to the gate.
Each check is also shown to fail on a deliberately broken input.
"""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import cfnlint
import jsonschema
import pytest
import yaml

from fminfra.config import load_config
from fminfra.config.pipeline import load_pipeline
from fminfra.core.errors import ConfigError
from fminfra.eks.constructs.accept_access import (
    ACCEPT_GROUP,
    ACCEPT_NODE_RULES,
    ACCEPT_NODES_ROLE,
    ACCEPT_ROLE,
    ACCEPT_RULES,
    accept_namespaces,
    accept_rbac,
)
from fminfra.eks.rules import ACCEPT_NEEDS_TEAM, team_queue
from fminfra.ops.accept.manifests import eks_plan
from fminfra.promotion.rules import accept_role_name
from tests.conftest import ROOT, Synth
from tests.ops.accept.test_eks import _accept, _repo_root, cluster  # noqa: F401  (fixtures)

ACCESS_ENTRY = "AWS::EKS::AccessEntry"
MANIFEST = "Custom::AWSCDK-EKS-KubernetesResource"
NAMESPACE = team_queue("hyperpod-eks").namespace


# --- the access entry ------------------------------------------------------------------------------


@cache
def _schema() -> dict[str, Any]:
    schemas = Path(cfnlint.__file__).parent / "data" / "schemas"
    digest = json.loads((schemas / "providers" / "us-west-2.json").read_text())[ACCESS_ENTRY]
    return dict(json.loads((schemas / "resources" / f"{digest}.json").read_text()))


def _resolve(value: Any) -> Any:
    """Intrinsics as CloudFormation resolves them in us-west-2 / partition aws (Ref of the cluster: its name)."""
    if isinstance(value, dict):
        if "Ref" in value:
            return {"AWS::Partition": "aws", "AWS::Region": "us-west-2"}.get(value["Ref"], "fminfra-staging-eks")
        if "Fn::Join" in value:
            sep, parts = value["Fn::Join"]
            return sep.join(str(_resolve(p)) for p in parts)
        return {k: _resolve(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v) for v in value]
    return value


def schema_problems(properties: dict[str, Any]) -> list[str]:
    schema = _schema()
    read_only = {p.rsplit("/", 1)[1] for p in schema.get("readOnlyProperties", [])}
    found = [f"{p} is read-only" for p in properties if p in read_only]
    validator = jsonschema.Draft7Validator(schema)
    found += [f"{'.'.join(map(str, e.absolute_path)) or '(properties)'}: {e.message}" for e in validator.iter_errors(_resolve(properties))]
    return found


def _entries(synth: Synth, env: str) -> dict[str, dict[str, Any]]:
    return {lid: r for lid, r in synth.resources(env, "Compute", ACCESS_ENTRY).items() if lid.startswith("AcceptAccessEntry")}


def test_access_entry_matches_the_cloudformation_schema(synth: Synth) -> None:
    (entry,) = _entries(synth, "staging").values()
    props = entry["Properties"]
    assert schema_problems(props) == []
    assert _resolve(props["PrincipalArn"]) == f"arn:aws:iam::222222222222:role/{accept_role_name('staging')}"
    assert props["Type"] == "STANDARD"
    assert props["KubernetesGroups"] == [ACCEPT_GROUP]
    # no access policy: none of them grants the job kinds (docs/facts/eks.md#eks-access-policy-permissions)
    assert "AccessPolicies" not in props and "Username" not in props


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        ({"AccessPolicies": [{"PolicyArn": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSEditPolicy"}]}, "'AccessScope' is a required"),
        (
            {"AccessPolicies": [{"PolicyArn": "x", "AccessScope": {"Type": "namespaces", "Namespaces": [NAMESPACE]}}]},
            "'namespaces' is not one of ['namespace', 'cluster']",
        ),
        ({"Groups": [ACCEPT_GROUP]}, "Additional properties are not allowed ('Groups'"),
        ({"KubernetesGroups": ACCEPT_GROUP}, "is not of type 'array'"),
    ],
)
def test_the_schema_check_catches_a_broken_entry(synth: Synth, change: dict[str, Any], expect: str) -> None:
    (entry,) = _entries(synth, "staging").values()
    problems = schema_problems({**entry["Properties"], **change})
    assert any(expect in p for p in problems), problems


def test_only_environments_that_ask_for_it(synth: Synth) -> None:
    asked = {env for env, cfg in synth.configs.items() if cfg.compute.eks is not None and cfg.compute.eks.accept_access}
    assert "staging" in asked
    for env in synth.configs:
        entries = _entries(synth, env) if any(s.display_name == f"{env}/Compute" for s in synth.stacks[env]) else {}
        assert bool(entries) == (env in asked), env


def _manifest_objects(resource: dict[str, Any]) -> list[dict[str, Any]]:
    manifest = resource["Properties"]["Manifest"]
    text = "".join(str(p) for p in manifest["Fn::Join"][1]) if isinstance(manifest, dict) else manifest
    return list(json.loads(text))


def _manifest(synth: Synth, prefix: str) -> tuple[str, dict[str, Any]]:
    manifests = [(lid, r) for lid, r in synth.resources("staging", "Compute", MANIFEST).items() if lid.startswith(prefix)]
    assert len(manifests) == 1, prefix
    return manifests[0]


def _rbac(synth: Synth) -> list[dict[str, Any]]:
    _, resource = _manifest(synth, "AcceptRbac")
    namespaces_id, _ = _manifest(synth, "AcceptNamespaces")
    entry_id = next(iter(_entries(synth, "staging")))
    assert entry_id in resource["DependsOn"] and namespaces_id in resource["DependsOn"]
    assert resource["Properties"]["Overwrite"] is True
    objects = _manifest_objects(resource)
    for o in objects:  # CDK's prune label (aws.cdk.eks/prune-<hash>), added to every object it applies
        labels = o["metadata"].pop("labels")
        assert list(labels) == [next(k for k in labels if k.startswith("aws.cdk.eks/prune-"))]
    return objects


def service_namespace_problems(resources: dict[str, dict[str, Any]]) -> list[str]:
    """Manifests that could delete a namespace HyperPod task governance owns (`hyperpod-ns-<team>`):
    one without Retain (the provider runs `kubectl delete -f` on Delete) or with CDK's prune label
    (an Update that leaves it out prunes it): docs/facts/eks.md#cdk-kubernetes-manifest-retained."""
    problems = []
    for lid, resource in resources.items():
        if resource.get("Type") != MANIFEST:
            continue
        for o in _manifest_objects(resource):
            if o["kind"] != "Namespace" or not o["metadata"]["name"].startswith("hyperpod-ns-"):
                continue
            if resource.get("DeletionPolicy") != "Retain" or resource.get("UpdateReplacePolicy") != "Retain":
                problems.append(f"{lid}: {o['metadata']['name']} is deleted with the manifest")
            if any(k.startswith("aws.cdk.eks/prune-") for k in (o["metadata"].get("labels") or {})):
                problems.append(f"{lid}: {o['metadata']['name']} carries the prune label")
    return problems


def test_no_manifest_deletes_a_task_governance_namespace(synth: Synth) -> None:
    for stack in synth.all_templates():
        assert service_namespace_problems(stack.template.get("Resources") or {}) == [], stack.display_name
    _, namespaces = _manifest(synth, "AcceptNamespaces")
    assert namespaces["Properties"]["Overwrite"] is True  # kubectl apply: the namespace may exist already
    assert _manifest_objects(namespaces) == accept_namespaces([NAMESPACE])


def test_a_manifest_that_would_delete_the_team_namespace_is_found() -> None:
    # The earlier shape: the Namespace in the pruned, deletable RBAC manifest.
    objects = [{**o, "metadata": {**o["metadata"], "labels": {"aws.cdk.eks/prune-c8": ""}}} for o in accept_namespaces([NAMESPACE])]
    resource = {"Type": MANIFEST, "Properties": {"Manifest": json.dumps(objects)}}
    assert service_namespace_problems({"AcceptRbac": resource}) == [
        f"AcceptRbac: {NAMESPACE} is deleted with the manifest",
        f"AcceptRbac: {NAMESPACE} carries the prune label",
    ]
    retained = {
        **resource,
        "DeletionPolicy": "Retain",
        "UpdateReplacePolicy": "Retain",
        "Properties": {"Manifest": json.dumps(accept_namespaces([NAMESPACE]))},
    }
    assert service_namespace_problems({"AcceptNamespaces": retained}) == []


RBAC_SCHEMAS = ROOT / "tests" / "data" / "rbac" / "kubernetes-v1.34.0-rbac-strict.json"  # README.md there
SCHEMA_FILES = {
    "Namespace": "namespace-v1.json",
    "Role": "role-rbac-v1.json",
    "RoleBinding": "rolebinding-rbac-v1.json",
    "ClusterRole": "clusterrole-rbac-v1.json",
    "ClusterRoleBinding": "clusterrolebinding-rbac-v1.json",
}


def k8s_problems(obj: dict[str, Any]) -> list[str]:
    """Problems of one object against Kubernetes v1.34.0's strict schema of its kind."""
    recorded = json.loads(RBAC_SCHEMAS.read_text())
    schema = {**recorded["kinds"][SCHEMA_FILES[obj["kind"]]], "$defs": recorded["$defs"]}
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{obj['kind']} {'/'.join(map(str, e.absolute_path)) or '.'}: {e.message}" for e in validator.iter_errors(obj)]


def test_the_rbac_objects_match_the_kubernetes_schemas(synth: Synth) -> None:
    objects = _rbac(synth) + accept_namespaces([NAMESPACE])
    assert sorted(o["kind"] for o in objects) == ["ClusterRole", "ClusterRoleBinding", "Namespace", "Role", "RoleBinding"]
    assert [p for o in objects for p in k8s_problems(o)] == []


@pytest.mark.parametrize(
    ("kind", "path", "value", "expect"),
    [
        ("Role", ("rules", 0, "verb"), ["get"], "Additional properties are not allowed ('verb'"),
        ("RoleBinding", ("roleRef", "name"), None, "None is not of type 'string'"),
        ("RoleBinding", ("subjects", 0, "group"), "x", "Additional properties are not allowed ('group'"),
        ("ClusterRole", ("metadata", "namespace"), 1, "1 is not of type 'string'"),
        ("ClusterRoleBinding", ("roleRef", "kind"), None, "None is not of type 'string'"),
    ],
)
def test_the_kubernetes_schema_check_catches_a_broken_object(kind: str, path: tuple[Any, ...], value: Any, expect: str) -> None:
    obj = next(o for o in accept_rbac([NAMESPACE]) if o["kind"] == kind)
    node = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    assert any(expect in p for p in k8s_problems(obj)), k8s_problems(obj)


def test_the_rbac_binds_the_entry_group_in_the_team_namespace_only(synth: Synth) -> None:
    objects = _rbac(synth)
    assert objects == accept_rbac([NAMESPACE])
    binding = next(o for o in objects if o["kind"] == "RoleBinding")
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["subjects"] == [{"kind": "Group", "name": ACCEPT_GROUP, "apiGroup": "rbac.authorization.k8s.io"}]
    assert binding["roleRef"] == {"kind": "Role", "name": ACCEPT_ROLE, "apiGroup": "rbac.authorization.k8s.io"}
    # cluster-wide, only `get` of nodes (the placement read) and `list` of Kueue's flavors, bound to the same group
    cluster_roles = [o for o in objects if o["kind"] == "ClusterRole"]
    assert [r["rules"] for r in cluster_roles] == [
        [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["resourceflavors"], "verbs": ["list"]},
        ]
    ]
    cluster_binding = next(o for o in objects if o["kind"] == "ClusterRoleBinding")
    assert cluster_binding["subjects"] == binding["subjects"]
    assert cluster_binding["roleRef"] == {"kind": "ClusterRole", "name": ACCEPT_NODES_ROLE, "apiGroup": "rbac.authorization.k8s.io"}
    assert all("*" not in v for o in objects for r in o.get("rules", []) for v in r.values())


# --- the Role against what accept does ---------------------------------------------------------------

# kubectl's resource arguments -> (API group, resource)
RESOURCES = {
    "namespace": ("", "namespaces"),
    "configmap": ("", "configmaps"),
    "pods": ("", "pods"),
    "localqueues.kueue.x-k8s.io": ("kueue.x-k8s.io", "localqueues"),
    "mpijobs.kubeflow.org": ("kubeflow.org", "mpijobs"),
    "hyperpodpytorchjobs.sagemaker.amazonaws.com": ("sagemaker.amazonaws.com", "hyperpodpytorchjobs"),
    "jobs.batch": ("batch", "jobs"),
    "nodes": ("", "nodes"),
    "resourceflavors.kueue.x-k8s.io": ("kueue.x-k8s.io", "resourceflavors"),
}
# `accept` reads the nodes its jobs ran on (their network-node-layer labels: fminfra/ops/accept/eks.py,
# read_placement). Nodes are cluster-scoped: only a ClusterRole (ACCEPT_NODE_RULES) grants them
# (docs/facts/jobs.md#k8s-rbac-forbidden-cluster-scope), and the request has no namespace. Likewise Kueue's
# ResourceFlavors (flavor_notes), read as a collection: a list.
CLUSTER_SCOPED = {"nodes", "resourceflavors"}
KINDS = {
    ("v1", "ConfigMap"): ("", "configmaps"),
    ("batch/v1", "Job"): ("batch", "jobs"),
    ("kubeflow.org/v2beta1", "MPIJob"): ("kubeflow.org", "mpijobs"),
    ("sagemaker.amazonaws.com/v1", "HyperPodPyTorchJob"): ("sagemaker.amazonaws.com", "hyperpodpytorchjobs"),
}
Request = tuple[str, str, str, str]  # verb, API group, resource, namespace


def _namespace(args: list[str]) -> str:
    return args[args.index("-n") + 1]


def requests(args: list[str], stdin: str | None) -> list[Request]:
    """The API requests one kubectl command makes, as the authorizer sees them. `apply` (client-side)
    reads each object, then creates or patches it; `logs` reads the pod, then its log; `get` of a
    namespace has the namespace's own name as the request's namespace."""
    verb = args[0]
    if verb == "apply":
        out: list[Request] = []
        for doc in yaml.safe_load_all(stdin or ""):
            group, resource = KINDS[(doc["apiVersion"], doc["kind"])]
            ns = doc["metadata"]["namespace"]
            out += [(v, group, resource, ns) for v in ("get", "create", "patch")]
        return out
    if verb == "logs":
        return [("get", "", "pods", _namespace(args)), ("get", "", "pods/log", _namespace(args))]
    group, resource = RESOURCES[args[1]]
    if verb == "get" and resource == "namespaces":
        return [("get", group, resource, args[2])]
    if verb == "get" and resource in CLUSTER_SCOPED:
        named = len(args) > 2 and not args[2].startswith("-")  # `get R NAME...`: a get; `get R -o json`: a list
        return [("get" if named else "list", group, resource, "")]
    if verb == "get":
        return [("list" if "-l" in args else "get", group, resource, _namespace(args))]
    if verb == "delete":
        return [("delete", group, resource, _namespace(args))]
    raise AssertionError(f"unmapped kubectl call: {args}")


def denied(objects: list[dict[str, Any]], wanted: list[Request]) -> list[Request]:
    """The requests no role bound to ACCEPT_GROUP allows (Kubernetes RBAC: union of allow rules): a Role
    through a RoleBinding in its namespace, a ClusterRole through a ClusterRoleBinding anywhere, cluster
    scope included."""
    subject = {"kind": "Group", "name": ACCEPT_GROUP, "apiGroup": "rbac.authorization.k8s.io"}
    bound = {(b["metadata"]["namespace"], b["roleRef"]["name"]) for b in objects if b["kind"] == "RoleBinding" and subject in b["subjects"]}
    cluster_bound = {b["roleRef"]["name"] for b in objects if b["kind"] == "ClusterRoleBinding" and subject in b["subjects"]}
    roles = [o for o in objects if o["kind"] == "Role" and (o["metadata"]["namespace"], o["metadata"]["name"]) in bound]
    roles += [o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] in cluster_bound]

    def allows(role: dict[str, Any], req: Request) -> bool:
        verb, group, resource, ns = req
        where = role["kind"] == "ClusterRole" or role["metadata"]["namespace"] == ns
        return where and any(verb in r["verbs"] and group in r["apiGroups"] and resource in r["resources"] for r in role["rules"])

    return [req for req in wanted if not any(allows(role, req) for role in roles)]


@pytest.fixture
def accept_requests(cluster: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Request]:  # noqa: F811
    """Every request of a passing `fminfra accept staging` run against the fake kubectl."""
    seen: list[Request] = []
    real = subprocess.run

    def run(cmd: Any, *args: Any, **kwargs: Any) -> Any:
        # `kubectl version --client` asks no server (kubectl's version command: client only)
        if isinstance(cmd, list) and cmd[:1] == ["kubectl"] and "--client" not in cmd:
            seen.extend(requests(cmd[3:], kwargs.get("input")))
        return real(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", run)
    assert _accept(tmp_path) == 0
    return seen


def test_the_role_allows_every_request_accept_makes(synth: Synth, accept_requests: list[Request]) -> None:
    kinds = {(r[0], r[2]) for r in accept_requests}
    assert {("get", "namespaces"), ("get", "localqueues"), ("create", "mpijobs"), ("get", "pods/log"), ("delete", "configmaps")} <= kinds
    assert ("get", "", "nodes", "") in accept_requests  # the placement read, cluster-scoped
    assert ("list", "kueue.x-k8s.io", "resourceflavors", "") in accept_requests  # the flavor read, cluster-scoped
    assert denied(_rbac(synth), accept_requests) == []
    # and nothing beyond them: every rule's verb is used
    used = {(v, g, r) for v, g, r, _ in accept_requests}
    rules = (*ACCEPT_RULES, *ACCEPT_NODE_RULES)
    unused = [(v, g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]]
    unused = [u for u in unused if u not in used and u[0] != "patch"]  # patch: apply of an object that exists
    assert unused == []


def test_the_evaluation_catches_a_missing_rule_or_namespace(accept_requests: list[Request]) -> None:
    objects = accept_rbac([NAMESPACE])
    role = next(o for o in objects if o["kind"] == "Role")
    role["rules"] = [r for r in role["rules"] if r["resources"] != ["mpijobs"]]
    assert ("create", "kubeflow.org", "mpijobs", NAMESPACE) in denied(objects, accept_requests)
    elsewhere = accept_rbac(["hyperpod-ns-other"])
    assert ("get", "", "namespaces", NAMESPACE) in denied(elsewhere, accept_requests)
    unbound = accept_rbac([NAMESPACE])
    next(o for o in unbound if o["kind"] == "RoleBinding")["subjects"][0]["name"] = "someone-else"
    assert denied(unbound, accept_requests) == [r for r in accept_requests if r[2] not in CLUSTER_SCOPED]
    # without the ClusterRole (a namespaced Role cannot grant nodes), the placement and flavor reads are refused
    no_cluster_role = [o for o in accept_rbac([NAMESPACE]) if o["kind"] != "ClusterRole"]
    cluster_reads = {("get", "", "nodes", ""), ("list", "kueue.x-k8s.io", "resourceflavors", "")}
    assert {r for r in denied(no_cluster_role, accept_requests)} == cluster_reads
    as_role = accept_rbac([NAMESPACE])
    next(o for o in as_role if o["kind"] == "Role")["rules"].append({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]})
    assert {r for r in denied([o for o in as_role if o["kind"] != "ClusterRole"], accept_requests)} == cluster_reads


# --- config and pipeline.yaml ------------------------------------------------------------------------


def test_accept_access_needs_hyperpod_eks(tmp_path: Path) -> None:
    text = (ROOT / "config" / "staging.yaml").read_text().replace("orchestrator: eks", "orchestrator: none")
    text = text.replace(
        "  instance_groups:\n    - name: workers\n      instance_type: ml.p5en.48xlarge\n      count: 2\n", "  instance_groups: []\n"
    )
    text = text.replace("      capacity: {type: on-demand}\n  eks:", "  eks:", 1)
    path = tmp_path / "inference.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert any("compute.eks.accept_access: only with orchestrator eks" in p for p in exc.value.problems), exc.value.problems


def test_a_gated_eks_environment_without_access_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    for name in ("dev", "staging", "prod"):
        text = (ROOT / "config" / f"{name}.yaml").read_text()
        (config / f"{name}.yaml").write_text(text.replace("    accept_access: true", "    accept_access: false"))
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text((ROOT / "pipeline.yaml").read_text())
    with pytest.raises(ConfigError) as exc:
        load_pipeline(pipeline)
    assert exc.value.problems == [
        f"{pipeline}: environments[1].accept: the gate is on, but config/staging.yaml leaves compute.eks.accept_access off:"
        " the acceptance role would have no Kubernetes access to the cluster; set it to true, or accept: {gate: false}"
    ]
    # the shipped files pass
    assert load_pipeline(ROOT / "pipeline.yaml")[1][1].compute.eks.accept_access


def test_accept_access_needs_a_task_governance_team(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "config" / "staging.yaml").read_text())
    data["compute"]["eks"]["scheduling"] = {"task_governance": False}
    path = tmp_path / "staging.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert exc.value.problems == [f"{path}: compute.eks.accept_access: {ACCEPT_NEEDS_TEAM}"]
    data["compute"]["eks"]["accept_access"] = False  # the same config without it is valid
    path.write_text(yaml.safe_dump(data))
    assert not load_config(path).compute.eks.accept_access  # type: ignore[union-attr]


def test_accept_uses_training_or_else_the_first_team(tmp_path: Path) -> None:
    """Teams without `training`: accept's jobs and the acceptance RBAC use the first team's namespace."""
    data = yaml.safe_load((ROOT / "config" / "staging.yaml").read_text())
    data["compute"]["eks"]["scheduling"] = {
        "teams": [{"name": "research", "instances": {"workers": 1}}, {"name": "eval", "instances": {"workers": 1}}]
    }
    path = tmp_path / "staging.yaml"
    path.write_text(yaml.safe_dump(data))
    cfg = load_config(path)
    assert cfg.compute.acceptance_team() == "research"
    plan = eks_plan(cfg, "r1")
    assert (plan.namespace, plan.queue) == ("hyperpod-ns-research", "hyperpod-ns-research-localqueue")
    # with a team named training it is that one, wherever it is listed
    data["compute"]["eks"]["scheduling"]["teams"][1] = {"name": "training", "instances": {"workers": 1}}
    path.write_text(yaml.safe_dump(data))
    assert load_config(path).compute.acceptance_team() == "training"


@pytest.mark.parametrize("instances", [{}, {"workers": 0}])
def test_a_team_holding_nothing_is_one_line(tmp_path: Path, instances: dict[str, int]) -> None:
    """A quota of nothing: the team's queue could never admit a job (QA found it accepted, and accept could pick it)."""
    data = yaml.safe_load((ROOT / "config" / "staging.yaml").read_text())
    data["compute"]["eks"]["scheduling"] = {"teams": [{"name": "a", "instances": instances}, {"name": "b", "instances": {"workers": 2}}]}
    path = tmp_path / "staging.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert exc.value.problems == [f"{path}: compute.eks.scheduling.teams[0].instances: team 'a' holds no instances; give it at least one"]


@pytest.mark.parametrize(
    ("region", "az_prefix", "instance_type"), [("ap-northeast-2", "apne2", "ml.p5.48xlarge"), ("ca-central-1", "cac1", "ml.p5.48xlarge")]
)
def test_accept_access_where_the_region_turns_task_governance_off(tmp_path: Path, region: str, az_prefix: str, instance_type: str) -> None:
    """Where task governance defaults to off (tests/hyperpod/constructs/test_task_governance.py's region cases), accept_access
    is one line at validate, not a synth crash."""
    data = yaml.safe_load((ROOT / "config" / "staging.yaml").read_text())
    data["region"], data["network"]["az_ids"] = region, [f"{az_prefix}-az1", f"{az_prefix}-az2"]
    data["network"]["compute_az_id"] = f"{az_prefix}-az1"
    data["compute"]["instance_groups"][0]["instance_type"] = instance_type
    path = tmp_path / "staging.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert exc.value.problems == [f"{path}: compute.eks.accept_access: {ACCEPT_NEEDS_TEAM}"]


def test_accept_without_a_team_queue_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = yaml.safe_load((ROOT / "config" / "staging.yaml").read_text())
    data["compute"]["eks"]["scheduling"] = {"task_governance": False}
    data["compute"]["eks"]["accept_access"] = False
    path = tmp_path / "staging.yaml"
    path.write_text(yaml.safe_dump(data))
    from fminfra.cli.main import main as cli_main

    assert cli_main(["accept", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "no task governance team" in err and "Traceback" not in err


def test_validate_warns_when_the_accept_team_holds_part_of_a_group(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "config" / "staging.yaml").read_text())
    data["compute"]["eks"]["scheduling"] = {
        "teams": [{"name": "alpha", "instances": {"workers": 1}}, {"name": "beta", "instances": {"workers": 1}}]
    }
    path = tmp_path / "staging.yaml"
    path.write_text(yaml.safe_dump(data))
    warnings = {f.path: f.message for f in load_config(path).warnings()}
    assert warnings["compute.eks.scheduling.teams"].startswith(
        "`fminfra accept` queues in team 'alpha', which holds 1 of group 'workers''s 2 instances"
    )
    # the shipped staging (one team holding every instance) has no such warning
    assert "compute.eks.scheduling.teams" not in {f.path: f.message for f in load_config(ROOT / "config" / "staging.yaml").warnings()}
