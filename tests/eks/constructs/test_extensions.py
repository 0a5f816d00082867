"""Extensions (fminfra/eks/constructs/extensions.py): a library user's chart and a config's extra
add-on install after the fminfra component they name and before fminfra's workloads."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from fminfra import FEATURE_FLAGS, EnvironmentStage, load_config
from fminfra.config import parse_config, read_yaml
from fminfra.core.errors import ConfigError
from fminfra.eks.constructs.cluster import HelmChartSpec
from fminfra.eks.constructs.extensions import AddonExtension, ChartExtension, extension_problems
from tests.conftest import ROOT, Synth
from tests.hyperpod.constructs.test_eks import created_before, dependency_graph

CHART = ChartExtension(
    chart=HelmChartSpec(name="team-gateway", chart="gateway", repository="https://example.org/charts", version="1.2.3"), after="vpc-cni"
)


def _lid(template: dict[str, Any], fragment: str, resource_type: str) -> str:
    (lid,) = [k for k, v in template["Resources"].items() if fragment in k and v["Type"] == resource_type]
    return lid


@pytest.fixture(scope="module")
def staging_with_extension() -> dict[str, Any]:
    raw = read_yaml(ROOT / "config" / "staging.yaml")
    raw["compute"]["eks"]["load_balancer_controller"] = True  # off in the shipped staging; on here to show the order
    raw["compute"]["eks"]["addons"] = [{"name": "aws-ebs-csi-driver", "version": "v1.35.0-eksbuild.1", "after": "aws-fsx-csi-driver"}]
    app = cdk.App(context=FEATURE_FLAGS)
    stage = EnvironmentStage(app, parse_config(raw, "staging.yaml"), eks_extensions=[CHART])
    return Template.from_stack(stage.compute).to_json()


def test_a_chart_extension_installs_after_the_cni_and_before_the_workloads(staging_with_extension: dict[str, Any]) -> None:
    template = staging_with_extension
    graph = dependency_graph(template)
    chart = _lid(template, "Extensionteamgateway", "Custom::AWSCDK-EKS-HelmChart")
    before = created_before(graph, chart)
    assert _lid(template, "EksAddonvpccni", "AWS::EKS::Addon") in before
    # and, on a cluster with the load balancer controller, after its chart too, whose Service webhook
    # fails closed until its pods run (tests/compute/stack/test_load_balancer_order.py)
    assert _lid(template, "Chartawsloadbalancercontroller", "Custom::AWSCDK-EKS-HelmChart") in before
    workloads = [
        _lid(template, "Chartnvidiadeviceplugin", "Custom::AWSCDK-EKS-HelmChart"),
        _lid(template, "Chartprometheusnodeexporter", "Custom::AWSCDK-EKS-HelmChart"),
        _lid(template, "FsxVolumeManifest", "Custom::AWSCDK-EKS-KubernetesResource"),
    ]
    for workload in workloads:
        assert chart in created_before(graph, workload), workload


def test_a_config_addon_installs_after_its_anchor_and_before_the_workloads(staging_with_extension: dict[str, Any]) -> None:
    template = staging_with_extension
    graph = dependency_graph(template)
    addon = _lid(template, "Extensionawsebscsidriver", "AWS::EKS::Addon")
    assert template["Resources"][addon]["Properties"]["AddonVersion"] == "v1.35.0-eksbuild.1"
    assert _lid(template, "EksAddonawsfsxcsidriver", "AWS::EKS::Addon") in created_before(graph, addon)
    assert addon in created_before(graph, _lid(template, "FsxVolumeManifest", "Custom::AWSCDK-EKS-KubernetesResource"))


def test_the_order_check_finds_a_missing_dependency(staging_with_extension: dict[str, Any]) -> None:
    """A test of the test: with the workload's DependsOn on the extension removed, the check fails."""
    template = staging_with_extension
    chart = _lid(template, "Extensionteamgateway", "Custom::AWSCDK-EKS-HelmChart")
    plugin = _lid(template, "Chartnvidiadeviceplugin", "Custom::AWSCDK-EKS-HelmChart")
    graph = dependency_graph(template)
    graph[plugin] = graph[plugin] - {chart}
    assert chart not in created_before(graph, plugin)


