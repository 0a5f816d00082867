"""Every construct-level dependency fminfra declares (`node.add_dependency(x)`) is on a construct that
holds at least one CloudFormation resource: CDK turns a dependency into DependsOn on the resources
under `x`, so a dependency on a construct whose resources live elsewhere (as Kueue's chart and queues
live under the EKS cluster) orders nothing. Serving read r3, A: the FSx claims waited on the `Kueue`
construct, which holds none, and were applied before their namespaces existed."""

from __future__ import annotations

from collections.abc import Iterator

import aws_cdk as cdk
from constructs import Construct, IConstruct

from tests.conftest import Synth


def _holds_resources(construct: IConstruct) -> bool:
    return any(isinstance(c, cdk.CfnElement) for c in construct.node.find_all())


def empty_dependencies(root: IConstruct) -> Iterator[str]:
    """Same-stack dependencies on constructs without resources (a dependency across stacks orders the
    stacks, which CloudFormation deploys one after the other: nothing is lost there)."""
    for construct in root.node.find_all():
        for dependency in construct.node.dependencies:
            if cdk.Stack.of(dependency) is not cdk.Stack.of(construct):
                continue
            if not _holds_resources(dependency):
                yield f"{construct.node.path} depends on {dependency.node.path}, which holds no resource"


def test_no_dependency_is_on_an_empty_construct(synth: Synth) -> None:
    problems = [p for stage in synth.stages.values() for p in empty_dependencies(stage)]
    assert not problems, "\n".join(problems)


def test_the_check_finds_a_dependency_on_an_empty_construct() -> None:
    """The test of the test."""
    stack = cdk.Stack(cdk.App(), "S")
    topic = cdk.CfnResource(stack, "Topic", type="AWS::SNS::Topic")
    topic.node.add_dependency(Construct(stack, "Empty"))
    assert list(empty_dependencies(stack)) == ["S/Topic depends on S/Empty, which holds no resource"]
