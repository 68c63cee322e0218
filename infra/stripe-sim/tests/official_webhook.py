"""The official `stripe` package's webhook helpers, driven by tests/stripe_webhooks.rs.

  python official_webhook.py verify   stdin: [{"body": ..., "signature": ...}, ...]
      Webhook.construct_event for each (secret from STRIPE_WEBHOOK_SECRET); prints
      [{"id": ..., "type": ...}]; also checks that an altered body is refused.
  python official_webhook.py sign     stdin: the body
      prints WebhookSignature.generate_signature_header(body, secret) (time = now).
"""

import json
import os
import sys

import stripe


def verify(secret):
    deliveries = json.load(sys.stdin)
    out = []
    for d in deliveries:
        event = stripe.Webhook.construct_event(d["body"], d["signature"], secret)
        out.append({"id": event.id, "type": event.type})
        try:
            stripe.Webhook.construct_event(d["body"] + " ", d["signature"], secret)
        except stripe.SignatureVerificationError:
            pass
        else:
            raise SystemExit("an altered body was accepted")
    print(json.dumps(out))


def sign(secret):
    body = sys.stdin.read()
    print(stripe.WebhookSignature.generate_signature_header(body, secret))


if __name__ == "__main__":
    secret = os.environ["STRIPE_WEBHOOK_SECRET"]
    {"verify": verify, "sign": sign}[sys.argv[1]](secret)
