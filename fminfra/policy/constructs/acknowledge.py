"""Narrow cdk-nag acknowledgments: one finding, on one construct, with its reason."""

from __future__ import annotations

import aws_cdk as cdk
from constructs import IConstruct


def acknowledge(construct: IConstruct, finding: str, reason: str) -> None:
    """Acknowledge one AwsSolutions finding (`IAM5[Action::s3:List*]`) on one construct."""
    cdk.Validations.of(construct).acknowledge(cdk.Acknowledgment(id=f"AwsSolutions::AwsSolutions-{finding}", reason=reason))


def arn_reference(resource: cdk.CfnResource) -> str:
    """How cdk-nag names a resource's ARN in findings: `<LogicalId.Arn>`."""
    stack = cdk.Stack.of(resource)
    return f"<{stack.resolve(resource.logical_id)}.Arn>"


def nag_text(stack: cdk.Stack, value: str) -> str:
    """A string as cdk-nag prints it in a finding: literal parts as they are, each `Ref` as
    `<LogicalId>` (or `<AWS::Partition>`)."""
    resolved = stack.resolve(value)
    if isinstance(resolved, str):
        return resolved
    if isinstance(resolved, dict) and "Fn::Join" in resolved and resolved["Fn::Join"][0] == "":
        parts = resolved["Fn::Join"][1]
        if all(isinstance(p, str) or (isinstance(p, dict) and set(p) == {"Ref"}) for p in parts):
            return "".join(p if isinstance(p, str) else f"<{p['Ref']}>" for p in parts)
    raise ValueError(f"expected literal strings and Refs, got {resolved!r}")


def literal(stack: cdk.Stack, value: str) -> str:
    """A string with its tokens resolved, as cdk-nag prints a fully literal ARN."""
    resolved = stack.resolve(value)
    if not isinstance(resolved, str):
        raise ValueError(f"expected a value that resolves to a literal string, got {resolved!r}")
    return resolved


def drop_redundant_role_dependency(function: IConstruct) -> None:
    """CDK-made Lambda functions (L2 `function`) carry a DependsOn on their role that the role's
    GetAtt already implies (cfn-lint W3005). CDK adds it at the construct level, where it cannot
    be removed, so this tells cfn-lint to skip exactly that check on exactly that resource."""
    cfn = function.node.default_child
    if isinstance(cfn, cdk.CfnResource):
        cfn.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3005"]}})
