"""Deploys template.yaml, as it ships, into MiniStack through CloudFormation (the SAM transform),
as a new user's `sam deploy` would: the six functions as zips on S3, the template by TemplateURL
(it is over CreateStack's 51,200-byte TemplateBody limit), the secrets and the caller roles made
first, as a user makes them before a deploy.

    deploy.py ENDPOINT STRIPE_URL ZIP_DIR STATE_JSON [--param Key=Value ...]

ENDPOINT is MiniStack (root credentials: the emulator's `test`), STRIPE_URL the stripe-sim the
functions call (loopback http: the template's StripeApiBase admits it only for a loopback
simulator), ZIP_DIR holds <function>.zip for each function. Writes STATE_JSON: the stack's
outputs, the roles, the secrets, what the scenario needs. Prints every emulator gap met (what it
cannot provision or evaluate), by name with its reason, from gaps.json beside this file; nothing
is removed from the template.
"""

import argparse
import json
import os
import re
import sys
import time

import boto3
from botocore.config import Config

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
REGION = "us-east-1"
ACCOUNT = "000000000000"
FUNCTIONS = ["checkout", "charge", "reconciler", "notify", "audit", "events"]
BUCKET = "charge-once-deploy-local"
# What `aws.partner/stripe.com/...` Stripe's event destination creates in the account.
EVENT_SOURCE = "aws.partner/stripe.com/ed_local_deploy"
STRIPE_KEY = "sk_test_charge_once"
WEBHOOK_SECRET = "whsec_deployLocal0123456789abcdefABCDEF0123456789"

# The roles a user has before the deploy: the order service (named in CheckoutCallerRoleNames
# and RefundCallerRoleNames), a second order service (also named in both: another caller), one
# that may only create charges (CheckoutCallerRoleNames alone), one with no grant, and the
# on-call role OperatorPolicy is attached to after the deploy.
CALLERS = {
    "order_service": "charge-once-order-service",
    "other_service": "charge-once-other-service",
    "charges_only": "charge-once-charges-only",
    "ungranted": "charge-once-ungranted",
    "operator": "charge-once-operator",
}


def client(endpoint, service, **kw):
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(retries={"max_attempts": 2}, read_timeout=120),
        **kw,
    )


def say(msg):
    print(f"deploy-local: {msg}", file=sys.stderr, flush=True)


def packaged_template(bucket):
    """template.yaml with each function's CodeUri pointing at its uploaded zip, as `sam package`
    writes it; nothing else changes."""
    # CHARGE_ONCE_TEMPLATE: deploy a variant instead (a change tried before it is made, or one
    # statement removed to see the scenario fail without it).
    with open(os.environ.get("CHARGE_ONCE_TEMPLATE") or os.path.join(ROOT, "template.yaml")) as f:
        text = f.read()
    for name in FUNCTIONS:
        text, n = re.subn(
            rf"^(\s+CodeUri:) functions/{name}\s*$",
            rf"\1 s3://{bucket}/functions/{name}.zip",
            text,
            flags=re.M,
        )
        if n != 1:
            raise SystemExit(f"deploy-local: template.yaml has {n} CodeUri for functions/{name}")
    return text


