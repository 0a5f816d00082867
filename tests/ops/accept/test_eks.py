"""`fminfra accept` on HyperPod EKS: the generated manifests against the recorded schemas
(tests/data/crds, tests/fakes/k8s_schemas.py), the dry run, and runs end to end against the fake kubectl
of tests/fakes/kubectl_fake.py with botocore's Stubber for eks:DescribeCluster: pass, fail on low
bandwidth, timeout, missing cluster."""

from __future__ import annotations

import copy
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.stub import Stubber

from fminfra import catalog
from fminfra.cli.main import main as cli_main
from fminfra.config import load_config
from fminfra.eks.rules import DNS_LABEL as NAME_RULE
from fminfra.eks.rules import INSTANCE_TYPE_LABEL, QUEUE_LABEL, team_queue
from fminfra.ops.accept import eks as accept_eks
from fminfra.ops.accept.manifests import eks_plan, split_sections
from tests.conftest import ROOT
from tests.fakes.k8s_schemas import validate
from tests.fakes.kubectl_fake import put_on_path
from tests.fakes.slurm_fakes import DATA, ddp_result_line

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


def pod_template_problems(manifest: dict[str, Any], topology_aware: bool = True) -> list[str]:
    """What makes a pod set of an accept job unrunnable under HyperPod task governance, per pod template:
    no queue label (its admission policy refuses the pod: docs/facts/hyperpod.md#task-governance-pod-queue-label),
    or, where the cluster's flavors are topology-aware (`topology_aware`: what a topology request means), no
    GPU request and no pod set group (no flavor in a ClusterQueue of topology-aware flavors only:
    docs/facts/eks.md#kueue-tas-cluster-queue-mixing; a plain ClusterQueue needs no flavor for it)."""
    spec = manifest["spec"]
    templates = {
        "MPIJob": lambda: {k: v["template"] for k, v in spec["mpiReplicaSpecs"].items()},
        "HyperPodPyTorchJob": lambda: {r["name"]: r["template"] for r in spec["replicaSpecs"]},
        "Job": lambda: {"pod": spec["template"]},
    }[manifest["kind"]]()
    problems = []
    for name, template in templates.items():
        meta = template.get("metadata", {})
        if not meta.get("labels", {}).get(QUEUE_LABEL):
            problems.append(f"{manifest['kind']} {name}: no {QUEUE_LABEL} label on the pod template")
        gpus = any("nvidia.com/gpu" in c.get("resources", {}).get("requests", {}) for c in template["spec"]["containers"])
        # one pod per node by anti-affinity: Kueue's topology-aware placement ignores it and packs by capacity,
        # so such a pod must take a whole node's GPUs (scheduling read 5, B1)
        spread = "podAntiAffinity" in template["spec"].get("affinity", {})
        node_gpus = catalog.get(template["spec"]["nodeSelector"][INSTANCE_TYPE_LABEL].removeprefix("ml.")).gpus if spread else 0
        taken = sum(int(c.get("resources", {}).get("requests", {}).get("nvidia.com/gpu", 0)) for c in template["spec"]["containers"])
        if spread and taken != node_gpus:
            problems.append(f"{manifest['kind']} {name}: one pod per node by anti-affinity, but {taken} of the node's {node_gpus} GPUs")
        requests = {k for k in meta.get("annotations", {}) if k.startswith("kueue.x-k8s.io/podset-") and k.endswith("-topology")}
        # a ClusterQueue mixing topology-aware and plain flavors refuses an unannotated pod set on its topology-aware
        # ones, and a plain flavor refuses an annotated one (compute read 5, B1)
        if topology_aware and not requests:
            problems.append(f"{manifest['kind']} {name}: no explicit topology request where the flavor is topology-aware")
        if not topology_aware and requests:
            problems.append(f"{manifest['kind']} {name}: a topology request where the flavor is plain")
        if topology_aware and not gpus and "kueue.x-k8s.io/podset-group-name" not in meta.get("annotations", {}):
            problems.append(f"{manifest['kind']} {name}: requests no GPU and is in no pod set group")
    return problems


