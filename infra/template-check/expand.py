#!/usr/bin/env python3
"""Expands template.yaml with the SAM translator (offline, as CloudFormation's transform would) and
checks the generated template: every IAM statement, inline or SAM-generated, is free of `*` in
Action and Resource, and the managed policies attached are only the expected ones.

Usage: expand.py TEMPLATE [--print]   (exit 1 on a finding)
"""
import json
import os
import sys

from samtranslator.parser.parser import Parser
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

# Managed policies SAM attaches by itself, accepted by design (see template.yaml's header).
ALLOWED_MANAGED = {
    "service-role/AWSLambdaBasicExecutionRole",
    "AWSXrayWriteOnlyAccess",
}


class OfflinePolicyLoader:
    """Only needed for SAM policy templates by name; the template uses none."""

    def load(self):
        return {}


def is_no_value(node):
    return node == {"Ref": "AWS::NoValue"}


def statement_branches(st):
    """A statement, or the statements of `Fn::If [cond, a, b]` (AWS::NoValue dropped), so that a
    conditional statement is checked like any other."""
    if isinstance(st, dict) and list(st) == ["Fn::If"]:
        return [b for branch in st["Fn::If"][1:] for b in statement_branches(branch)]
    return [] if is_no_value(st) else [st]


def walk_statements(node, path, out):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "Statement":
                for i, st in enumerate(value if isinstance(value, list) else [value]):
                    for b in statement_branches(st):
                        out.append((f"{path}/Statement[{i}]", b))
            else:
                walk_statements(value, f"{path}/{key}", out)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            walk_statements(value, f"{path}[{i}]", out)


def has_wildcard(value):
    if isinstance(value, str):
        return "*" in value
    if isinstance(value, list):
        return any(has_wildcard(v) for v in value)
    if isinstance(value, dict):
        return any(has_wildcard(v) for v in value.values())
    return False


def is_route_grant(st):
    """`execute-api:Invoke` on one route: ARN `.../<api>/<stage>/<METHOD>/<path>` whose only `*`
    are whole path segments standing for path parameters (`/orders/*/charge` for
    `/orders/{order_id}/charge`); never in the API id, stage or method."""
    if st.get("Action") != "execute-api:Invoke":
        return False
    res = st.get("Resource")
    text = res.get("Fn::Sub") if isinstance(res, dict) else res
    if not isinstance(text, str) or ":execute-api:" not in text:
        return False
    parts = text.split(":execute-api:", 1)[1].split("/")
    if len(parts) < 4:
        return False
    api_stage_method, path = parts[:3], parts[3:]
    return all("*" not in p for p in api_stage_method) and all(
        p == "*" or "*" not in p for p in path
    ) and any(p != "*" for p in path)


def managed_name(arn):
    # {"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/NAME"} or a plain string
    text = arn.get("Fn::Sub") if isinstance(arn, dict) else arn
    if isinstance(text, str) and ":iam::aws:policy/" in text:
        return text.split(":iam::aws:policy/", 1)[1]
    return json.dumps(arn)


def main():
    path = sys.argv[1]
    # The translator needs a region for ARNs; no call leaves the machine.
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with open(path) as f:
        sam = yaml_parse(f.read())
    # What `sam package` does before CloudFormation sees the template: local code -> S3 object.
    for name, res in sam.get("Resources", {}).items():
        props = res.get("Properties", {})
        if res.get("Type") == "AWS::Serverless::Function" and isinstance(props.get("CodeUri"), str):
            if not props["CodeUri"].startswith("s3://"):
                props["CodeUri"] = f"s3://offline-placeholder/{name}.zip"
    out = transform(sam, {}, OfflinePolicyLoader(), Parser())
    if "--print" in sys.argv:
        print(json.dumps(out, indent=2, default=str))
    problems = []
    statements = []
    walk_statements(out.get("Resources", {}), "Resources", statements)
    for where, st in statements:
        # Not a statement at all (an intrinsic this script does not unfold) would skip the checks.
        if not isinstance(st, dict) or not ({"Action", "NotAction"} & set(st)):
            problems.append(f"{where}: not a statement with an Action: {json.dumps(st)}")
        for field in ("Action", "NotAction", "Resource", "NotResource"):
            if field == "Resource" and is_route_grant(st):
                continue
            if field in st and has_wildcard(st[field]):
                problems.append(f"{where}: wildcard in {field}: {json.dumps(st[field])}")
    roles = 0
    for name, res in out.get("Resources", {}).items():
        if res.get("Type") != "AWS::IAM::Role":
            continue
        roles += 1
        for arn in res.get("Properties", {}).get("ManagedPolicyArns", []):
            if managed_name(arn) not in ALLOWED_MANAGED:
                problems.append(f"{name}: unexpected managed policy {json.dumps(arn)}")
    # The outcome bus policy names the relay's role by the name SAM generates for it.
    resources = out.get("Resources", {})
    for name, res in resources.items():
        if res.get("Type") != "AWS::Events::EventBusPolicy":
            continue
        for ref in json.dumps(res).split('"Fn::GetAtt": ["')[1:]:
            target = ref.split('"', 1)[0]
            if target not in resources:
                problems.append(f"{name}: names {target}, which the SAM transform did not create")
    for p in problems:
        print(f"expand.py: {p}", file=sys.stderr)
    print(f"expand.py: {len(statements)} IAM statements in {roles} roles after the SAM transform; "
          f"{len(problems)} problem(s)", file=sys.stderr if "--print" in sys.argv else sys.stdout)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
