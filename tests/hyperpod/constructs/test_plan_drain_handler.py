"""The HyperPod EKS plan drain (plan_drain_handler/index.py) against a fake Kubernetes API that
answers as the API server does (tests/fakes/k8s_drain_fakes.py cites its sources) and plans in
botocore's DescribeTrainingPlan shape."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from fminfra.hyperpod.constructs.plan_drain_handler import index
from tests.fakes.k8s_drain_fakes import CLUSTER_CA_PEM, FakeKubernetes

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


# --- errors: one group or node that fails does not stop the others ------------------------------

PENDING_PLAN = "arn:aws:sagemaker:us-east-1:333333333333:training-plan/fminfra-prod-p5en-next"


def _valid_plan(plan: dict[str, Any]) -> dict[str, Any]:
    import botocore.session
    from botocore.validate import ParamValidator

    shape = botocore.session.get_session().get_service_model("sagemaker").operation_model("DescribeTrainingPlan").output_shape
    report = ParamValidator().validate(plan, shape)
    assert not report.has_errors(), report.generate_report()
    return plan


def test_a_capacity_without_an_end_is_skipped_and_the_next_group_is_drained(kube: FakeKubernetes) -> None:
    # botocore's ReservedCapacitySummary has no required EndTime (a Pending capacity need not have one).
    pending = {
        "ReservedCapacityArn": "arn:aws:sagemaker:us-east-1:333333333333:reserved-capacity/rc-0123456789abcdef",
        "InstanceType": "ml.p5en.48xlarge",
        "TotalInstanceCount": 2,
        "Status": "Pending",
    }
    plans = {
        PENDING_PLAN: _valid_plan(
            {"TrainingPlanArn": PENDING_PLAN, "TrainingPlanName": "next", "Status": "Pending", "ReservedCapacitySummaries": [pending]}
        ),
        PLAN: _valid_plan({"TrainingPlanArn": PLAN, "TrainingPlanName": "fminfra-prod-p5en", "Status": "Active", "EndTime": END}),
    }
    kube.add_node("hyperpod-i-0d", "next")
    groups = [{**GROUP, "InstanceGroup": "next", "TrainingPlanArn": PENDING_PLAN}, GROUP]
    lines = index.run({"Groups": groups}, plans.__getitem__, kube.send, NOW)
    assert kube.nodes["hyperpod-i-0d"]["spec"] == {}  # no end: nothing to drain
    assert kube.nodes["hyperpod-i-0b"]["spec"]["unschedulable"] is True
    assert "group gpu: hyperpod-i-0a: evicted training/trainer-0" in lines


def test_a_failing_group_is_logged_and_the_next_group_is_drained(kube: FakeKubernetes) -> None:
    def describe(arn: str) -> Any:
        if arn == PENDING_PLAN:
            raise TimeoutError("timed out")  # e.g. the SageMaker API out of reach
        return _plans(END)(arn)

    groups = [{**GROUP, "InstanceGroup": "next", "TrainingPlanArn": PENDING_PLAN}, GROUP]
    with pytest.raises(index.DrainFailed) as failed:
        index.run({"Groups": groups}, describe, kube.send, NOW)
    assert failed.value.failures == 1
    assert "group next: failed, TimeoutError: timed out; the other groups go on" in failed.value.lines
    assert kube.nodes["hyperpod-i-0a"]["spec"]["unschedulable"] is True and kube.pod_names("hyperpod-i-0a") == [
        "kube-system/nvidia-device-plugin-x"
    ]


def test_a_node_marked_by_a_person_is_logged_and_skipped_and_the_others_drained(kube: FakeKubernetes) -> None:
    kube.add_node("hyperpod-i-0a", "gpu", annotations={index.DRAINED_FOR: "manual"})
    kube.add_pod("training", "trainer-0", "hyperpod-i-0a", labels={"app": "trainer"})
    with pytest.raises(index.DrainFailed) as failed:
        _run(kube)
    (line,) = [line for line in failed.value.lines if "hyperpod-i-0a" in line]
    assert "'manual'" in line and "skipped" in line
    assert ("PATCH", "/api/v1/nodes/hyperpod-i-0a") not in kube.calls and "training/trainer-0" in kube.pod_names("hyperpod-i-0a")
    assert kube.nodes["hyperpod-i-0b"]["spec"]["unschedulable"] is True


def test_a_timeout_on_one_node_does_not_stop_the_others(kube: FakeKubernetes) -> None:
    def send(method: str, path: str, body: Any, content_type: str) -> Any:
        if method == "PATCH" and path.endswith("/hyperpod-i-0a"):
            raise TimeoutError("The read operation timed out")  # what urlopen raises past its timeout
        return kube.send(method, path, body, content_type)

    with pytest.raises(index.DrainFailed) as failed:
        index.run({"Groups": [GROUP]}, _plans(END), send, NOW)
    assert any(line.startswith("group gpu: hyperpod-i-0a: skipped, TimeoutError") for line in failed.value.lines)
    assert kube.nodes["hyperpod-i-0b"]["spec"]["unschedulable"] is True


def test_a_refused_cordon_evicts_nothing(kube: FakeKubernetes) -> None:
    kube.forbidden.add(("patch", "nodes"))  # the drain's RBAC lacks patch on nodes
    with pytest.raises(index.DrainFailed) as failed:
        _run(kube)
    assert [c for c in kube.calls if c[0] == "POST"] == []  # no eviction: the pods could come back
    assert kube.pod_names("hyperpod-i-0a") == ["training/trainer-0", "kube-system/nvidia-device-plugin-x"]
    assert any("hyperpod-i-0a: cordon refused (HTTP 403: nodes is forbidden" in line for line in failed.value.lines)
    assert failed.value.failures == 2  # both nodes


def test_the_fake_forbids_what_rbac_does_not_allow(kube: FakeKubernetes) -> None:
    """Test of the test: a forbidden (verb, resource) is answered 403 and changes nothing; others pass."""
    kube.forbidden.add(("create", "pods/eviction"))
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "trainer-0", "namespace": "training"}}
    status, answer = kube.send("POST", "/api/v1/namespaces/training/pods/trainer-0/eviction", eviction, "application/json")
    assert status == 403 and answer["reason"] == "Forbidden" and 'cannot create resource "pods/eviction"' in answer["message"]
    assert "training/trainer-0" in kube.pod_names("hyperpod-i-0a")
    assert kube.send("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dhyperpod-i-0a", None, "application/json")[0] == 200


def test_an_error_answer_that_is_not_json_is_its_message(tmp_path: Path) -> None:
    """An API server that answers text/plain (docs/facts/eks.md#k8s-authorization-deny-403), through urllib's HTTPError."""
    import email.message
    import io
    import urllib.error

    def urlopen(request: Any, *, context: Any, timeout: float) -> Any:
        raise urllib.error.HTTPError(
            request.full_url, 403, "Forbidden", email.message.Message(), io.BytesIO(b'User "u" cannot patch nodes at the cluster scope.')
        )

    ca = tmp_path / "ca.pem"
    ca.write_text(CLUSTER_CA_PEM)
    send = index.api_sender("https://example.invalid", str(ca), "token", urlopen)
    assert send("PATCH", "/api/v1/nodes/n", {}, "application/merge-patch+json") == (
        403,
        {"message": 'User "u" cannot patch nodes at the cluster scope.'},
    )
