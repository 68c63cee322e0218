"""Runs MiniStack (as `python -m ministack` does) with three of AWS's documented behaviours it lacks
added, each listed in gaps.json under stand_ins with the emulator's source line:

- dynamodb:ReturnValues in the IAM request context of a DynamoDB request (AWS's condition key
  for UpdateItem, PutItem, DeleteItem). MiniStack leaves it out, so a statement conditioned on it
  (OperatorPolicy's resolve and redrive: StringEquals ReturnValues ALL_NEW) would allow nothing,
  where AWS allows chargectl's writes, which ask ALL_NEW.
- dynamodb:EnclosingOperation as the single string AWS documents (TransactWriteItems) for each
  item of a transaction. MiniStack sets it as a one-element list, which its single-valued
  StringEquals compares as the list's text, so a statement conditioned on it (checkout's refund
  reservation and capture/cancel claim, the operator's refund release) never allows anything.
- PutPartnerEvents delivering to the partner event bus of the entry's source, as AWS delivers a
  SaaS partner's events (Stripe's event destination) to the bus associated with its partner event
  source. MiniStack answers success and delivers nothing.

Nothing else of the emulator is changed; in particular IAM stays enforced (AUTH=true) and the
keys it does not evaluate (dynamodb:LeadingKeys, dynamodb:Attributes of writes) are left as they
are: tests/template.rs holds those statically.
"""

import json

from ministack.core import iam_actions, iam_evaluator
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


_enforce = iam_evaluator.enforce


def enforce(*args, service_context=None, **kwargs):
    if service_context and isinstance(service_context.get("dynamodb:EnclosingOperation"), list):
        (operation,) = service_context["dynamodb:EnclosingOperation"]
        service_context = {**service_context, "dynamodb:EnclosingOperation": operation}
    return _enforce(*args, service_context=service_context, **kwargs)


def put_partner_events(data):
    entries = [
        {**entry, "EventBusName": entry.get("Source", "")}
        for entry in data.get("Entries", [])
        if isinstance(entry, dict)
    ]
    return eventbridge._put_events({"Entries": entries}, allow_aws_source=True)


iam_actions.dynamodb_service_context = dynamodb_service_context
iam_evaluator.enforce = enforce
eventbridge._put_partner_events = put_partner_events

if __name__ == "__main__":
    from ministack.app import main

    main()
