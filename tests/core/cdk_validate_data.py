"""The CDK's own template validator's verdict on HyperPod instance types per region, read from the plugin
itself: aws-cdk-lib's jsii assembly bundles `@aws/cloudformation-validate`, which `cdk synth` runs on every
template (`@aws-cdk/core:validateAgainstDefaultRules`, core/lib/validation/cloudformation-validate-plugin.js).
One template per region holds an `AWS::SageMaker::Cluster` with a group of every `ClusterInstanceType`; the
plugin's E3644 findings ("'ml.x' is not valid for region 'r'") are the types it refuses there
(docs/facts/hyperpod.md#cdk-validate-hyperpod-instance-types).

`python -m tests.core.cdk_validate_data` rewrites fminfra/core/cdk_validate.json (review the diff)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from fminfra.core.regional import CDK_VALIDATE_DATA
from fminfra.core.regions import AZ_ID_PREFIX_BY_REGION
from fminfra.hyperpod.rules import hyperpod_instance_types

PLUGIN = "package/node_modules/@aws/cloudformation-validate/"
# Calls the engine as cloudformation-validate-plugin.js does (validateTemplate, STANDARD, the region as a
# pseudo-parameter override, WARN and up).
PROBE = r"""
const v = require(process.argv[2]);
const [types, regions] = JSON.parse(require("fs").readFileSync(0, "utf8"));
const groups = types.map((t, i) => ({InstanceGroupName: "g" + i, InstanceType: t, InstanceCount: 1,
  ExecutionRole: {"Fn::GetAtt": ["Role", "Arn"]}, LifeCycleConfig: {SourceS3Uri: "s3://sagemaker-b/p", OnCreate: "on_create.sh"}}));
const template = JSON.stringify({Resources: {Role: {Type: "AWS::IAM::Role", Properties: {AssumeRolePolicyDocument: {}}},
  Cluster: {Type: "AWS::SageMaker::Cluster", Properties: {InstanceGroups: groups}}}});
const engine = new v.CompositeEngine({});
const out = {};
for (const region of regions) {
  const report = engine.validateTemplate(new v.TemplateContent(template), {detailLevel: "STANDARD",
    pseudoParameterOverrides: {accountId: "111111111111", region}, severityLevel: "WARN"});
  out[region] = report.diagnostics.filter(d => d.entity && d.entity.logicalId === "Cluster").map(d => [d.ruleId, d.message]);
}
process.stdout.write(JSON.stringify(out));
"""
REFUSED = re.compile(r"^'(ml\.[^']+)' is not valid for region '([a-z0-9-]+)'$")


def assembly() -> Path:
    spec = importlib.util.find_spec("aws_cdk")  # no import: importing aws_cdk starts the jsii runtime
    assert spec and spec.submodule_search_locations
    return next((Path(spec.submodule_search_locations[0]) / "_jsii").glob("aws-cdk-lib@*.jsii.tgz"))


def plugin_findings(types: list[str], regions: list[str]) -> dict[str, list[list[str]]]:
    """region -> the plugin's [rule id, message] findings on a cluster holding every type."""
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(assembly()) as archive:
        archive.extractall(tmp, members=[m for m in archive.getmembers() if m.name.startswith(PLUGIN)], filter="data")
        (Path(tmp) / "probe.js").write_text(PROBE)
        result = subprocess.run(
            ["node", str(Path(tmp) / "probe.js"), str(Path(tmp) / PLUGIN)],
            input=json.dumps([types, regions]),
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
    return dict(json.loads(result.stdout))


def build() -> dict[str, Any]:
    """What fminfra/core/cdk_validate.json holds: the plugin's version and, per region fminfra accepts, the
    HyperPod types it refuses (E3644); regions where it knows no AWS::SageMaker::Cluster (F3006) hold none."""
    types = sorted(hyperpod_instance_types())
    findings = plugin_findings(types, list(AZ_ID_PREFIX_BY_REGION))
    refused: dict[str, list[str]] = {}
    for region, found in findings.items():
        names = [m[1] for rule, message in found if rule == "E3644" and (m := REFUSED.match(message)) and m[2] == region]
        if names:
            refused[region] = sorted(names)
    name = assembly().name.removesuffix(".jsii.tgz")
    with tarfile.open(assembly()) as archive:
        member = archive.extractfile(PLUGIN + "package.json")
        assert member is not None
        version = json.loads(member.read())["version"]
    return {"source": f"@aws/cloudformation-validate {version}, bundled in {name}", "refused_hyperpod_types": refused}


if __name__ == "__main__":
    data = build()
    CDK_VALIDATE_DATA.write_text(
        "{\n"
        + f'  "source": {json.dumps(data["source"])},\n  "refused_hyperpod_types": {{\n'
        + ",\n".join(f"    {json.dumps(r)}: {json.dumps(t)}" for r, t in data["refused_hyperpod_types"].items())
        + "\n  }\n}\n",
        encoding="utf-8",
    )