@pytest.mark.parametrize(
    ("extensions", "expected"),
    [
        ([AddonExtension(name="vpc-cni", version="v1.0.0-eksbuild.1")], "fminfra installs 'vpc-cni' itself"),
        ([AddonExtension(name="my-addon", version="latest")], "version must be an add-on build such as v1.2.3-eksbuild.1"),
        ([ChartExtension(chart=CHART.chart, after="workloads")], "must be one of vpc-cni, core-addons, aws-fsx-csi-driver"),
        ([CHART, CHART], "name 'team-gateway' is given twice"),
    ],
)
def test_bad_extensions_are_refused(extensions: list[Any], expected: str) -> None:
    assert any(expected in p for p in extension_problems(extensions)), extension_problems(extensions)


def test_an_extension_after_a_component_the_cluster_lacks_is_refused() -> None:
    """eks-inference-only has no FSx file system, so no FSx CSI driver to follow."""
    app = cdk.App(context=FEATURE_FLAGS)
    cfg = load_config(ROOT / "tests" / "configs" / "eks-inference-only.yaml")
    with pytest.raises(ValueError, match="after 'aws-fsx-csi-driver', which this cluster does not install"):
        EnvironmentStage(app, cfg, eks_extensions=[ChartExtension(chart=CHART.chart, after="aws-fsx-csi-driver")])


@pytest.mark.parametrize(
    ("addon", "message"),
    [
        ({"name": "coredns", "version": "v1.0.0-eksbuild.1"}, "fminfra installs 'coredns' itself"),
        ({"name": "x", "version": "1.0"}, "must be an add-on build such as v1.2.3-eksbuild.1"),
        ({"name": "x", "version": "v1.0.0-eksbuild.1", "after": "nodes"}, "must be one of vpc-cni"),
        (
            {"name": "x", "version": "v1.0.0-eksbuild.1", "pod_identity": [{"service_account": "Bad_SA", "managed_policies": ["P"]}]},
            "pod_identity\\[0\\]: service_account must be a Kubernetes service account name",
        ),
        (
            {
                "name": "x",
                "version": "v1.0.0-eksbuild.1",
                "pod_identity": [{"service_account": "sa", "managed_policies": ["arn:aws:iam::aws:policy/service-role/X"]}],
            },
            "managed_policies must be an AWS managed policy name with its path",
        ),
        (
            {"name": "x", "version": "v1.0.0-eksbuild.1", "pod_identity": [{"service_account": "sa", "managed_policies": []}]},
            "managed_policies must name at least one AWS managed policy",
        ),
        (
            {
                "name": "x",
                "version": "v1.0.0-eksbuild.1",
                "pod_identity": [
                    {"service_account": "sa", "managed_policies": ["P"]},
                    {"service_account": "sa", "managed_policies": ["P"]},
                ],
            },
            "pod_identity\\[1\\]: service_account 'sa' is given twice",
        ),
    ],
)
def test_config_addons_are_validated(addon: dict[str, Any], message: str) -> None:
    raw = read_yaml(ROOT / "config" / "staging.yaml")
    raw["compute"]["eks"]["addons"] = [addon]
    with pytest.raises(ConfigError, match=message):
        parse_config(raw, "staging.yaml")


