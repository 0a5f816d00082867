"""The HyperPod EKS plan drain (plan_drain_handler/index.py) against a fake Kubernetes API that
answers as the API server does (tests/fakes/k8s_drain_fakes.py cites its sources) and plans in
botocore's DescribeTrainingPlan shape."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fminfra.hyperpod.constructs.plan_drain_handler import index
from tests.fakes.k8s_drain_fakes import FakeKubernetes

PLAN = "arn:aws:sagemaker:us-east-1:333333333333:training-plan/fminfra-prod-p5en"
NOW = int(datetime(2027, 1, 17, 10, 51, tzinfo=UTC).timestamp())
END = datetime(2027, 1, 17, 11, 30, tzinfo=UTC)  # drain (600 s) from 10:50, terminations from 11:00
GROUP = {"InstanceGroup": "gpu", "TrainingPlanArn": PLAN, "InstanceType": "ml.p5en.48xlarge", "DrainSeconds": 600}


def _plans(end: datetime) -> Any:
    def describe(arn: str) -> dict[str, Any]:
        assert arn == PLAN
        import botocore.session
        from botocore.validate import ParamValidator

        plan = {"TrainingPlanArn": PLAN, "TrainingPlanName": "fminfra-prod-p5en", "Status": "Active", "EndTime": end}
        shape = botocore.session.get_session().get_service_model("sagemaker").operation_model("DescribeTrainingPlan").output_shape
        assert not ParamValidator().validate(plan, shape).has_errors()
        return plan

    return describe


@pytest.fixture
def kube() -> FakeKubernetes:
    k = FakeKubernetes()
    k.add_node("hyperpod-i-0a", "gpu")
    k.add_node("hyperpod-i-0b", "gpu")
    k.add_node("hyperpod-i-0c", "other")
    k.add_pod("training", "trainer-0", "hyperpod-i-0a", labels={"app": "trainer"})
    k.add_pod("kube-system", "nvidia-device-plugin-x", "hyperpod-i-0a", owner="DaemonSet")
    k.add_pod("training", "trainer-1", "hyperpod-i-0c", labels={"app": "trainer"})
    return k


def _run(kube: FakeKubernetes, now: int = NOW, end: datetime = END) -> list[str]:
    return index.run({"Groups": [GROUP]}, _plans(end), kube.send, now)


def test_nothing_is_drained_before_the_drain_time(kube: FakeKubernetes) -> None:
    _run(kube, now=NOW - 120)
    assert [c for c in kube.calls if c[0] != "GET"] == []


def test_at_the_drain_time_the_groups_nodes_are_cordoned_and_their_pods_evicted(kube: FakeKubernetes) -> None:
    lines = _run(kube)
    for name in ("hyperpod-i-0a", "hyperpod-i-0b"):
        node = kube.nodes[name]
        assert node["spec"]["unschedulable"] is True
        assert node["metadata"]["annotations"][index.DRAINED_FOR] == str(int(END.timestamp()))
    assert kube.pod_names("hyperpod-i-0a") == ["kube-system/nvidia-device-plugin-x"]  # daemon set pods stay
    # Another group's node is not this plan's.
    assert kube.nodes["hyperpod-i-0c"]["spec"] == {} and kube.pod_names("hyperpod-i-0c") == ["training/trainer-1"]
    assert "group gpu: hyperpod-i-0a: evicted training/trainer-0" in lines


def test_a_pod_its_budget_protects_is_evicted_at_a_later_run_once_the_budget_allows(kube: FakeKubernetes) -> None:
    kube.add_pod("training", "trainer-2", "hyperpod-i-0b", labels={"app": "trainer"})
    kube.add_budget("training", {"app": "trainer"}, min_available=2)  # trainer-0, -1, -2 running: one may go
    lines = _run(kube)
    assert any("PodDisruptionBudget forbids it now" in line for line in lines)
    assert len(kube.pod_names("hyperpod-i-0a") + kube.pod_names("hyperpod-i-0b")) == 2  # one evicted, one refused (429)
    kube.budgets[0]["minAvailable"] = 0  # e.g. the job's replacement pods run elsewhere
    _run(kube, now=NOW + 60)
    assert kube.pod_names("hyperpod-i-0b") == [] and kube.pod_names("hyperpod-i-0a") == ["kube-system/nvidia-device-plugin-x"]


def test_a_node_an_operator_cordoned_is_drained_but_never_uncordoned(kube: FakeKubernetes) -> None:
    kube.add_node("hyperpod-i-0b", "gpu", unschedulable=True)
    _run(kube)
    assert index.DRAINED_FOR not in kube.nodes["hyperpod-i-0b"]["metadata"]["annotations"]
    _run(kube, now=NOW, end=END + timedelta(days=7))  # the plan is extended
    assert kube.nodes["hyperpod-i-0b"]["spec"]["unschedulable"] is True
    assert kube.nodes["hyperpod-i-0a"]["spec"]["unschedulable"] is False  # its own drain is undone


@pytest.mark.parametrize(
    ("now", "end"),
    [(NOW + 3600, END + timedelta(days=7)), (NOW, END + timedelta(days=7))],
    ids=["end-passed-node-still-here", "end-moved-later"],
)
def test_a_node_it_drained_is_uncordoned_when_the_capacity_goes_on(kube: FakeKubernetes, now: int, end: datetime) -> None:
    _run(kube)
    lines = _run(kube, now=now, end=end)
    node = kube.nodes["hyperpod-i-0a"]
    assert node["spec"]["unschedulable"] is False and index.DRAINED_FOR not in node["metadata"]["annotations"]
    assert any("uncordoned" in line for line in lines)


def test_the_plan_end_is_the_earliest_capacity_of_the_groups_type_not_failed() -> None:
    def capacity(n: int, instance_type: str, end: datetime, status: str = "Active") -> dict[str, Any]:
        return {
            "ReservedCapacityArn": f"arn:rc/{n}",
            "InstanceType": instance_type,
            "TotalInstanceCount": 2,
            "Status": status,
            "EndTime": end,
        }

    plan = {
        "EndTime": END + timedelta(days=9),
        "ReservedCapacitySummaries": [
            capacity(1, "ml.p5en.48xlarge", END + timedelta(days=2)),
            capacity(2, "ml.p5en.48xlarge", END - timedelta(days=2)),  # passed
            capacity(3, "ml.p5.48xlarge", END),  # another type
            capacity(4, "ml.p5en.48xlarge", END, "Failed"),
        ],
    }
    assert index.plan_end(plan, "ml.p5en.48xlarge", NOW) == int((END + timedelta(days=2)).timestamp())
    assert index.plan_end({"EndTime": END}, "ml.p5en.48xlarge", NOW) == int(END.timestamp())
    assert index.plan_end({"EndTime": END}, "", int(END.timestamp())) is None


def test_the_fake_refuses_what_the_api_server_does(kube: FakeKubernetes) -> None:
    """Test of the test: a strategic patch where a merge patch is sent, an eviction of another
    API version, a pod two budgets select, a pod its budget forbids evicting."""
    assert kube.send("PATCH", "/api/v1/nodes/hyperpod-i-0a", {"spec": {}}, "application/strategic-merge-patch+json")[0] == 415
    path = "/api/v1/namespaces/training/pods/trainer-0/eviction"
    assert (
        kube.send(
            "POST", path, {"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": "trainer-0"}}, "application/json"
        )[0]
        == 400
    )
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "trainer-0", "namespace": "training"}}
    kube.add_budget("training", {"app": "trainer"}, min_available=2)
    assert kube.send("POST", path, eviction, "application/json")[0] == 429
    kube.add_budget("training", {"app": "trainer"}, min_available=0)
    assert kube.send("POST", path, eviction, "application/json")[0] == 500
    assert kube.pod_names("hyperpod-i-0a") == ["training/trainer-0", "kube-system/nvidia-device-plugin-x"]
