"""The `serving` section as `ModelServing`'s specs (`fminfra.serving.constructs.serving`), built into the
Compute stack beside the EKS cluster that runs them (`fminfra.compute.stack.clusters`): the image each
model runs, where its weights are, its node group's nodes and taints, its replica's shape.

Images: the pinned vLLM OpenAI server by digest (docs/facts/vllm.md#vllm-image-pin); for a replica that
spans nodes of an EFA type, fminfra's build of that image with the EFA installer's libfabric and
aws-ofi-nccl (`fminfra/serving/image/`, docs/facts/serving-image.md), a CDK container asset that
`cdk deploy` builds and pushes to the bootstrap's container assets repository
(docs/facts/serving.md#cdk-container-asset-repository).
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import aws_ecr_assets as ecr_assets
from constructs import Construct

from fminfra import catalog
from fminfra.config import EnvironmentConfig
from fminfra.core.versions import load_versions, version
from fminfra.eks.rules import INSTANCE_TYPE_LABEL
from fminfra.serving.constructs.serving import ServedModelSpec
from fminfra.serving.rules import replica_shape

IMAGE_DIR = Path(__file__).resolve().parent / "image"
# The Dockerfile's build arguments, each a key of scripts/node/versions.env (BASE_IMAGE: the pinned vLLM image).
EFA_BUILD_KEYS = (
    "EFA_INSTALLER_VERSION",
    "EFA_INSTALLER_KEY_FINGERPRINT",
    "EFA_INSTALLER_SHA256",
    "AWS_OFI_NCCL_VERSION",
    "AWS_OFI_NCCL_SOURCE_COMMIT",
)
PLATFORMS = {"x86_64": ecr_assets.Platform.LINUX_AMD64, "arm64": ecr_assets.Platform.LINUX_ARM64}


def vllm_image() -> str:
    """The pinned vLLM OpenAI-compatible server image, by digest."""
    return f"{version('SERVING_VLLM_IMAGE')}@{version('SERVING_VLLM_IMAGE_DIGEST')}"


def efa_build_args() -> dict[str, str]:
    """The EFA image's build arguments: the pinned vLLM image and the EFA pins (empty ones included:
    the Dockerfile reads an empty sha256 or source commit as 'not set')."""
    pins = load_versions()
    return {"BASE_IMAGE": vllm_image(), **{key: pins.get(key, "") for key in EFA_BUILD_KEYS}}


def efa_image(scope: Construct, architecture: str) -> str:
    """fminfra's EFA build of the vLLM image for one CPU architecture, as a container asset (its ECR URI)."""
    asset = ecr_assets.DockerImageAsset(
        scope,
        f"ServingEfaImage-{architecture}",
        directory=str(IMAGE_DIR),
        platform=PLATFORMS[architecture],
        build_args=efa_build_args(),
    )
    return asset.image_uri


def serves_from_fsx(cfg: EnvironmentConfig) -> bool:
    return cfg.serving is not None and any(m.weights.source == "fsx" for m in cfg.serving.models)


def serving_models(cfg: EnvironmentConfig, scope: Construct) -> list[ServedModelSpec]:
    """Each model of `cfg.serving` as the cluster runs it (the config is validated: its node group exists
    and its parallelism fits)."""
    assert cfg.serving is not None
    groups = {g.name: g for g in cfg.compute.inference_node_groups}
    efa_images: dict[str, str] = {}
    out = []
    for model in cfg.serving.models:
        group = groups[model.node_group]
        spec = catalog.get(group.instance_type)
        shape = replica_shape(model.tensor_parallel, model.pipeline_parallel, spec.gpus)
        over_efa = shape.multi_node and spec.training and spec.max_efa_interfaces > 0
        if cfg.serving.image is not None:
            image = cfg.serving.image
        elif over_efa:
            if spec.architecture not in efa_images:
                efa_images[spec.architecture] = efa_image(scope, spec.architecture)
            image = efa_images[spec.architecture]
        else:
            image = vllm_image()
        if model.weights.source == "s3":
            assert cfg.storage is not None
            uri, prefix = f"s3://{cfg.storage.bucket_name(cfg)}/{model.weights.path}", model.weights.path
        else:
            uri, prefix = model.weights.path, None
        out.append(
            ServedModelSpec(
                name=model.name,
                served_name=model.api_name,
                image=image,
                model=uri,
                s3_prefix=prefix,
                shape=shape,
                tensor_parallel=model.tensor_parallel,
                pipeline_parallel=model.pipeline_parallel,
                node_selector={INSTANCE_TYPE_LABEL: group.instance_type, **group.labels},
                tolerations=[{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} for t in group.taints],
                efa_interfaces=spec.max_efa_interfaces if over_efa else 0,
                # Karpenter's pools span the private zones; a replica's nodes talk over EFA (or NCCL) and read FSx in
                # the compute AZ (docs/facts/serving.md#efa-single-az). Managed node groups are in it already.
                zone_id=cfg.network.compute_az_id if shape.multi_node and cfg.compute.karpenter else None,
                surge=cfg.serving_surges(model.name),
                max_model_len=model.max_model_len,
                replicas_min=model.replicas.min,
                replicas_max=model.replicas.max,
                requests_per_replica=model.scaling.requests_per_replica,
                polling_interval_seconds=model.scaling.polling_interval_seconds,
            )
        )
    return out