def test_an_addon_gets_the_role_its_config_names(synth: Synth) -> None:
    """cap-eks's EBS CSI driver: a Pod Identity role with the managed policy the add-on page names, on its
    service account, associated through the add-on (docs/facts/iam.md#eks-addon-pod-identity-associations)."""
    resources = synth.template("cap-eks", "Compute")["Resources"]
    addon = resources[_lid({"Resources": resources}, "Extensionawsebscsidriver", "AWS::EKS::Addon")]
    (association,) = addon["Properties"]["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "ebs-csi-controller-sa"
    role = resources[association["RoleArn"]["Fn::GetAtt"][0]]
    statement = role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(statement["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    (policy,) = role["Properties"]["ManagedPolicyArns"]
    assert policy == {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy"]]}


def test_the_documented_addon_policy_exists_where_named() -> None:
    """The policy of docs/compute.md's example and cap-eks is AWS's, at that path (moto's copy of the list)."""
    from moto.iam.aws_managed_policies import aws_managed_policies_data

    policies = json.loads(aws_managed_policies_data)
    assert policies["AmazonEBSCSIDriverPolicy"]["Path"] == "/service-role/"
    assert "service-role/AmazonEBSCSIDriverPolicy" in (ROOT / "docs" / "compute.md").read_text()


def test_a_marketplace_addon_name_with_an_underscore_is_accepted() -> None:
    """docs/facts/eks.md#eks-addon-names: vendor_product names (serving read r2, C: they were refused)."""
    raw = read_yaml(ROOT / "config" / "staging.yaml")
    raw["compute"]["eks"]["addons"] = [{"name": "dynatrace_dynatrace-operator", "version": "v1.4.0-eksbuild.1"}]
    assert parse_config(raw, "staging.yaml").compute.eks is not None


def test_a_chart_extension_may_not_take_over_an_fminfra_release() -> None:
    """`helm upgrade --install` of a release fminfra installs would replace fminfra's chart (serving read r2, C)."""
    app = cdk.App(context=FEATURE_FLAGS)
    cfg = load_config(ROOT / "tests" / "configs" / "eks-inference-only.yaml")
    takeover = ChartExtension(
        chart=HelmChartSpec(
            name="aws-load-balancer-controller",
            chart="x",
            repository="https://example.org/charts",
            version="1.0.0",
            namespace="kube-system",
        )
    )
    with pytest.raises(ValueError, match="fminfra installs Helm release 'aws-load-balancer-controller' in namespace 'kube-system' itself"):
        EnvironmentStage(app, cfg, eks_extensions=[takeover])
    # the same release name in another namespace is another release
    other = ChartExtension(
        chart=HelmChartSpec(name="aws-load-balancer-controller", chart="x", repository="https://e.org", version="1.0.0", namespace="team")
    )
    EnvironmentStage(cdk.App(context=FEATURE_FLAGS), cfg, eks_extensions=[other])


def test_the_installed_addons_rule_is_what_each_cluster_installs(synth: Synth) -> None:
    """`installed_addons` (what validate refuses an extension to repeat) against every synthesized cluster's add-ons."""
    from fminfra.eks.rules import installed_addons

    checked = 0
    for env, cfg in synth.configs.items():
        if not cfg.compute.needs_eks:
            continue
        resources = synth.template(env, "Compute")["Resources"]
        found = {
            r["Properties"]["AddonName"]
            for lid, r in resources.items()
            if r["Type"] == "AWS::EKS::Addon" and not lid.startswith("Extension")
        }
        expected = installed_addons(
            hyperpod=cfg.compute.orchestrator == "eks",
            task_governance=bool(cfg.compute.team_quotas()),
            file_system=cfg.storage is not None and cfg.storage.lustre is not None,
        )
        assert found == set(expected), env
        checked += 1
    assert checked >= 4


@pytest.mark.parametrize(("config", "refused"), [("tests/configs/eks-inference-only.yaml", False), ("config/staging.yaml", True)])
def test_cert_manager_is_refused_only_where_fminfra_installs_it(config: str, refused: bool) -> None:
    """Serving read r2, C: cert-manager (and the FSx CSI driver) were refused on every cluster, also where
    fminfra does not install them (an inference-only cluster without HyperPod)."""
    raw = read_yaml(ROOT / config)
    raw["compute"].setdefault("eks", {})["addons"] = [{"name": "cert-manager", "version": "v1.18.2-eksbuild.2"}]
    if refused:
        with pytest.raises(ConfigError, match=r"compute.eks.addons\[0\].name.*fminfra installs 'cert-manager' itself on this cluster"):
            parse_config(raw, "x.yaml")
    else:
        assert parse_config(raw, "x.yaml").compute.eks is not None
