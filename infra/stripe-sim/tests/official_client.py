"""Drive a running stripe-sim with the official `stripe` Python package.

Usage:
    STRIPE_SIM_URL=http://127.0.0.1:12111 python official_client.py
Optional: STRIPE_SIM_KEY (default sk_test_charge_once).
Exits non-zero on the first failed check. Uses the admin API to advance the
simulated clock, inject one drop_after_commit and one rate_limit fault, and set
a tiny create rate limit (then lifts it). Ends with refunds of the last PaymentIntent
(create, replay, retrieve, list with paging, amount_too_large, charge_already_refunded), and
manual capture (authorize, partial capture with a replay, a second capture refused, a cancel
releasing an authorization, the expiry on the simulated clock), and disputes through the
resource-style API (`stripe.Dispute`): Stripe's dispute test card, list by payment_intent,
retrieve, winning evidence submitted and won on the simulated clock, a refund refused with
`charge_disputed` meanwhile, and an accepted (closed) dispute lost.
"""

import json
import os
import sys
import urllib.request
import uuid

import stripe

BASE = os.environ.get("STRIPE_SIM_URL", "http://127.0.0.1:12111").rstrip("/")
KEY = os.environ.get("STRIPE_SIM_KEY", "sk_test_charge_once")


def admin(path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        BASE + "/_sim/" + path,
        data=data,
        method="GET" if body is None else "POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
    print("ok:", what)


def main():
    admin("reset", {})
    client = stripe.StripeClient(
        KEY,
        base_addresses={"api": BASE},
        max_network_retries=0,
    )
    pis = client.v1.payment_intents if hasattr(client, "v1") else client.payment_intents
    op = "op-" + uuid.uuid4().hex
    params = {
        "amount": 1234,
        "currency": "usd",
        "customer": "cus_py",
        "payment_method": "pm_card_visa",
        "confirm": True,
        "off_session": True,
        "metadata": {"operation_id": op},
    }
    pi = pis.create(params=params, options={"idempotency_key": "py-1"})
    check(pi.status == "succeeded" and pi.id.startswith("pi_"), "create succeeded")
    again = pis.create(params=params, options={"idempotency_key": "py-1"})
    check(again.id == pi.id, "idempotent replay returns the same PaymentIntent")
    check(pis.retrieve(pi.id).amount == 1234, "retrieve")

    query = "metadata['operation_id']:'%s'" % op
    res = pis.search(params={"query": query})
    check(len(res.data) == 0, "search hides it during the lag")
    admin("clock", {"advance_secs": 30})
    res = pis.search(params={"query": query})
    check([p.id for p in res.data] == [pi.id], "search finds it after the lag")

    try:
        pis.create(
            params={**params, "payment_method": "pm_card_chargeDeclined"},
            options={"idempotency_key": "py-2"},
        )
        check(False, "decline raises CardError")
    except stripe.CardError as e:
        check(e.code == "card_declined", "decline raises CardError card_declined")
        check(e.error.payment_intent.status == "requires_payment_method", "error carries the PI")

    try:
        pis.create(params={**params, "amount": 999}, options={"idempotency_key": "py-1"})
        check(False, "param mismatch raises IdempotencyError")
    except stripe.IdempotencyError:
        check(True, "param mismatch raises IdempotencyError")

    admin("faults", {"script": ["drop_after_commit"]})
    try:
        pis.create(params=params, options={"idempotency_key": "py-3"})
        check(False, "dropped connection raises APIConnectionError")
    except stripe.APIConnectionError:
        check(True, "dropped connection raises APIConnectionError")
    replay = pis.create(params=params, options={"idempotency_key": "py-3"})
    ledger = admin("ledger")["payment_intents"]
    check(any(p["id"] == replay.id for p in ledger), "retry after drop returns the committed PI")
    check(len(ledger) == 3, "ledger has exactly 3 PaymentIntents")

    try:
        bad = stripe.StripeClient("sk_test_wrong", base_addresses={"api": BASE})
        (bad.v1 if hasattr(bad, "v1") else bad).payment_intents.retrieve(pi.id)
        check(False, "wrong key raises AuthenticationError")
    except stripe.AuthenticationError:
        check(True, "wrong key raises AuthenticationError")

    # Capacity: 1 create/s on the simulated clock (which does not move here). The client must not
    # retry the 429 itself (max_network_retries=0), or it would hide it.
    cap = admin("capacity", {"create_per_sec": 1})
    check(cap["create_per_sec"] == 1, "capacity set to 1 create/s")
    pis.create(params=params, options={"idempotency_key": "py-4"})
    try:
        pis.create(params=params, options={"idempotency_key": "py-5"})
        check(False, "over the create limit raises RateLimitError")
    except stripe.RateLimitError as e:
        # The client builds RateLimitError from the status alone (e.code stays None).
        check(e.http_status == 429 and e.json_body["error"]["code"] == "rate_limit",
              "over the create limit raises RateLimitError (429 rate_limit)")
    admin("capacity", {"unlimited": True})
    admin("faults", {"script": ["rate_limit"]})
    try:
        pis.create(params=params, options={"idempotency_key": "py-5"})
        check(False, "the rate_limit fault raises RateLimitError")
    except stripe.RateLimitError as e:
        check(e.http_status == 429, "the rate_limit fault raises RateLimitError")
    stats = admin("stats")
    check(stats["capacity_429s"]["create"] == 1 and stats["injected"]["rate_limit"] == 1,
          "capacity 429s are counted apart from the rate_limit fault")
    created = pis.create(params=params, options={"idempotency_key": "py-5"})
    ledger = admin("ledger")["payment_intents"]
    check(len(ledger) == 5
          and [p["id"] for p in ledger if p["idempotency_key"] == "py-5"] == [created.id],
          "neither 429 saved anything under the key: the retry creates")
    refunds_checks(client, created.id)
    capture_checks(client)
    dispute_checks(client)
    print("official client: all checks passed")


def refunds_checks(client, pi_id):
    """Refund create (keyed, replayed), retrieve and list by payment_intent with paging, and
    Stripe's refusal of more than is left, through the official client's Refund resource."""
    refunds = client.v1.refunds if hasattr(client, "v1") else client.refunds
    first = refunds.create(params={"payment_intent": pi_id, "amount": 200,
                                   "reason": "requested_by_customer",
                                   "metadata": {"operation_id": "op-refund-1"}},
                           options={"idempotency_key": "py-r1"})
    check(first.object == "refund" and first.id.startswith("re_") and first.status == "succeeded"
          and first.amount == 200 and first.payment_intent == pi_id, "refund create")
    again = refunds.create(params={"payment_intent": pi_id, "amount": 200,
                                   "reason": "requested_by_customer",
                                   "metadata": {"operation_id": "op-refund-1"}},
                           options={"idempotency_key": "py-r1"})
    check(again.id == first.id, "refund replay returns the same refund")
    got = refunds.retrieve(first.id)
    check(got.id == first.id and got.metadata["operation_id"] == "op-refund-1", "refund retrieve")
    second = refunds.create(params={"payment_intent": pi_id, "amount": 300})
    page = refunds.list(params={"payment_intent": pi_id, "limit": 1})
    check([r.id for r in page.data] == [second.id] and page.has_more, "refund list, newest first")
    page = refunds.list(params={"payment_intent": pi_id, "limit": 1, "starting_after": second.id})
    check([r.id for r in page.data] == [first.id] and not page.has_more, "refund list, next page")
    try:
        refunds.create(params={"payment_intent": pi_id, "amount": 1234})
        check(False, "an over-refund raises InvalidRequestError")
    except stripe.InvalidRequestError as e:
        check(e.code == "amount_too_large" and e.param == "amount",
              "an over-refund raises InvalidRequestError amount_too_large")
    rest = refunds.create(params={"payment_intent": pi_id})
    check(rest.amount == 1234 - 500, "a refund without amount takes what is left")
    try:
        refunds.create(params={"payment_intent": pi_id})
        check(False, "a fully refunded charge raises InvalidRequestError")
    except stripe.InvalidRequestError as e:
        check(e.code == "charge_already_refunded", "charge_already_refunded")


def capture_checks(client):
    """capture_method=manual through the official client: requires_capture, a partial capture
    (replayed under its key), a second capture refused with payment_intent_unexpected_state,
    capture_before on the expanded charge (a retrieve's and a create's), a cancel of an
    authorization with its reason, and an authorization canceled (`automatic`, or `expired` in the
    client's version from basil on) once the simulated clock passes its deadline."""
    pis = client.v1.payment_intents if hasattr(client, "v1") else client.payment_intents
    params = {
        "amount": 1000,
        "currency": "usd",
        "payment_method": "pm_card_visa",
        "confirm": True,
        "off_session": True,
        "capture_method": "manual",
    }
    held = pis.create(params=params, options={"idempotency_key": "py-m1"})
    check(held.status == "requires_capture" and held.amount_capturable == 1000
          and held.capture_method == "manual", "a manual intent waits for its capture")
    charge = pis.retrieve(held.id, params={"expand": ["latest_charge"]}).latest_charge
    before = charge.payment_method_details.card.capture_before
    check(0 < before - held.created <= 7 * 24 * 3600, "capture_before within 7 days")
    got = pis.capture(held.id, params={"amount_to_capture": 600},
                      options={"idempotency_key": "py-c1"})
    check(got.status == "succeeded" and got.amount_received == 600, "a partial capture")
    again = pis.capture(held.id, params={"amount_to_capture": 600},
                        options={"idempotency_key": "py-c1"})
    check(again.amount_received == 600, "the capture replayed under its key")
    try:
        pis.capture(held.id, options={"idempotency_key": "py-c2"})
        check(False, "a second capture raises InvalidRequestError")
    except stripe.InvalidRequestError as e:
        check(e.code == "payment_intent_unexpected_state",
              "a second capture raises payment_intent_unexpected_state")
    expanded = pis.create(params={**params, "expand": ["latest_charge"]},
                          options={"idempotency_key": "py-m4"})
    card = expanded.latest_charge.payment_method_details.card
    check(0 < card.capture_before - expanded.created <= 7 * 24 * 3600,
          "a create asked to expand its charge states capture_before")
    released = pis.create(params=params, options={"idempotency_key": "py-m2"})
    gone = pis.cancel(released.id, params={"cancellation_reason": "requested_by_customer"},
                      options={"idempotency_key": "py-x2"})
    check(gone.status == "canceled" and gone.amount_capturable == 0
          and gone.cancellation_reason == "requested_by_customer",
          "a cancel releases an authorization, with its reason")
    expiring = pis.create(params=params, options={"idempotency_key": "py-m3"})
    admin("clock", {"advance_secs": 7 * 24 * 3600})
    late = pis.retrieve(expiring.id)
    # The client sends its own pinned Stripe-Version: a lapse says `automatic` before
    # 2025-03-31.basil and `expired` from it on, and the simulator answers in that version.
    version = stripe.api_version or "2024-06-20"
    word = "automatic" if version.split(".")[0] < "2025-03-31" else "expired"
    check(late.status == "canceled" and late.cancellation_reason == word,
          f"an uncaptured intent expires on the simulated clock ({word}, as {version} says)")
    try:
        pis.capture(expiring.id)
        check(False, "an expired intent raises InvalidRequestError")
    except stripe.InvalidRequestError as e:
        check(e.code == "payment_intent_unexpected_state", "an expired intent is not captured")


def dispute_checks(client):
    """A charge with `pm_card_createDispute` is disputed: found with `stripe.Dispute.list`,
    read with `stripe.Dispute.retrieve`, its refund refused with `charge_disputed` (raised as
    `stripe.error.InvalidRequestError`), answered with `stripe.Dispute.modify(evidence=…,
    submit=True)` and won after the review; another, accepted with `stripe.Dispute.close`, lost."""
    stripe.api_key = KEY
    stripe.api_base = BASE
    stripe.max_network_retries = 0
    pis = client.v1.payment_intents if hasattr(client, "v1") else client.payment_intents
    params = {
        "amount": 2000,
        "currency": "usd",
        "payment_method": "pm_card_createDispute",
        "confirm": True,
        "off_session": True,
    }
    pi = pis.create(params=params, options={"idempotency_key": "py-d1"})
    check(pi.status == "succeeded", "the dispute test card's charge succeeds")
    listed = stripe.Dispute.list(payment_intent=pi.id)
    check(len(listed.data) == 1 and not listed.has_more, "Dispute.list by payment_intent")
    dp = listed.data[0]
    check(dp.object == "dispute" and dp.id.startswith("dp_") and dp.payment_intent == pi.id
          and dp.charge == pi.latest_charge and dp.amount == 2000 and dp.reason == "fraudulent"
          and dp.status == "needs_response" and not dp.is_charge_refundable
          and len(dp.balance_transactions) == 1,
          "a fraudulent dispute, funds withdrawn")
    due_by = dp.evidence_details.due_by
    check(due_by - dp.created == 7 * 24 * 3600 and not dp.evidence_details.past_due,
          "seven days to answer")
    got = stripe.Dispute.retrieve(dp.id)
    check(got.id == dp.id and got.status == "needs_response", "Dispute.retrieve")
    try:
        stripe.Refund.create(payment_intent=pi.id)
        check(False, "a refund of a disputed charge raises InvalidRequestError")
    except stripe.error.InvalidRequestError as e:
        check(e.code == "charge_disputed" and e.http_status == 400,
              "a refund of a disputed charge raises InvalidRequestError charge_disputed")
    answered = stripe.Dispute.modify(
        dp.id, evidence={"uncategorized_text": "winning_evidence"}, submit=True)
    check(answered.status == "under_review" and answered.evidence_details.has_evidence
          and answered.evidence_details.submission_count == 1,
          "Dispute.modify submits the evidence: under_review")
    admin("clock", {"advance_secs": 3600})
    won = stripe.Dispute.retrieve(dp.id)
    check(won.status == "won" and won.is_charge_refundable and len(won.balance_transactions) == 2,
          "won after the review: funds reinstated, refundable again")
    refund = stripe.Refund.create(payment_intent=pi.id, amount=500)
    check(refund.status == "succeeded", "a won dispute's charge refunds")

    other = pis.create(params=params, options={"idempotency_key": "py-d2"})
    dp2 = stripe.Dispute.list(charge=other.latest_charge).data[0]
    lost = stripe.Dispute.close(dp2.id)
    check(lost.status == "lost", "Dispute.close accepts it: lost")
    try:
        stripe.Dispute.retrieve("dp_nope")
        check(False, "an unknown dispute raises InvalidRequestError")
    except stripe.error.InvalidRequestError as e:
        check(e.http_status == 404 and e.code == "resource_missing", "an unknown dispute: 404")


if __name__ == "__main__":
    main()