def without_unprovisionable(text, gaps):
    """The template less the resources the emulator cannot provision (gaps.json's
    not_provisioned, each by logical id): each is named with the emulator's reason. A resource
    listed there that the template no longer has is an error, so the list cannot go stale."""
    lines = text.split("\n")
    for gap in gaps["not_provisioned"]:
        name = gap["resource"]
        start = [i for i, l in enumerate(lines) if l.rstrip() == f"  {name}:"]
        if len(start) != 1:
            raise SystemExit(f"deploy-local: gaps.json names {name}, which template.yaml does not have")
        end = start[0] + 1
        while end < len(lines) and not re.match(r"^ {0,2}[A-Za-z#]", lines[end]):
            end += 1
        removed = "\n".join(lines[start[0]:end])
        if f"Type: {gap['type'].split(' ')[0]}" not in removed:
            raise SystemExit(f"deploy-local: {name} is not a {gap['type']} in template.yaml")
        del lines[start[0]:end]
        # Nothing left may refer to it (by Ref, GetAtt, DependsOn or a Sub's ${...}).
        if re.search(rf"(!Ref|!GetAtt|Ref:|Fn::GetAtt:|DependsOn:.*)\s*\[?{name}\b|\$\{{{name}[.}}]",
                     "\n".join(lines)):
            raise SystemExit(f"deploy-local: {name} is referenced elsewhere in template.yaml")
        say(f"emulator gap, not provisioned: {name} ({gap['type']}): {gap['emulator']} "
            f"[{gap['source']}]; held instead by {gap['held_by']}")
    return "\n".join(lines)


def ensure_role(iam, name):
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    try:
        return iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    except iam.exceptions.EntityAlreadyExistsException:
        return iam.get_role(RoleName=name)["Role"]["Arn"]


def ensure_secret(sm, name, value):
    try:
        return sm.create_secret(Name=name, SecretString=value)["ARN"]
    except sm.exceptions.ResourceExistsException:
        sm.put_secret_value(SecretId=name, SecretString=value)
        return sm.describe_secret(SecretId=name)["ARN"]