def test_every_pod_set_carries_the_queue_label_and_can_get_a_flavor() -> None:
    """Compute read 3 A1 (the MPIJob's and fio Job's pods had no queue label) and scheduling read 4 B1 (the fio
    pods requested nothing) are one kind: checked on every pod template, with a topology asked and without."""
    from fminfra.config import load_config
    from fminfra.ops.accept.manifests import eks_plan

    cfg = load_config(ROOT / "config" / "staging.yaml")
    jobs = [j.manifest for j in eks_plan(cfg, "r1").jobs]
    plain = [j.manifest for j in eks_plan(cfg, "r1", {t: "plain" for t in ("p5en.48xlarge",)}).jobs]
    assert {m["kind"] for m in jobs} == {"MPIJob", "HyperPodPyTorchJob", "Job"}
    assert [p for m in jobs for p in pod_template_problems(m)] == []
    assert [p for m in plain for p in pod_template_problems(m, topology_aware=False)] == []
    # the test of the test: the fio pods as they were, and a launcher without its label
    fio = copy.deepcopy(next(m for m in jobs if m["kind"] == "Job"))
    assert fio["spec"]["template"]["metadata"]["annotations"] == {"kueue.x-k8s.io/podset-unconstrained-topology": "true"}
    no_request = copy.deepcopy(fio)
    del no_request["spec"]["template"]["metadata"]["annotations"]
    assert pod_template_problems(no_request) == ["Job pod: no explicit topology request where the flavor is topology-aware"]
    assert pod_template_problems(fio, topology_aware=False) == ["Job pod: a topology request where the flavor is plain"]
    fio["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 1}}
    assert pod_template_problems(fio) == ["Job pod: one pod per node by anti-affinity, but 1 of the node's 8 GPUs"]
    del fio["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert pod_template_problems(fio) == [
        "Job pod: one pod per node by anti-affinity, but 0 of the node's 8 GPUs",
        "Job pod: requests no GPU and is in no pod set group",
    ]
    mpi = copy.deepcopy(next(m for m in jobs if m["kind"] == "MPIJob"))
    del mpi["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"]["labels"]
    assert pod_template_problems(mpi) == ["MPIJob Launcher: no kueue.x-k8s.io/queue-name label on the pod template"]
    del mpi["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"]["annotations"]
    assert pod_template_problems(mpi)[1:] == [
        "MPIJob Launcher: no explicit topology request where the flavor is topology-aware",
        "MPIJob Launcher: requests no GPU and is in no pod set group",
    ]


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
    # Kueue's queue label, literally (docs/facts/jobs.md#kueue-local-queue), on every job and on the
    # HyperPodPyTorchJob's pod template, as AWS's job template puts it (docs/facts/jobs.md#hyperpod-pytorch-job-shape)
    assert QUEUE_LABEL == "kueue.x-k8s.io/queue-name"
    for m in (mpi, hp, job):
        assert m["metadata"]["namespace"] == queue.namespace == "hyperpod-ns-training"
        assert m["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == queue.local_queue == "hyperpod-ns-training-localqueue"
    assert hp["spec"]["replicaSpecs"][0]["template"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == queue.local_queue
    assert hp["spec"]["nprocPerNode"] == "8" and hp["spec"]["replicaSpecs"][0]["replicas"] == 2
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == job["spec"]["parallelism"] == 2
    assert {"name": "fsx", "persistentVolumeClaim": {"claimName": "fminfra-fsx"}} in job["spec"]["template"]["spec"]["volumes"]
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


def test_dry_run_without_a_threshold_reports_it_missing_and_exits_0(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path)
    data = yaml.safe_load(pipeline.read_text())
    for env in data["environments"]:
        # no pipeline.yaml threshold for staging's p5en (its runner labels stay: load_pipeline requires them)
        env["accept"] = {k: v for k, v in env.get("accept", {}).items() if k == "runs_on"}
    pipeline.write_text(yaml.safe_dump(data, sort_keys=False))
    assert cli_main(["accept", "staging", "--dry-run", "--run-id", "r1", "--pipeline", str(pipeline)]) == 0
    out = capsys.readouterr()
    assert (
        "MISSING, no threshold; set accept.nccl_fail_gbps for staging in pipeline.yaml (none: instance_types.tsv has no measured"
        " threshold for p5en.48xlarge)" in out.out
    )
    assert "accept staging --dry-run: missing: nccl workers: no threshold" in out.err


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
            env["accept"] = {**env["accept"], "nccl_fail_gbps": 250, "nccl_warn_gbps": 300}
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
    ddp = provider + ddp_result_line(41.5, 1.2, 0.2) + "\n"  # NCCL_DEBUG=INFO lines, then rank 0's result
    return {"nccl": launcher + "fminfra-accept end\n", "ddp": ddp, "ddp-other": provider, **fsx}


def _layers(*values: str) -> dict[str, str]:
    """A HyperPod EKS node's labels: its instance type and network-node-layer-1..3 (docs/facts/hyperpod.md#hyperpod-topology-labels)."""
    labels = {f"topology.k8s.aws/network-node-layer-{n}": v for n, v in enumerate(values, 1)}
    return {"node.kubernetes.io/instance-type": "ml.p5en.48xlarge", **labels}


def _flavor(name: str, instance_type: str, topology: str | None = None) -> dict[str, Any]:
    """A Kueue v0.19.2 ResourceFlavor (kueue.x-k8s.io/v1beta2): nodeLabels on the type, topologyName when topology-aware."""
    spec: dict[str, Any] = {"nodeLabels": {"node.kubernetes.io/instance-type": instance_type}}
    if topology:
        spec["topologyName"] = topology
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


TAS_FLAVOR = _flavor("ml.p5en.48xlarge", "ml.p5en.48xlarge", "hyperpod-default")
PLAIN_FLAVOR = _flavor("ml.p5en.48xlarge", "ml.p5en.48xlarge")


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake kubectl on PATH, an EKS client whose DescribeCluster answers with the cluster above."""
    put_on_path(tmp_path, monkeypatch)
    state = tmp_path / "state.json"
    queue = team_queue("hyperpod-eks")
    existing = [f"namespace/{queue.namespace}", f"localqueue.kueue.x-k8s.io/{queue.local_queue}"]
    logs = _logs("nccl-all-reduce-2x-p5-mpijob.txt")
    state.write_text(
        json.dumps(
            {
                "endpoint": CLUSTER["endpoint"],
                "cluster": CLUSTER["name"],
                "scenario": {},
                "logs": logs,
                "existing": existing,
                "flavors": [TAS_FLAVOR],
                "nodes": {"hyperpod-i-0": _layers("nn-a", "nn-b", "nn-c"), "hyperpod-i-1": _layers("nn-a", "nn-b", "nn-c")},
            }
        )
    )
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
    # the MPIJob and the Job went through the team's LocalQueue: suspended, then admitted by Kueue
    assert json.loads(cluster.read_text())["admitted"] == ["accept-e2e-nccl-workers", "accept-e2e-fsx-workers"]


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
    # the state is the last True condition (one poll before the deadline: Created)
    assert checks["nccl workers"]["status"] == "FAIL" and "did not finish in time (last state Created)" in checks["nccl workers"]["detail"]
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


def test_a_resumed_job_that_never_runs_is_pending(cluster: Path, tmp_path: Path) -> None:
    """A batch Job admitted by Kueue and never running carries only `Suspended` False: no True condition,
    so Pending (not Suspended) when the time runs out."""
    state = json.loads(cluster.read_text())
    state["scenario"] = {"fsx": "hang"}
    cluster.write_text(json.dumps(state))
    plan = eks_plan(load_config(STAGING), "e2e")
    job = next(j for j in plan.jobs if j.kind == "fsx")
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump(accept_eks.kubeconfig(CLUSTER, "us-west-2")))
    kubectl = accept_eks.Kubectl(config)
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump(job.manifest))
    ticks = iter(range(100))
    assert accept_eks.wait_for(kubectl, plan.namespace, job, 5, 0, clock=lambda: next(ticks)) == "Pending"
    assert json.loads(cluster.read_text())["admitted"] == [job.name]


def test_job_state_reads_true_conditions_only() -> None:
    """The conditions the controllers really write (tests/fakes/kubectl_fake.py): False ones never make the state."""
    cases = [
        ("jobs.batch", [("Suspended", "False"), ("SuccessCriteriaMet", "True")], "SuccessCriteriaMet"),
        ("jobs.batch", [("Suspended", "False"), ("SuccessCriteriaMet", "True"), ("Complete", "True")], "Complete"),
        ("jobs.batch", [("Suspended", "False"), ("FailureTarget", "True"), ("Failed", "True")], "Failed"),
        ("jobs.batch", [("Suspended", "True")], "Suspended"),
        ("jobs.batch", [("Suspended", "False")], "Pending"),
        ("mpijobs.kubeflow.org", [("Created", "True"), ("Running", "False"), ("Suspended", "False")], "Created"),
        ("mpijobs.kubeflow.org", [("Created", "True"), ("Suspended", "False"), ("Running", "False"), ("Succeeded", "True")], "Succeeded"),
    ]
    for resource, conds, want in cases:
        obj = {"status": {"conditions": [{"type": t, "status": st} for t, st in conds]}}
        assert accept_eks.job_state(resource, obj) == want, (resource, conds)
    assert not accept_eks.done("jobs.batch", "SuccessCriteriaMet")  # the pods are still being cleaned up


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


def test_cluster_without_kueue_is_one_line(cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without Kueue's CRDs (no task governance) kubectl cannot even name a LocalQueue: one line, exit 2, nothing applied."""
    state = json.loads(cluster.read_text())
    state["no_kueue"] = True
    cluster.write_text(json.dumps(state))
    assert _accept(tmp_path) == 2
    err = capsys.readouterr().err
    assert "accept: fminfra-staging-eks has no Kueue" in err and "amazon-sagemaker-hyperpod-taskgovernance" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
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


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (
            "v1.36.0",
            "accept: kubectl v1.36.0 on PATH; 1.33-1.35 for the 1.34 cluster (one minor version either side): install kubectl 1.34.x",
        ),
        ("v1.32.9", "accept: kubectl v1.32.9 on PATH; 1.33-1.35 for the 1.34 cluster"),
        ("garbage", "accept: `kubectl version --client -o json` gave no client version (exit 0): install kubectl 1.33-1.35"),
    ],
)
def test_kubectl_outside_the_skew_is_one_line(
    cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str, message: str
) -> None:
    """A GitHub-hosted runner's kubectl is the newest stable (docs/facts/pipeline.md#github-runner-kubectl-latest):
    outside one minor of the 1.34 cluster, accept stops before touching the cluster."""
    state = json.loads(cluster.read_text())
    cluster.write_text(json.dumps({**state, "kubectl_version": version if version != "garbage" else "v1"}))
    if version == "garbage":
        (tmp_path / "bin" / "kubectl").write_text("#!/bin/sh\necho not-json\n")
    assert _accept(tmp_path) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "calls" not in json.loads(cluster.read_text())  # nothing was applied


@pytest.mark.parametrize("version", ["v1.33.0", "v1.35.2", "v1.34.5"])
def test_kubectl_within_the_skew_passes_the_check(cluster: Path, version: str) -> None:
    cluster.write_text(json.dumps({**json.loads(cluster.read_text()), "kubectl_version": version}))
    assert accept_eks.check_kubectl_version(load_config(ROOT / "config" / "staging.yaml")) == version


def test_without_kubectl_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert _accept(tmp_path) == 2
    assert "kubectl not found on PATH" in capsys.readouterr().err


def test_the_fake_kubectl_refuses_a_kubeconfig_without_an_eks_token(cluster: Path, tmp_path: Path) -> None:
    """The test of the fake: only the kubeconfig `aws eks update-kubeconfig` would write gets through."""
    import subprocess

    good = accept_eks.kubeconfig(CLUSTER, "us-west-2")
    static, alpha, arn = copy.deepcopy(good), copy.deepcopy(good), copy.deepcopy(good)
    static["users"][0]["user"] = {"token": "static"}
    alpha["users"][0]["user"]["exec"]["apiVersion"] = "client.authentication.k8s.io/v1alpha1"
    args = arn["users"][0]["user"]["exec"]["args"]
    args[args.index("--cluster-name") + 1] = CLUSTER["arn"]
    assert good["users"][0]["user"]["exec"]["apiVersion"] == "client.authentication.k8s.io/v1beta1"
    for config, code in ((good, 0), (static, 1), (alpha, 1), (arn, 1)):
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(config))
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(path), "get", "namespace", "hyperpod-ns-training", "-o", "name"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == code, result.stderr


