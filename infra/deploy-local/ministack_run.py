"""Runs MiniStack (as `python -m ministack` does) with two of AWS's documented behaviours it lacks
added, each listed in gaps.json under stand_ins with the emulator's source line:

- dynamodb:ReturnValues in the IAM request context of a DynamoDB request (AWS's condition key
  for UpdateItem, PutItem, DeleteItem). MiniStack leaves it out, so a statement conditioned on it
  (OperatorPolicy's resolve and redrive: StringEquals ReturnValues ALL_NEW) would allow nothing,
  where AWS allows chargectl's writes, which ask ALL_NEW.
- PutPartnerEvents delivering to the partner event bus of the entry's source, as AWS delivers a
  SaaS partner's events (Stripe's event destination) to the bus associated with its partner event
  source. MiniStack answers success and delivers nothing.

Nothing else of the emulator is changed; in particular IAM stays enforced (AUTH=true) and the
keys it does not evaluate (dynamodb:LeadingKeys, dynamodb:Attributes of writes) are left as they
are: tests/template.rs holds those statically.
"""

import json

from ministack.core import iam_actions
from ministack.services import eventbridge

_context = iam_actions.dynamodb_service_context


def dynamodb_service_context(body):
    context = _context(body)
    try:
        data = json.loads(body or b"{}")
    except (ValueError, TypeError):
        return context
    returns = data.get("ReturnValues") if isinstance(data, dict) else None
    if isinstance(returns, str) and returns:
        context["dynamodb:ReturnValues"] = returns
    return context


def put_partner_events(data):
    entries = [
        {**entry, "EventBusName": entry.get("Source", "")}
        for entry in data.get("Entries", [])
        if isinstance(entry, dict)
    ]
    return eventbridge._put_events({"Entries": entries}, allow_aws_source=True)


iam_actions.dynamodb_service_context = dynamodb_service_context
eventbridge._put_partner_events = put_partner_events

if __name__ == "__main__":
    from ministack.app import main

    main()
