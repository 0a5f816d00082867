"""The environment's FSx for Lustre file system in Kubernetes: a static PersistentVolume of the FSx
CSI driver (`fsx.csi.aws.com`) and its claim `fminfra-fsx`, one pair per namespace whose pods use
it (a volume binds one claim). Static provisioning makes no FSx API calls, so the driver gets no
IAM role (docs/facts/eks.md#fsx-csi-static-provisioning). Every fminfra workload that reads or
writes the file system (the acceptance jobs among them) mounts the claim, never a `hostPath`.

The file system sits in the compute AZ, as every GPU node does; a pod on a node of another AZ
mounts it too and pays cross-AZ data transfer (docs/facts/eks.md#fsx-cross-az-data-transfer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from fminfra.core.errors import ValidationError
from fminfra.eks.rules import DNS_LABEL, FSX_CLAIM_NAME, FSX_CSI_DRIVER

# The driver's mount option in its static example (Lustre's flock: POSIX locks across clients).
MOUNT_OPTIONS = ("flock",)
# The volume's and the claim's size: the driver's static example's, whatever the file system's. Nothing
# enforces it (the node mounts the whole file system), and a static claim can never grow: Kubernetes
# refuses a larger request on a claim without a storage class, so a size that followed the file system
# would fail every deploy after FSx grows (docs/facts/eks.md#k8s-static-claim-not-resizable).
STATIC_VOLUME_SIZE = "1200Gi"


def volume_name(namespace: str) -> str:
    """The PersistentVolume of a namespace's claim (cluster-scoped, so the namespace is in its name)."""
    return f"{FSX_CLAIM_NAME}-{namespace}"


def fsx_volume_objects(*, file_system_id: str, dns_name: str, mount_name: str, namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """Per namespace a PersistentVolume of the file system and the claim bound to it (`claimRef` and
    `volumeName` pin the pair), as the driver's static provisioning example writes them."""
    objects: list[dict[str, Any]] = []
    labels = {"app.kubernetes.io/managed-by": "fminfra"}
    for namespace in namespaces:
        name = volume_name(namespace)
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "capacity": {"storage": STATIC_VOLUME_SIZE},
                    "volumeMode": "Filesystem",
                    "accessModes": ["ReadWriteMany"],
                    "mountOptions": list(MOUNT_OPTIONS),
                    # the file system outlives the claim: deleting a claim never touches the data
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": "",
                    "claimRef": {"namespace": namespace, "name": FSX_CLAIM_NAME},
                    "csi": {
                        "driver": FSX_CSI_DRIVER,
                        "volumeHandle": file_system_id,
                        "volumeAttributes": {"dnsname": dns_name, "mountname": mount_name},
                    },
                },
            }
        )
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": FSX_CLAIM_NAME, "namespace": namespace, "labels": labels},
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": "",
                    "resources": {"requests": {"storage": STATIC_VOLUME_SIZE}},
                    "volumeName": name,
                },
            }
        )
    return objects


@dataclass(frozen=True, kw_only=True)
class FsxStaticVolumeProps:
    """Props of `FsxStaticVolume`.

    cluster: the EKS cluster (with its kubectl provider).
    file_system_id, dns_name, mount_name: of the FSx for Lustre file system.
    namespaces: where pods use it; each gets the claim `fminfra-fsx` (the namespaces must exist).
    """

    cluster: eks.Cluster
    file_system_id: str
    dns_name: str
    mount_name: str
    namespaces: Sequence[str]


class FsxStaticVolume(Construct):
    """Creates the PersistentVolumes and claims of `fsx_volume_objects` in one manifest.
    Attribute: `manifest` (create it after the FSx CSI driver add-on and the namespaces)."""

    def __init__(self, scope: Construct, construct_id: str, props: FsxStaticVolumeProps) -> None:
        super().__init__(scope, construct_id)
        if not props.namespaces:
            raise ValidationError("namespaces must name at least one namespace, got none", path="namespaces")
        for namespace in props.namespaces:
            if problem := DNS_LABEL.problem(namespace):
                raise ValidationError(f"namespaces: {problem}")
        self.manifest = eks.KubernetesManifest(
            self,
            "Manifest",
            cluster=cast(eks.ICluster, props.cluster),
            manifest=fsx_volume_objects(
                file_system_id=props.file_system_id,
                dns_name=props.dns_name,
                mount_name=props.mount_name,
                namespaces=props.namespaces,
            ),
            overwrite=True,
        )