def stack_events(cfn, stack):
    try:
        events = cfn.describe_stack_events(StackName=stack)["StackEvents"]
    except Exception as e:  # the stack may be gone
        return [f"(no events: {e})"]
    return [
        f"{e.get('LogicalResourceId')} {e.get('ResourceType')} {e.get('ResourceStatus')} "
        f"{e.get('ResourceStatusReason', '')}"
        for e in events
        if "FAILED" in e.get("ResourceStatus", "")
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("endpoint")
    ap.add_argument("stripe_url")
    ap.add_argument("zip_dir")
    ap.add_argument("state")
    ap.add_argument("--stack", default="charge-once-local")
    ap.add_argument("--param", action="append", default=[], help="Key=Value over the defaults below")
    ap.add_argument("--timeout", type=int, default=600)
    args = ap.parse_args()
    t0 = time.time()

    s3 = client(args.endpoint, "s3")
    iam = client(args.endpoint, "iam")
    sm = client(args.endpoint, "secretsmanager")
    cfn = client(args.endpoint, "cloudformation")
    events = client(args.endpoint, "events")

    # 1. What a user makes before deploying: the Stripe key and the endpoint's signing secret in
    #    Secrets Manager, the roles, the partner event source Stripe's event destination creates.
    key_arn = ensure_secret(sm, "charge-once/stripe-key", STRIPE_KEY)
    webhook_arn = ensure_secret(sm, "charge-once/stripe-webhook-secret", WEBHOOK_SECRET)
    roles = {k: ensure_role(iam, v) for k, v in CALLERS.items()}
    try:
        events.create_partner_event_source(Name=EVENT_SOURCE, Account=ACCOUNT)
    except events.exceptions.ResourceAlreadyExistsException:
        pass

    # 2. `sam package`: the zips and the template on S3.
    try:
        s3.create_bucket(Bucket=BUCKET)
    except (s3.exceptions.BucketAlreadyOwnedByYou, s3.exceptions.BucketAlreadyExists):
        pass
    for name in FUNCTIONS:
        path = os.path.join(args.zip_dir, f"{name}.zip")
        s3.upload_file(path, BUCKET, f"functions/{name}.zip")
    with open(os.path.join(HERE, "gaps.json")) as f:
        gaps = json.load(f)
    body = without_unprovisionable(packaged_template(BUCKET), gaps)
    for gap in gaps["stand_ins"]:
        say(f"emulator gap, stood in for: {gap['what']}: {gap['emulator']} [{gap['source']}]; "
            f"instead {gap['held_by']}")
    for gap in gaps["not_evaluated"]:
        say(f"emulator gap, not evaluated: {gap['what']}: {gap['emulator']} [{gap['source']}]; "
            f"held instead by {gap['held_by']}")
    s3.put_object(Bucket=BUCKET, Key="template.yaml", Body=body.encode())
    say(f"packaged: {len(FUNCTIONS)} zips and the template ({len(body.encode())} bytes, "
        f"over the 51,200-byte TemplateBody limit: by TemplateURL) on s3://{BUCKET}")

    # 3. `sam deploy`: CreateStack with the SAM transform.
    params = {
        "StripeSecretArn": key_arn,
        "StripeApiBase": args.stripe_url,
        "CheckoutCallerRoleNames":
            f"{CALLERS['order_service']},{CALLERS['other_service']},{CALLERS['charges_only']}",
        "RefundCallerRoleNames": f"{CALLERS['order_service']},{CALLERS['other_service']}",
        "StripeEventSourceName": EVENT_SOURCE,
        "StripeWebhookSecretArn": webhook_arn,
        # A throwaway stack: nobody to page (the Rules block insists this is said out loud).
        "AllowUnpagedAlarms": "true",
        "TableDeletionProtection": "false",
        # The scenario waits for the reconciler's own schedule: its shortest rate.
        "ReconcileEveryMinutes": "2",
        "Stage": "local",
    }
    for kv in args.param:
        k, _, v = kv.partition("=")
        params[k] = v
    try:
        cfn.delete_stack(StackName=args.stack)
    except Exception:
        pass
    cfn.create_stack(
        StackName=args.stack,
        TemplateURL=f"{args.endpoint}/{BUCKET}/template.yaml",
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()],
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
    )
    deadline = time.time() + args.timeout
    while True:
        stack = cfn.describe_stacks(StackName=args.stack)["Stacks"][0]
        status = stack["StackStatus"]
        if status.endswith("_COMPLETE") or status.endswith("_FAILED"):
            break
        if time.time() > deadline:
            raise SystemExit(f"deploy-local: stack still {status} after {args.timeout} s")
        time.sleep(1)
    if status != "CREATE_COMPLETE":
        say(f"stack {status}: {stack.get('StackStatusReason', '')}")
        for line in stack_events(cfn, args.stack):
            say(f"  {line}")
        raise SystemExit(1)
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    # Every page: ListStackResources answers at most 100 summaries a call (the stack has more
    # since the dispute alarms).
    resources = {
        r["LogicalResourceId"]: r.get("PhysicalResourceId", "")
        for page in cfn.get_paginator("list_stack_resources").paginate(StackName=args.stack)
        for r in page["StackResourceSummaries"]
    }
    say(f"stack {status} in {time.time() - t0:.0f} s: {len(resources)} resources")

    # 4. The on-call role gets OperatorPolicy, as docs/deploy.md tells a user to do.
    iam.attach_role_policy(RoleName=CALLERS["operator"], PolicyArn=outputs["OperatorPolicyArn"])

    state = {
        "endpoint": args.endpoint,
        "region": REGION,
        "account": ACCOUNT,
        "stack": args.stack,
        "stripe_url": args.stripe_url,
        "outputs": outputs,
        "resources": resources,
        "roles": roles,
        "parameters": params,
        "stripe_key": STRIPE_KEY,
        "webhook_secret": WEBHOOK_SECRET,
        "event_source": EVENT_SOURCE,
        # The packaged template as deployed (less what the emulator cannot provision).
        "template_url": f"{args.endpoint}/{BUCKET}/template.yaml",
    }
    with open(args.state, "w") as f:
        json.dump(state, f, indent=1)
    for k in ["ApiUrl", "TableName", "QueueUrl", "OutcomeBusName", "OperatorPolicyArn"]:
        print(f"{k}={outputs.get(k, '')}")


if __name__ == "__main__":
    main()
