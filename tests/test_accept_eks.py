"""`fminfra accept` on HyperPod EKS: the generated manifests against the recorded schemas
(tests/data/crds, tests/k8s_schemas.py), the dry run, and runs end to end against the fake kubectl
of tests/kubectl_fake.py with botocore's Stubber for eks:DescribeCluster: pass, fail on low
bandwidth, timeout, missing cluster."""

from __future__ import annotations

import copy
import json
import stat
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.stub import Stubber

from fminfra import catalog
from fminfra.cli import main as cli_main
from fminfra.commands import accept_eks
from fminfra.commands.accept_manifests import eks_plan, split_sections
from fminfra.config import load_config
from fminfra.core.queues import QUEUE_LABEL, team_queue
from tests.conftest import ROOT
from tests.k8s_schemas import validate
from tests.slurm_fakes import DATA, ddp_result_line

STAGING = ROOT / "config" / "staging.yaml"


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("FMINFRA_ALLOW_UNPINNED", raising=False)


def _manifests(config: Path = STAGING) -> list[dict[str, Any]]:
    return eks_plan(load_config(config), "r1").manifests


# --- manifests against the recorded schemas -------------------------------------------------------


def test_every_manifest_validates(tmp_path: Path) -> None:
    one_node = tmp_path / "one.yaml"
    one_node.write_text(STAGING.read_text().replace("count: 2", "count: 1"))
    no_fsx = tmp_path / "nofsx.yaml"
    no_fsx.write_text(STAGING.read_text().split("storage:")[0])
    for config in (STAGING, one_node, no_fsx):
        for manifest in _manifests(config):
            assert validate(manifest) == [], (config.name, manifest["kind"])
    kinds = [m["kind"] for m in _manifests()]
    assert kinds == ["ConfigMap", "MPIJob", "HyperPodPyTorchJob", "Job"]
    assert [m["kind"] for m in _manifests(one_node)] == ["ConfigMap", "HyperPodPyTorchJob", "Job"]
    assert [m["kind"] for m in _manifests(no_fsx)] == ["ConfigMap", "MPIJob", "HyperPodPyTorchJob"]


def _job(kind: str) -> dict[str, Any]:
    return copy.deepcopy(next(m for m in _manifests() if m["kind"] == kind))


