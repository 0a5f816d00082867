"""The key-policy statement a customer-managed KMS key needs before CloudWatch Logs can encrypt a
log group with it."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam


def logs_key_statement(stack: cdk.Stack, log_group_name: str) -> iam.PolicyStatement:
    """The key-policy statement that lets CloudWatch Logs use a key for log groups of this account
    and region named `log_group_name` (a pattern; `*` for any): docs/facts/observability.md#cloudwatch-logs-kms-key-policy."""
    return iam.PolicyStatement(
        sid="CloudWatchLogs",
        principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
        actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
        resources=["*"],
        conditions={
            "ArnLike": {
                "kms:EncryptionContext:aws:logs:arn": f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:{log_group_name}"
            }
        },
    )
