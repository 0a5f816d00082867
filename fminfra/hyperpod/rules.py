"""Instance types SageMaker HyperPod accepts, from botocore's SageMaker model (no AWS call).

The shape `ClusterInstanceType` of the installed botocore is an enum of every `ml.` type a
HyperPod instance group takes; it moves with the pinned boto3 version.
"""

from __future__ import annotations

from functools import cache

import botocore.session


@cache
def hyperpod_instance_types() -> frozenset[str]:
    """Every `ml.` instance type a HyperPod cluster instance group accepts."""
    model = botocore.session.get_session().get_service_model("sagemaker")
    return frozenset(model.shape_for("ClusterInstanceType").enum)


def is_hyperpod_instance_type(name: str) -> bool:
    return name in hyperpod_instance_types()