# --- the DDP job runs NCCL over EFA (review point 1) ------------------------------------------------

# The training operator's supported PyTorch versions, as AWS's page lists them
# (docs/facts/jobs.md#hyperpod-elastic-agent): what the pod installs must be inside.
OPERATOR_TORCH = ("2.4.0", "2.7.1")


def _ddp_container() -> dict[str, Any]:
    return _job("HyperPodPyTorchJob")["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]


def _pip_pins(script: str) -> dict[str, str]:
    """NAME -> VERSION of every NAME==VERSION on the script's `pip install` line."""
    [line] = [ln for ln in script.splitlines() if ln.startswith("pip install")]
    return dict(w.split("==", 1) for w in line.split() if "==" in w)


def _torch_in_operator_range(script: str) -> bool:
    from packaging.version import Version

    pins = _pip_pins(script)
    return "torch" in pins and Version(OPERATOR_TORCH[0]) <= Version(pins["torch"]) <= Version(OPERATOR_TORCH[1])


def test_ddp_runs_in_the_efa_image_with_nccl_debug() -> None:
    """The DDP pod runs where EFA's libfabric and aws-ofi-nccl are (the pinned nccl-tests image, not the NGC
    image), installs torch inside the operator's range with the elastic agent in one pip run, and logs NCCL_DEBUG=INFO."""
    from fminfra.ops.accept.manifests import NCCL_TESTS_IMAGE, NCCL_TESTS_IMAGE_DIGEST

    container = _ddp_container()
    assert container["image"] == f"{NCCL_TESTS_IMAGE}@{NCCL_TESTS_IMAGE_DIGEST}"
    assert container["image"].startswith("public.ecr.aws/hpc-cloud/nccl-tests:") and "-efa" in container["image"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["NCCL_DEBUG"] == "INFO" and env["FI_PROVIDER"] == "efa"
    script = container["command"][2]
    assert set(_pip_pins(script)) == {"torch", "hyperpod-elastic-agent"}  # one resolver run: the agent cannot move torch
    assert _torch_in_operator_range(script)
    # the test of the test: a torch outside 2.4.0-2.7.1, or none pinned, is caught
    assert not _torch_in_operator_range(script.replace("torch==2.7.1", "torch==2.8.0"))
    assert not _torch_in_operator_range(script.replace("torch==2.7.1", "torch"))


@pytest.mark.parametrize(
    ("ddp_log", "detail"),
    [
        ("", "no 'NET/OFI Selected provider' line"),
        ("nid: NCCL INFO NET/OFI Selected provider is tcp, fabric is tcp (found 1 nics)\n", "provider tcp"),
    ],
)
def test_end_to_end_ddp_without_efa_fails(cluster: Path, tmp_path: Path, ddp_log: str, detail: str) -> None:
    """On an EFA type (p5en) a DDP run whose NCCL did not select EFA fails, though its loss fell."""
    state = json.loads(cluster.read_text())
    state["logs"]["ddp"] = ddp_log + ddp_result_line(41.5, 1.2, 0.2) + "\n"
    state["logs"]["ddp-other"] = ""
    cluster.write_text(json.dumps(state))
    assert _accept(tmp_path) == 1
    check = next(c for c in _report(tmp_path)["checks"] if c["name"] == "ddp workers")
    assert check["status"] == "FAIL" and "NCCL did not use EFA" in check["detail"] and detail in check["detail"]


def test_ddp_efa_check_only_on_efa_types(tmp_path: Path) -> None:
    passing = accept_eks.accept.Check("ddp g", "PASS", "41.5 ms/step", "16 ranks")
    (tmp_path / "ddp.log").write_text("no NCCL lines\n")
    assert accept_eks.ddp_efa_check(passing, tmp_path, efa=False) == passing
    assert accept_eks.ddp_efa_check(passing, tmp_path, efa=True).status == "FAIL"
    (tmp_path / "ddp.log").write_text((DATA / "nccl-debug-efa-ec2-guide.txt").read_text())
    assert accept_eks.ddp_efa_check(passing, tmp_path, efa=True) == passing


# --- MPIJob names leave room for the operator's suffixes (review point 2) ---------------------------


def _long_group_config(tmp_path: Path, *groups: str) -> Path:
    text = STAGING.read_text()
    block = text.split("  instance_groups:\n", 1)[1].split("  eks:", 1)[0]
    new = "".join(block.replace("name: workers", f"name: {g}") for g in groups)
    config = tmp_path / "long.yaml"
    config.write_text(text.replace(block, new))
    return config


def test_long_group_names_fit_the_mpi_operator_names(tmp_path: Path) -> None:
    """mpi-operator 0.5.0 creates the Job `<name>-launcher` and worker hostnames `<name>-worker-<i>`
    (docs/facts/jobs.md#mpijob-name-length): both must be DNS labels of at most 63 characters."""
    a, b = "w" * 55 + "-alpha", "w" * 55 + "-bravo"  # 61 characters each, the same first 55
    cfg = load_config(_long_group_config(tmp_path, a, b))
    for run_id in ("r1", "staging-20261130t144700z"):
        plan = eks_plan(cfg, run_id)
        mpi = [j for j in plan.jobs if j.kind == "nccl"]
        assert len(mpi) == 2
        for job in mpi:
            workers = job.manifest["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
            for derived in [f"{job.name}-launcher", *(f"{job.name}-worker-{i}" for i in range(workers))]:
                assert len(derived) <= 63 and NAME_RULE.match(derived), derived
        assert len({j.name for j in plan.jobs}) == len(plan.jobs)  # two long groups, two names
        for manifest in plan.manifests:
            assert validate(manifest) == [], manifest["metadata"]["name"]
    # a short group keeps its plain name
    assert eks_plan(load_config(STAGING), "r1").jobs[0].name == "accept-r1-nccl-workers"


# --- /fsx reaches the pod through the FSx CSI driver's claim, never a hostPath ----------------------


def test_fsx_reaches_the_pod_through_the_claim() -> None:
    """The fio job mounts the claim fminfra-fsx of its namespace (fminfra/eks/constructs/fsx_volume.py):
    the driver mounts the file system itself, so no node mount (nor its propagation) is involved."""
    pod = _job("Job")["spec"]["template"]["spec"]
    assert not [v for v in pod["volumes"] if "hostPath" in v]
    [volume] = [v for v in pod["volumes"] if v["name"] == "fsx"]
    assert volume["persistentVolumeClaim"]["claimName"] == "fminfra-fsx"
    [mount] = [m for c in pod["containers"] for m in c["volumeMounts"] if m["name"] == "fsx"]
    assert mount["mountPath"] == "/fsx"
    assert validate(_job("Job")) == []


# --- what the docs say the kubectl layer ships (review point 5) -------------------------------------


def test_docs_name_the_kubectl_the_layer_ships() -> None:
    """The kubectl version stated in accept_eks and docs/first-job.md is the one the installed
    aws-cdk.lambda-layer-kubectl-v34 package describes its layer with (docs/facts/eks.md#eks-kubectl-layer-v34)."""
    import re
    import tarfile

    import aws_cdk.lambda_layer_kubectl_v34 as layer

    [tgz] = (Path(layer.__file__).parent / "_jsii").glob("*.jsii.tgz")
    with tarfile.open(tgz) as tar:
        js = tar.extractfile("package/lib/kubectl-layer.js").read().decode()  # type: ignore[union-attr]
    [shipped] = set(re.findall(r"kubectl (1\.34\.\d+)", js))
    for text in (accept_eks.__doc__ or "", (ROOT / "docs" / "first-job.md").read_text()):
        stated = re.findall(r"ships\s+(1\.34\.\d+)", text)
        assert stated and set(stated) == {shipped}, (stated, shipped)


@pytest.mark.parametrize(("public", "hint"), [(False, "the endpoint is private"), (True, "check the network path")])
def test_an_endpoint_that_does_not_answer_is_one_line(
    cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, public: bool, hint: str
) -> None:
    state = json.loads(cluster.read_text())
    cluster.write_text(json.dumps({**state, "unreachable": True}))
    vpc = {**CLUSTER["resourcesVpcConfig"], "endpointPublicAccess": public}
    _stub(monkeypatch, {"cluster": {**CLUSTER, "resourcesVpcConfig": vpc}})
    assert _accept(tmp_path) == 2
    err = capsys.readouterr().err
    assert "accept: the cluster's API endpoint did not answer (Unable to connect to the server: dial tcp" in err
    assert hint in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


# --- placement: the tightest domain asked for, where the pods landed reported ----------------------

PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"


def test_training_pods_ask_for_the_finest_hyperpod_level() -> None:
    """The NCCL workers and the DDP pods prefer one layer-3 domain (p5en: 3 layers, all of them
    task governance's); the launcher (no GPUs) asks for it only as the workers' pod set group
    (test_the_mpijob_launcher_and_workers_are_one_kueue_group); the fio pods ask for no locality (unconstrained); the instance-type
    nodeSelector stays beside the annotation (docs/facts/jobs.md#kueue-tas-preferred-node-selector)."""
    mpi, hp, job = _job("MPIJob"), _job("HyperPodPyTorchJob"), _job("Job")
    worker = mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    pod = hp["spec"]["replicaSpecs"][0]["template"]
    for template in (worker, pod):
        assert template["metadata"]["annotations"][PREFERRED] == "topology.k8s.aws/network-node-layer-3"
        assert template["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": "ml.p5en.48xlarge"}
        assert not any(k.startswith("topology.k8s.aws/") for k in template["spec"]["nodeSelector"])  # not both: HyperPod's rule
    assert job["spec"]["template"]["metadata"]["annotations"] == {"kueue.x-k8s.io/podset-unconstrained-topology": "true"}


def test_topology_annotation_per_type() -> None:
    """p6-b200 has 4 layers, task governance schedules in 1-3: layer-3; g5 and g6 have none: no annotation.
    The test of the test: a level outside task governance's would be caught by the same comparison."""
    from fminfra.ops.accept.manifests import topology_annotations
    from fminfra.topology.rules import job_topology_levels

    assert topology_annotations("p6-b200.48xlarge", "us-west-2") == {PREFERRED: "topology.k8s.aws/network-node-layer-3"}
    assert job_topology_levels("p6-b200.48xlarge", hyperpod=False)[-1] == "topology.k8s.aws/network-node-layer-4"
    assert topology_annotations("g5.48xlarge", "us-west-2") == topology_annotations("ml.g6.48xlarge", "us-west-2") == {}
    assert topology_annotations("p5.48xlarge", "us-west-2") != {PREFERRED: "topology.k8s.aws/network-node-layer-4"}


def test_end_to_end_reports_one_domain(cluster: Path, tmp_path: Path) -> None:
    assert _accept(tmp_path) == 0
    report = _report(tmp_path)
    checks = {c["name"]: c for c in report["checks"]}
    assert (checks["placement nccl workers"]["status"], checks["placement nccl workers"]["figure"]) == ("PASS", "1 1 1 domains")
    assert checks["placement nccl workers"]["detail"].endswith(
        "asked: kueue.x-k8s.io/podset-preferred-topology: topology.k8s.aws/network-node-layer-3"
    )
    assert checks["placement ddp workers"]["status"] == "PASS"
    assert checks["nccl all_reduce workers"]["detail"].endswith("; inside one layer-3 domain")
    assert report["nccl_busbw_by_placement"] == {
        "workers": {
            "placement": "inside one layer-3 domain",
            "spans": {f"topology.k8s.aws/network-node-layer-{n}": 1 for n in (1, 2, 3)},
            "all_reduce_busbw_gbps": 313.29,
        }
    }
    nodes = report["placement"]["accept-e2e-nccl-workers"]["nodes"]
    assert sorted(nodes) == ["hyperpod-i-0", "hyperpod-i-1"] and nodes["hyperpod-i-1"]["topology.k8s.aws/network-node-layer-3"] == "nn-c"


def test_end_to_end_reports_a_spread_placement(cluster: Path, tmp_path: Path) -> None:
    """The test of the placement check: the two nodes under different layer-3 nodes, one layer-2."""
    state = json.loads(cluster.read_text())
    state["nodes"]["hyperpod-i-1"] = _layers("nn-a", "nn-b", "nn-d")
    cluster.write_text(json.dumps(state))
    assert _accept(tmp_path) == 0  # warnings do not fail the gate
    report = _report(tmp_path)
    checks = {c["name"]: c for c in report["checks"]}
    assert (checks["placement nccl workers"]["status"], checks["placement nccl workers"]["figure"]) == ("WARN", "1 1 2 domains")
    assert "across 2 layer-3 domains, inside one layer-2 domain" in checks["placement nccl workers"]["detail"]
    assert report["nccl_busbw_by_placement"]["workers"]["placement"] == "across 2 layer-3 domains, inside one layer-2 domain"


def test_nodes_the_caller_may_not_read_are_a_warning(cluster: Path, tmp_path: Path) -> None:
    """Nodes are cluster-scoped: a caller whose Role is namespaced gets Forbidden; the run goes on, placement unknown."""
    state = json.loads(cluster.read_text())
    state["forbid_nodes"] = True
    cluster.write_text(json.dumps(state))
    assert _accept(tmp_path) == 0
    checks = {c["name"]: c for c in _report(tmp_path)["checks"]}
    assert checks["placement nccl workers"]["status"] == "WARN"
    assert 'cannot get resource "nodes" in API group "" at the cluster scope' in checks["placement nccl workers"]["detail"]
    assert checks["nccl all_reduce workers"]["status"] == "PASS"


# --- Kueue's MPIJob webhook: the launcher and the workers as one pod set group ----------------------

GROUP = "kueue.x-k8s.io/podset-group-name"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"


def kueue_mpijob_problems(mpijob: dict[str, Any]) -> list[str]:
    """Kueue v0.19.2's validation of an MPIJob's pod set groups (pkg/controller/jobframework/tas_validation.go:
    ValidateTASPodSetRequest and ValidatePodSetGroupingTopology, called by mpijob_webhook.go; facts
    docs/facts/jobs.md#kueue-podset-group): a group name is not a number and comes with a required or preferred
    topology; a group holds exactly 2 pod sets, one of them of 1 pod; both ask for the same topology the same
    way. And what makes the grouping needed (tas_flavorassigner.go, flavorassigner.go): in a ClusterQueue of
    topology-aware flavors only, a pod set that requests nothing gets a TAS flavor only through its group."""
    problems: list[str] = []
    groups: dict[str, list[tuple[str, int, tuple[str | None, str | None]]]] = {}
    for role, replica in mpijob["spec"]["mpiReplicaSpecs"].items():
        notes = (replica["template"].get("metadata") or {}).get("annotations") or {}
        topology = (notes.get(REQUIRED), notes.get(PREFERRED))
        if GROUP in notes:
            if notes[GROUP].isdigit():
                problems.append(f"{role}: {GROUP} must not be a number")
            if topology == (None, None):
                problems.append(f"{role}: {GROUP} may not be set without a required or preferred topology")
            groups.setdefault(notes[GROUP], []).append((role, int(replica.get("replicas", 1)), topology))
        requests = any(c.get("resources", {}).get("requests") for c in replica["template"]["spec"]["containers"])
        if (
            not requests
            and GROUP not in notes
            and any(
                PREFERRED in ((r["template"].get("metadata") or {}).get("annotations") or {})
                for r in mpijob["spec"]["mpiReplicaSpecs"].values()
            )
        ):
            problems.append(f"{role}: requests nothing and is in no group: no TAS flavor where every flavor is topology-aware")
    for name, members in groups.items():
        if len(members) != 2:
            problems.append(f"group {name}: can only define groups of exactly 2 pod sets, got {len(members)}")
            continue
        (_, count1, topo1), (_, count2, topo2) = members
        if count1 != 1 and count2 != 1:
            problems.append(f"group {name}: one pod set must have only 1 replica, got {count1} and {count2}")
        if topo1 != topo2:
            problems.append(f"group {name}: the pod sets must specify the same required or preferred topology")
    return problems


def test_the_mpijob_launcher_and_workers_are_one_kueue_group() -> None:
    mpi = _job("MPIJob")
    specs = mpi["spec"]["mpiReplicaSpecs"]
    want = {PREFERRED: "topology.k8s.aws/network-node-layer-3", GROUP: mpi["metadata"]["name"]}
    assert specs["Launcher"]["template"]["metadata"]["annotations"] == want == specs["Worker"]["template"]["metadata"]["annotations"]
    assert kueue_mpijob_problems(mpi) == []
    assert validate(mpi) == []


@pytest.mark.parametrize(
    ("breaks", "expect"),
    [
        (lambda s: s["Launcher"]["template"]["metadata"]["annotations"].update({GROUP: "other"}), "exactly 2 pod sets, got 1"),
        (lambda s: s["Launcher"]["template"]["metadata"]["annotations"].pop(GROUP), "Launcher: requests nothing and is in no group"),
        (lambda s: s["Launcher"]["template"]["metadata"]["annotations"].update({PREFERRED: "x/y"}), "the same required or preferred"),
        (
            lambda s: s["Launcher"]["template"]["metadata"]["annotations"].update(
                {REQUIRED: s["Launcher"]["template"]["metadata"]["annotations"].pop(PREFERRED)}
            ),
            "the same required or preferred",
        ),
        (lambda s: s["Launcher"].update(replicas=2), "one pod set must have only 1 replica"),
        (lambda s: [s[r]["template"]["metadata"]["annotations"].update({GROUP: "7"}) for r in s], "must not be a number"),
    ],
)
def test_a_broken_mpijob_group_fails_kueues_rules(breaks: Any, expect: str) -> None:
    """The test of the test: each rule of Kueue's webhook is caught on a deliberately broken group."""
    mpi = _job("MPIJob")
    breaks(mpi["spec"]["mpiReplicaSpecs"])
    problems = kueue_mpijob_problems(mpi)
    assert any(expect in p for p in problems), problems


def test_the_ddp_job_carries_the_annotation_on_its_metadata_as_the_hyperpod_cli_writes_it() -> None:
    """One pod set (no group needed: it requests the GPUs); the HyperPod CLI puts the topology annotation on the
    job's metadata and on the pod template (docs/facts/jobs.md#hyperpod-cli-topology-annotation)."""
    hp = _job("HyperPodPyTorchJob")
    want = {PREFERRED: "topology.k8s.aws/network-node-layer-3"}
    assert hp["metadata"]["annotations"] == want == hp["spec"]["replicaSpecs"][0]["template"]["metadata"]["annotations"]
    assert len(hp["spec"]["replicaSpecs"]) == 1 and validate(hp) == []


# --- a region where EC2 describes no instance topology ---------------------------------------------


def test_a_region_without_ec2_topology_asks_kueue_for_no_level() -> None:
    """Nodes there get no network-node-layer labels (docs/facts/instances.md#ec2-topology-regions): no topology
    annotation, no group; the placement row says why instead of "unknown"."""
    from fminfra.ops.accept.node.placement import placement_check

    cfg = load_config(STAGING).model_copy(update={"region": "eu-south-1"})
    plan = eks_plan(cfg, "r1")
    for job in plan.jobs:
        text = json.dumps(job.manifest)
        assert PREFERRED not in text and GROUP not in text, job.kind
        assert accept_eks.placement_levels(job) == ()
        assert accept_eks.no_placement(job, ["a"]).label() == "no EC2 topology in eu-south-1"
    nccl = next(j for j in plan.jobs if j.kind == "nccl")
    assert accept_eks.asked_for(nccl) == "nothing (no EC2 topology in eu-south-1)"
    row = placement_check("nccl", "workers", accept_eks.no_placement(nccl, ["a", "b"]), accept_eks.asked_for(nccl))
    assert (row.status, row.detail) == ("PASS", "no EC2 topology in eu-south-1; asked: nothing (no EC2 topology in eu-south-1)")


# --- kubectl get nodes with one name prints the Node itself -----------------------------------------


def test_a_one_node_group_reads_its_node(cluster: Path, tmp_path: Path) -> None:
    """`kubectl get nodes NAME -o json` prints one Node, not a List (docs/facts/jobs.md#kubectl-get-single-object):
    a one-node group's DDP placement is read from it; two names still give a List."""
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump(accept_eks.kubeconfig(CLUSTER, "us-west-2")))
    kubectl = accept_eks.Kubectl(config)
    assert kubectl.json("get", "nodes", "hyperpod-i-0")["kind"] == "Node"  # the fake prints what kubectl prints
    assert kubectl.json("get", "nodes", "hyperpod-i-0", "hyperpod-i-1")["kind"] == "List"
    one = tmp_path / "one.yaml"
    one.write_text(STAGING.read_text().replace("count: 2", "count: 1"))
    ddp = next(j for j in eks_plan(load_config(one), "e2e").jobs if j.kind == "ddp")
    assert ddp.nodes == 1
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump(ddp.manifest))
    placement = accept_eks.read_placement(kubectl, "hyperpod-ns-training", ddp)
    assert placement is not None and placement.missing() == [], placement
    assert placement.nodes["hyperpod-i-0"]["topology.k8s.aws/network-node-layer-3"] == "nn-c"


# --- the cluster's Kueue flavors decide whether the jobs ask for a topology ---------------------------


def test_the_fake_flavors_match_kueues_resourceflavor_schema() -> None:
    """The fake's flavors against the ResourceFlavor schema of Kueue v0.19.2's CRD (tests/data/kueue); the test of the test:
    a topologyName that is not a string fails it."""
    import jsonschema

    schema = json.loads((ROOT / "tests" / "data" / "kueue" / "crd-schemas-v0.19.2.json").read_text())["ResourceFlavor"]
    for flavor in (TAS_FLAVOR, PLAIN_FLAVOR):
        assert list(jsonschema.Draft7Validator(schema).iter_errors(flavor)) == []
    broken = copy.deepcopy(TAS_FLAVOR)
    broken["spec"]["topologyName"] = 7
    assert list(jsonschema.Draft7Validator(schema).iter_errors(broken)) != []


def _run_with(
    cluster: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **state_update: Any
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run accept against the fake with the state changed; return the manifests it applied and the checks by name."""
    state = json.loads(cluster.read_text())
    state.update(state_update)
    cluster.write_text(json.dumps(state))
    applied: list[dict[str, Any]] = []
    real = accept_eks.Kubectl.__call__

    def spy(self: Any, *args: str, stdin: str | None = None) -> str:
        if args[:3] == ("apply", "-f", "-") and stdin:
            applied.extend(yaml.safe_load_all(stdin))
        return real(self, *args, stdin=stdin)

    monkeypatch.setattr(accept_eks.Kubectl, "__call__", spy)
    assert _accept(tmp_path) == 0
    return applied, {c["name"]: c for c in _report(tmp_path)["checks"]}


def _topology_notes(applied: list[dict[str, Any]]) -> dict[str, list[dict[str, str]]]:
    """Every annotations block of the applied MPIJob and HyperPodPyTorchJob: job metadata and pod templates."""
    out: dict[str, list[dict[str, str]]] = {}
    for obj in applied:
        if obj["kind"] == "MPIJob":
            out["MPIJob"] = [
                (r["template"].get("metadata") or {}).get("annotations") or {} for r in obj["spec"]["mpiReplicaSpecs"].values()
            ]
        elif obj["kind"] == "HyperPodPyTorchJob":
            templates = [(r["template"].get("metadata") or {}).get("annotations") or {} for r in obj["spec"]["replicaSpecs"]]
            out["HyperPodPyTorchJob"] = [obj["metadata"].get("annotations") or {}, *templates]
    return out


def test_a_plain_flavor_gets_no_topology_request(cluster: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kueue refuses an annotated pod set on a flavor that names no Topology (docs/facts/eks.md#kueue-tas-cluster-queue-mixing):
    the applied MPIJob and HyperPodPyTorchJob carry no topology annotation and no group; the placement is still read."""
    applied, checks = _run_with(cluster, tmp_path, monkeypatch, flavors=[PLAIN_FLAVOR])
    notes = _topology_notes(applied)
    assert set(notes) == {"MPIJob", "HyperPodPyTorchJob"}
    for kind, blocks in notes.items():
        for block in blocks:
            assert PREFERRED not in block and GROUP not in block and REQUIRED not in block, (kind, block)
    mpi = next(o for o in applied if o["kind"] == "MPIJob")
    assert kueue_mpijob_problems(mpi) == [] and validate(mpi) == []
    row = checks["placement nccl workers"]
    assert row["status"] == "PASS" and row["figure"] == "1 1 1 domains"  # where the pods landed, still read
    assert row["detail"].endswith("asked: nothing (the cluster's Kueue flavor for ml.p5en.48xlarge names no Topology)")
    assert "names no Topology" in checks["placement ddp workers"]["detail"]


def test_a_topology_aware_flavor_gets_the_request(cluster: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The flavor names a Topology: the jobs ask as the dry run shows (launcher and workers in one group)."""
    applied, checks = _run_with(cluster, tmp_path, monkeypatch, flavors=[PLAIN_FLAVOR | {"metadata": {"name": "other"}}, TAS_FLAVOR])
    notes = _topology_notes(applied)
    want = {PREFERRED: "topology.k8s.aws/network-node-layer-3"}
    mpi = next(o for o in applied if o["kind"] == "MPIJob")
    assert notes["MPIJob"] == [want | {GROUP: mpi["metadata"]["name"]}] * 2
    assert notes["HyperPodPyTorchJob"] == [want, want]
    assert checks["placement nccl workers"]["detail"].endswith(f"asked: {PREFERRED}: topology.k8s.aws/network-node-layer-3")


def test_a_type_without_a_flavor_gets_no_topology_request(cluster: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test of the matching: a topology-aware flavor of another type does not count."""
    applied, checks = _run_with(cluster, tmp_path, monkeypatch, flavors=[_flavor("p5", "ml.p5.48xlarge", "hyperpod-default")])
    assert all(PREFERRED not in b for blocks in _topology_notes(applied).values() for b in blocks)
    assert "asked: nothing (the cluster has no Kueue flavor for ml.p5en.48xlarge)" in checks["placement nccl workers"]["detail"]


def test_a_refused_flavor_read_asks_for_no_topology(
    cluster: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """RBAC refuses the list: the run goes on, no annotation (the DDP job is admitted either way), and the row says why."""
    applied, checks = _run_with(cluster, tmp_path, monkeypatch, forbid_flavors=True)
    assert all(PREFERRED not in b and GROUP not in b for blocks in _topology_notes(applied).values() for b in blocks)
    detail = checks["placement nccl workers"]["detail"]
    assert "the cluster's Kueue flavors could not be read" in detail
    assert 'cannot list resource "resourceflavors" in API group "kueue.x-k8s.io" at the cluster scope' in detail
    assert "grant list on resourceflavors.kueue.x-k8s.io" in detail
    assert "# p5en.48xlarge: no topology asked: the cluster's Kueue flavors could not be read" in capsys.readouterr().out


def test_the_dry_run_says_the_run_reads_the_flavors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli_main(["accept", "staging", "--dry-run", "--pipeline", str(_pipeline(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "where the cluster's Kueue flavor for the type names a Topology (a run reads the flavors first" in out
    assert f"{PREFERRED}: topology.k8s.aws/network-node-layer-3" in out
