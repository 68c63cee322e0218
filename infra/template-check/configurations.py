#!/usr/bin/env python3
"""Writes copies of template.yaml whose parameter Defaults select each configuration of Stripe
events in, so that cfn-lint and `sam validate --lint` see every one with its conditions resolved the
way a deploy would (the template itself is the default configuration: no route without an
authorizer, no events function). Text substitution of the `Default: ""` lines only: the copies
keep the template's lines, so a finding's line number is the template's.

Usage: configurations.py TEMPLATE OUTDIR   (prints the paths written, one a line)
"""
import os
import re
import sys

# Placeholder *names* of resources (ARNs, an event source), never secret values.
WEBHOOK_SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:charge-once/stripe-webhook-AbCdEf"
EVENTS_KEY_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:charge-once/stripe-events-key-AbCdEf"
EVENT_SOURCE = "aws.partner/stripe.com/ed_test_61RkLintCheck0001"

CONFIGURATIONS = {
    "webhook": {"StripeWebhookSecretArn": WEBHOOK_SECRET_ARN},
    "event-source": {"StripeEventSourceName": EVENT_SOURCE},
    "both-with-events-key": {
        "StripeWebhookSecretArn": WEBHOOK_SECRET_ARN,
        "StripeEventSourceName": EVENT_SOURCE,
        "StripeEventsKeySecretArn": EVENTS_KEY_ARN,
    },
}


def with_defaults(text, values):
    for name, value in values.items():
        # The parameter's block: `  Name:` then its 4-space-indented lines; its `Default: ""`.
        block = re.compile(rf'(^  {re.escape(name)}:\n(?:    .*\n)*?    Default: )""$', re.M)
        text, n = block.subn(lambda m: f'{m.group(1)}"{value}"', text, count=1)
        if n != 1:
            sys.exit(f"configurations.py: no `Default: \"\"` for parameter {name}")
    return text


def main():
    template, outdir = sys.argv[1], sys.argv[2]
    with open(template) as f:
        text = f.read()
    os.makedirs(outdir, exist_ok=True)
    for name, values in CONFIGURATIONS.items():
        path = os.path.join(outdir, f"template.{name}.yaml")
        with open(path, "w") as f:
            f.write(with_defaults(text, values))
        print(path)


if __name__ == "__main__":
    main()