@pytest.mark.parametrize(
    ("kind", "breaks", "expect"),
    [
        ("Job", lambda m: m["spec"]["template"]["spec"]["containers"][0].update(imagePullPolcy="Always"), "imagePullPolcy"),
        ("Job", lambda m: m["spec"].update(completions="2"), "'2' is not of type"),
        ("ConfigMap", lambda m: m.update(date={}), "date"),
        ("MPIJob", lambda m: m["spec"].update(slotsPerWorker="8"), "'8' is not of type 'integer'"),
        ("MPIJob", lambda m: m["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"].update(nodeSelecter={}), "nodeSelecter"),
        ("MPIJob", lambda m: m["metadata"].update(lables={}), "lables"),
        ("HyperPodPyTorchJob", lambda m: m["spec"]["replicaSpecs"][0].update(replicas="2"), "replicas"),
        ("HyperPodPyTorchJob", lambda m: m["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0].update(imag="x"), "imag"),
        ("HyperPodPyTorchJob", lambda m: m.update(apiVersion="sagemaker.amazonaws.com/v2"), "v2"),
    ],
)
def test_a_broken_manifest_fails_validation(kind: str, breaks: Any, expect: str) -> None:
    """The test of the test: a wrong field or a wrong type is caught for every kind we submit."""
    manifest = _job(kind)
    assert validate(manifest) == []
    breaks(manifest)
    problems = validate(manifest)
    assert problems and any(expect in p for p in problems), problems


def test_requests_come_from_the_catalog_and_jobs_carry_the_queue_label() -> None:
    spec = catalog.get("p5en.48xlarge")
    queue = team_queue("hyperpod-eks")
    mpi, hp, job = _job("MPIJob"), _job("HyperPodPyTorchJob"), _job("Job")
    worker = mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    want = {"nvidia.com/gpu": spec.gpus, "vpc.amazonaws.com/efa": spec.max_efa_interfaces}
    assert want == {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 16}
    assert worker["containers"][0]["resources"] == {"requests": want, "limits": want}
    assert hp["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["limits"] == want
    assert worker["nodeSelector"] == {"node.kubernetes.io/instance-type": "ml.p5en.48xlarge"}
    for m in (mpi, hp, job):
        assert m["metadata"]["namespace"] == queue.namespace == "hyperpod-ns-training"
        assert m["metadata"]["labels"][QUEUE_LABEL] == queue.local_queue
    assert hp["spec"]["nprocPerNode"] == "8" and hp["spec"]["replicaSpecs"][0]["replicas"] == 2
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == job["spec"]["parallelism"] == 2
    assert {"name": "fsx", "hostPath": {"path": "/fsx", "type": "Directory"}} in job["spec"]["template"]["spec"]["volumes"]
    assert "@sha256:" in hp["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["image"]


def test_split_sections_cuts_on_the_markers() -> None:
    log = "noise\n[1,0]<stdout>:fminfra-accept begin all_reduce\nrow 1\nfminfra-accept begin all_gather\nrow 2\nfminfra-accept end\ntail\n"
    assert split_sections(log) == {"all_reduce": "row 1\n", "all_gather": "row 2\n"}


# --- dry run --------------------------------------------------------------------------------------


def test_dry_run_prints_exactly_the_manifests(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path)
    assert cli_main(["accept", "staging", "--dry-run", "--run-id", "r1", "--pipeline", str(pipeline)]) == 0
    out = capsys.readouterr().out
    assert list(yaml.safe_load_all(out)) == _manifests()
    assert "fail < 250 GB/s, warn < 300 GB/s (pipeline.yaml accept)" in out


def test_dry_run_without_a_threshold_fails(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path)
    data = yaml.safe_load(pipeline.read_text())
    for env in data["environments"]:
        env.pop("accept", None)  # no pipeline.yaml threshold for staging's p5en
    pipeline.write_text(yaml.safe_dump(data, sort_keys=False))
    assert cli_main(["accept", "staging", "--dry-run", "--run-id", "r1", "--pipeline", str(pipeline)]) == 1
    assert "FAIL, no threshold (none: instance_types.tsv has no measured threshold for p5en.48xlarge)" in capsys.readouterr().out


def test_inference_only_eks_has_nothing_to_accept(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text = "".join(line for line in STAGING.read_text().splitlines(keepends=True) if "accept_access:" not in line)  # HyperPod EKS only
    head, tail = text.split("  instance_groups:", 1)
    config = tmp_path / "serve.yaml"
    config.write_text(head.replace("orchestrator: eks", "orchestrator: none") + "  eks:" + tail.split("  eks:", 1)[1])
    assert cli_main(["accept", str(config), "--dry-run"]) == 0
    assert "no training groups" in capsys.readouterr().out


def test_bad_run_id_for_kubernetes_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["accept", "staging", "--dry-run", "--run-id", "a_b"]) == 2
    err = capsys.readouterr().err
    assert "--run-id" in err and "Traceback" not in err


# --- end to end against the fake kubectl ----------------------------------------------------------

CLUSTER = {
    "name": "fminfra-staging-eks",
    "arn": "arn:aws:eks:us-west-2:222222222222:cluster/fminfra-staging-eks",
    "createdAt": datetime(2026, 11, 30),
    "version": "1.34",
    "endpoint": "https://ABCDEF0123456789.gr7.us-west-2.eks.amazonaws.com",
    "roleArn": "arn:aws:iam::222222222222:role/eks",
    "resourcesVpcConfig": {"subnetIds": ["subnet-1"], "endpointPublicAccess": False, "endpointPrivateAccess": True},
    "status": "ACTIVE",
    "certificateAuthority": {"data": "TFMwdExTMUNSVWRKVGlCRFJWSlVTVVpKUTBGVVJTMHRMUzB0Q2c9PQ=="},
}


def _pipeline(tmp_path: Path) -> Path:
    pipeline = tmp_path / "pipeline.yaml"
    data = yaml.safe_load((ROOT / "pipeline.yaml").read_text())
    for env in data["environments"]:
        env["config"] = f"{ROOT}/{env['config']}"
        if env["config"].endswith("/staging.yaml"):  # replaces the shipped thresholds (a second `accept:` key would be invalid YAML)
            env["accept"] = {"nccl_fail_gbps": 250, "nccl_warn_gbps": 300}
    pipeline.write_text(yaml.safe_dump(data, sort_keys=False))
    return pipeline


def _logs(nccl: str) -> dict[str, str]:
    provider = (DATA / "nccl-debug-efa-ec2-guide.txt").read_text()
    table = (DATA / nccl).read_text()
    launcher = "".join(f"fminfra-accept begin {c}\n{provider}{table}" for c in ("all_reduce", "all_gather", "reduce_scatter"))
    fsx = {}
    for i in range(2):
        write = (DATA / "fio-3.1-randwrite-32jobs.json").read_text()
        read = (DATA / "fio-3.1-randread-32jobs.json").read_text()
        fsx[f"fsx-{i}"] = f"fminfra-accept fio node{i}-write\n{write}\nfminfra-accept fio node{i}-read\n{read}\nfminfra-accept end\n"
    return {"nccl": launcher + "fminfra-accept end\n", "ddp": ddp_result_line(41.5, 1.2, 0.2) + "\n", "ddp-other": "", **fsx}


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake kubectl on PATH, an EKS client whose DescribeCluster answers with the cluster above."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(f'#!/bin/sh\nexec {sys.executable} {ROOT / "tests" / "kubectl_fake.py"} "$@"\n')
    kubectl.chmod(kubectl.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    state = tmp_path / "state.json"
    queue = team_queue("hyperpod-eks")
    existing = [f"namespace/{queue.namespace}", f"localqueue.kueue.x-k8s.io/{queue.local_queue}"]
    logs = _logs("nccl-all-reduce-2x-p5-mpijob.txt")
    state.write_text(json.dumps({"endpoint": CLUSTER["endpoint"], "scenario": {}, "logs": logs, "existing": existing}))
    monkeypatch.setenv("FAKE_KUBECTL_STATE", str(state))
    _stub(monkeypatch, {"cluster": CLUSTER})
    return state


def _stub(monkeypatch: pytest.MonkeyPatch, response: dict[str, Any] | None, error: str | None = None) -> Stubber:
    client = boto3.client("eks", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(client)
    if error:
        stubber.add_client_error(
            "describe_cluster", service_error_code=error, http_status_code=404, expected_params={"name": "fminfra-staging-eks"}
        )
    else:
        stubber.add_response("describe_cluster", response, {"name": "fminfra-staging-eks"})
    stubber.activate()
    monkeypatch.setattr(accept_eks, "eks_client", lambda region: client)
    return stubber


def _accept(tmp_path: Path, *extra: str) -> int:
    report = tmp_path / "out" / "report.json"
    report.parent.mkdir(exist_ok=True)
    argv = [
        "accept",
        "staging",
        "--run-id",
        "e2e",
        "--poll-seconds",
        "0.01",
        "--pipeline",
        str(_pipeline(tmp_path)),
        "--report",
        str(report),
    ]
    return cli_main([*argv, *extra])


def _report(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "out" / "report.json").read_text())


def test_end_to_end_pass(cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _accept(tmp_path) == 0
    out = capsys.readouterr().out
    assert "mpijob.kubeflow.org/accept-e2e-nccl-workers created" in out
    assert "nccl workers (accept-e2e-nccl-workers): Succeeded" in out
    report = _report(tmp_path)
    assert report["result"] == "PASS"
    by_name = {c["name"]: c for c in report["checks"]}
    assert by_name["nccl all_reduce workers"]["figure"] == "313.29 GB/s"  # the MPIJob output's 1 GiB row
    assert by_name["ddp workers"]["status"] == "PASS"
    assert by_name["fsx read workers"]["status"] == "WARN"  # a laptop SSD's fio output is below FSx's 2.34 GB/s
    assert (tmp_path / "out" / "accept-e2e" / "workers" / "nccl" / "nccl-all_reduce.log").is_file()
    # every job and the scripts are deleted once their logs are saved
    calls = json.loads(cluster.read_text())["calls"]
    deleted = [c[1] for c in calls if c[0] == "delete"]
    assert deleted == ["mpijobs.kubeflow.org", "hyperpodpytorchjobs.sagemaker.amazonaws.com", "jobs.batch", "configmap"]


def test_end_to_end_fails_on_low_bandwidth(cluster: Path, tmp_path: Path) -> None:
    state = json.loads(cluster.read_text())
    state["logs"] = _logs("nccl-all-reduce-2x-p4de.txt")
    cluster.write_text(json.dumps(state))
    assert _accept(tmp_path) == 1
    check = next(c for c in _report(tmp_path)["checks"] if c["name"] == "nccl all_reduce workers")
    assert check["status"] == "FAIL" and check["figure"] == "76.79 GB/s"


def test_end_to_end_failed_job(cluster: Path, tmp_path: Path) -> None:
    state = json.loads(cluster.read_text())
    state["scenario"] = {"ddp": "fail"}
    cluster.write_text(json.dumps(state))
    assert _accept(tmp_path) == 1
    check = next(c for c in _report(tmp_path)["checks"] if c["name"] == "ddp workers")
    assert check["status"] == "FAIL" and "ended Failed" in check["detail"]


def test_end_to_end_timeout_deletes_the_job(cluster: Path, tmp_path: Path) -> None:
    state = json.loads(cluster.read_text())
    state["scenario"] = {"nccl": "hang"}
    cluster.write_text(json.dumps(state))
    assert _accept(tmp_path, "--timeout-minutes", "0.001") == 1
    checks = {c["name"]: c for c in _report(tmp_path)["checks"]}
    assert checks["nccl workers"]["status"] == "FAIL" and "did not finish in time" in checks["nccl workers"]["detail"]
    assert checks["ddp workers"]["status"] == "FAIL" and "not submitted" in checks["ddp workers"]["detail"]
    calls = json.loads(cluster.read_text())["calls"]
    assert [
        "delete",
        "mpijobs.kubeflow.org",
        "accept-e2e-nccl-workers",
        "-n",
        "hyperpod-ns-training",
        "--ignore-not-found",
        "--wait=false",
    ] in calls


def test_jobs_run_one_at_a_time(cluster: Path, tmp_path: Path) -> None:
    """Each job is applied only after the one before it ended (two jobs wanting every GPU of the same nodes)."""
    assert _accept(tmp_path) == 0
    calls = json.loads(cluster.read_text())["calls"]
    order = [c[1] if c[0] == "get" and c[1] != "pods" else c[0] for c in calls if c[0] in ("apply", "get")]
    applies = [i for i, c in enumerate(order) if c == "apply"]
    assert len(applies) == 4  # the ConfigMap, then nccl, ddp, fsx
    between = [order[applies[i] + 1 : applies[i + 1]] for i in range(1, 3)]
    assert "mpijobs.kubeflow.org" in between[0] and "hyperpodpytorchjobs.sagemaker.amazonaws.com" in between[1]


def test_missing_queue_is_one_line(cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without task governance's LocalQueue the jobs would wait forever: refuse before applying anything."""
    state = json.loads(cluster.read_text())
    state["existing"] = state["existing"][:1]
    cluster.write_text(json.dumps(state))
    assert _accept(tmp_path) == 2
    err = capsys.readouterr().err
    assert "localqueues.kueue.x-k8s.io hyperpod-ns-training-localqueue not found on fminfra-staging-eks" in err
    assert not any(c[0] == "apply" for c in json.loads(cluster.read_text())["calls"])


def test_missing_cluster_is_one_line(
    cluster: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _stub(monkeypatch, None, error="ResourceNotFoundException")
    assert _accept(tmp_path) == 2
    err = capsys.readouterr().err
    assert "EKS cluster fminfra-staging-eks not found in us-west-2: deploy staging first" in err
    assert "Traceback" not in err
    assert "calls" not in json.loads(cluster.read_text())  # nothing was applied


def test_without_kubectl_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert _accept(tmp_path) == 2
    assert "kubectl not found on PATH" in capsys.readouterr().err


def test_the_fake_kubectl_refuses_a_kubeconfig_without_an_eks_token(cluster: Path, tmp_path: Path) -> None:
    """The test of the fake: only the kubeconfig `aws eks update-kubeconfig` would write gets through."""
    import subprocess

    good = accept_eks.kubeconfig(CLUSTER, "us-west-2")
    bad = copy.deepcopy(good)
    bad["users"][0]["user"] = {"token": "static"}
    for config, code in ((good, 0), (bad, 1)):
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(config))
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(path), "get", "namespace", "hyperpod-ns-training", "-o", "name"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == code, result.stderr
