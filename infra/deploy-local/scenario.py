"""The deployed stack, every step asserted: orders, refunds, an authorization and its capture, a
lost answer settled by the reconciler on its own schedule, Stripe's events in through both
sources, chargectl with only OperatorPolicy's grants, a declined order charged again with
another card (and one declined twice, then two retries at once), the audit, and the refusals
(unsigned, a role without the grant, another caller's order, a third card for a paid order, each
function's role trying a write it must not make, each with its genuine twin allowed).

    scenario.py STATE_JSON CHARGECTL WORK_DIR

STATE_JSON is what deploy.py wrote. Every call goes through the emulator with IAM enforced: the
order services sign for execute-api with their own roles, chargectl runs with the operator role's
credentials, the functions run with theirs. Exits non-zero naming the failed step.
"""

import base64
import hashlib
import hmac
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import jsonschema
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.exceptions import ClientError

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

T0 = time.time()
STEP = "start"
STEPS = 0
NAME = "scenario"


def begin(name):
    global STEP, STEPS
    STEP = name
    STEPS += 1
    print(f"{NAME}: [{time.time() - T0:5.0f} s] {name}", file=sys.stderr, flush=True)


class Failed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failed(what)
    print(f"{NAME}:          ok: {what}", file=sys.stderr, flush=True)


def run(main, name):
    """Runs a scenario's main: a failure names its step and exits 1."""
    global NAME
    NAME = name
    try:
        main()
    except Failed as e:
        print(f"{name}: FAILED at step '{STEP}': {e} (after {time.time() - T0:.0f} s)", file=sys.stderr)
        sys.exit(1)
    except Exception as e:  # an unexpected answer is a failure of the step it came in
        print(f"{name}: FAILED at step '{STEP}': {type(e).__name__}: {e} (after {time.time() - T0:.0f} s)",
              file=sys.stderr)
        sys.exit(1)
    print(f"{name}: passed, {STEPS} steps in {time.time() - T0:.0f} s", file=sys.stderr)


def wait_for(what, fn, timeout, every=1.0):
    """fn() until it returns something truthy; its last value on timeout is in the failure."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    raise Failed(f"{what}: not within {timeout} s (last: {str(last)[:300]})")


class Stack:
    def __init__(self, state):
        self.s = state
        self.ep = state["endpoint"]
        self.region = state["region"]
        self.out = state["outputs"]
        self.res = state["resources"]
        self.api_id = re.match(r"https://([^.]+)\.", self.out["ApiUrl"]).group(1)
        self.root = self.session("test", "test", None)
        self.sessions = {}

    def session(self, key, secret, token):
        return boto3.Session(
            aws_access_key_id=key, aws_secret_access_key=secret, aws_session_token=token,
            region_name=self.region,
        )

    def client(self, service, session=None):
        return (session or self.root).client(
            service, endpoint_url=self.ep, config=Config(retries={"max_attempts": 1}, read_timeout=90)
        )

    def assume(self, role_arn, name):
        c = self.client("sts").assume_role(RoleArn=role_arn, RoleSessionName=name)["Credentials"]
        return self.session(c["AccessKeyId"], c["SecretAccessKey"], c["SessionToken"])

    def as_role(self, who):
        if who not in self.sessions:
            self.sessions[who] = self.assume(self.s["roles"][who], f"scenario-{who}")
        return self.sessions[who]

    def api(self, method, path, body=None, who=None, headers=None, raw=False):
        """A request to the deployed HTTP API: signed for execute-api by `who`'s role, or not."""
        url = f"{self.ep}/_aws/execute-api/{self.api_id}{path}"
        data = body if raw else (json.dumps(body) if body is not None else None)
        hdrs = {"content-type": "application/json", **(headers or {})}
        if who is not None:
            req = AWSRequest(method=method, url=url, data=data, headers=hdrs)
            creds = self.as_role(who).get_credentials().get_frozen_credentials()
            SigV4Auth(creds, "execute-api", self.region).add_auth(req)
            hdrs = dict(req.headers)
        r = urllib.request.Request(url, data=data.encode() if isinstance(data, str) else data,
                                   headers=hdrs, method=method)
        try:
            with urllib.request.urlopen(r, timeout=60) as resp:
                code, text = resp.status, resp.read()
        except urllib.error.HTTPError as e:
            code, text = e.code, e.read()
        try:
            return code, json.loads(text or b"null")
        except ValueError:
            return code, text.decode(errors="replace")


    def wait_status(self, what, path, status, timeout=60, every=1.0):
        """GET `path` as the order service until it answers 200 with `status`; that answer."""
        def found():
            code, body = self.api("GET", path, who="order_service")
            return body if code == 200 and body["status"] == status else None
        return wait_for(what, found, timeout, every)

    def wait_attempt(self, order_id, attempt, status, timeout=60):
        """GET the order's charge until its latest attempt is `attempt` with `status`; that answer."""
        def found():
            code, body = self.api("GET", f"/orders/{order_id}/charge", who="order_service")
            return body if code == 200 and body.get("attempt") == attempt and body["status"] == status else None
        return wait_for(f"{order_id} attempt {attempt} {status}", found, timeout)


class Sim:
    """stripe-sim's admin API: the ledger of what really exists at "Stripe", faults, clock."""

    def __init__(self, url, key=None):
        self.url = url
        self.key = key

    def post(self, path, body):
        r = urllib.request.Request(f"{self.url}{path}", data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(r, timeout=10) as resp:
            return json.loads(resp.read())

    def get(self, path):
        with urllib.request.urlopen(f"{self.url}{path}", timeout=10) as resp:
            return json.loads(resp.read())

    def ledger(self):
        return self.get("/_sim/ledger")

    def intents_of(self, operation_id):
        return [p for p in self.ledger()["payment_intents"] if p.get("operation_id") == operation_id]

    def clock_now(self):
        self.post("/_sim/clock", {"set_ms": int(time.time() * 1000)})

    def intents_of_order(self, order_id):
        """What Stripe holds for an order: every PaymentIntent whose metadata names it, by Stripe's
        list (read-after-write; its search lags writes by design), {operation_id: PaymentIntent}."""
        held, after = {}, None
        while True:
            q = urllib.parse.urlencode({"limit": 100, **({"starting_after": after} if after else {})})
            r = urllib.request.Request(f"{self.url}/v1/payment_intents?{q}",
                                       headers={"authorization": f"Bearer {self.key}"})
            with urllib.request.urlopen(r, timeout=10) as resp:
                page = json.loads(resp.read())
            for p in page["data"]:
                if p.get("metadata", {}).get("order_id") == order_id:
                    held[p["metadata"]["operation_id"]] = p
            if not page["has_more"] or not page["data"]:
                return held
            after = page["data"][-1]["id"]

    def lose_next_answer(self):
        """The next create is made at Stripe and its answer dropped; the client's same-key retry
        meets a 500 before Stripe looks at the key: the outcome is unknown to us, and the next
        create with the key (a re-drive) is answered with the intent Stripe made."""
        self.post("/_sim/faults", {"script": ["drop_after_commit", "server_error_before_commit"]})


class Outcomes:
    """The order service's side of the outcome bus: a rule on the bus and a queue behind it, as a
    subscriber sets up (docs/how-it-works.md); every event held to docs/outcome-event.schema.json."""

    def __init__(self, stack):
        self.stack = stack
        sqs, events = stack.client("sqs"), stack.client("events")
        self.sqs = sqs
        self.url = sqs.create_queue(QueueName="scenario-outcomes")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        bus = stack.out["OutcomeBusName"]
        rule = events.put_rule(Name="scenario-outcomes", EventBusName=bus,
                               EventPattern=json.dumps({"source": ["charge-once"]}))["RuleArn"]
        sqs.set_queue_attributes(QueueUrl=self.url, Attributes={"Policy": json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"},
                           "Action": "sqs:SendMessage", "Resource": arn,
                           "Condition": {"ArnEquals": {"aws:SourceArn": rule}}}]})})
        events.put_targets(Rule="scenario-outcomes", EventBusName=bus, Targets=[{"Id": "q", "Arn": arn}])
        with open(os.path.join(ROOT, "docs", "outcome-event.schema.json")) as f:
            self.schema = json.load(f)
        self.seen = []

    def drain(self):
        while True:
            got = self.sqs.receive_message(QueueUrl=self.url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
            msgs = got.get("Messages", [])
            if not msgs:
                return
            for m in msgs:
                event = json.loads(m["Body"])
                jsonschema.validate(event, self.schema)  # a break of the schema fails the step
                self.seen.append(event)
                self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=m["ReceiptHandle"])

    def of(self, order_id):
        self.drain()
        return [(e["detail-type"], e["detail"]) for e in self.seen if e["detail"]["order_id"] == order_id]

    def wait(self, detail_type, order_id, timeout=60):
        def found():
            return [d for t, d in self.of(order_id) if t == detail_type]
        return wait_for(f"{detail_type} for {order_id} on the outcome bus", found, timeout)[0]


class PartnerRelay:
    """Stripe's event destination for Amazon EventBridge: stripe-sim posts each event in its
    EventBridge envelope here, and this puts it on the partner event source as Stripe does
    (PutPartnerEvents), so it reaches the stack's partner bus, its rule and the events function."""

    def __init__(self, stack, source):
        events = stack.client("events")
        self.forwarded = []
        relay = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                envelope = json.loads(self.rfile.read(int(self.headers["content-length"])))
                answer = events.put_partner_events(Entries=[{
                    "Source": source,
                    "DetailType": envelope["detail-type"],
                    "Detail": json.dumps(envelope["detail"]),
                }])
                ok = answer.get("FailedEntryCount", 1) == 0
                if ok:
                    relay.forwarded.append(envelope["detail"])
                self.send_response(200 if ok else 500)
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def denied(fn):
    """The error code of fn() if the emulator's IAM refused it, None if it was allowed (a
    conditional failure or a missing item means it got past IAM)."""
    try:
        fn()
    except ClientError as e:
        code = e.response["Error"]["Code"]
        if code in ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation"):
            return code
        return None
    return None


def main():
    state_path, chargectl, work = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(work, exist_ok=True)
    with open(state_path) as f:
        state = json.load(f)
    stack = Stack(state)
    sim = Sim(state["stripe_url"], state["stripe_key"])
    table = stack.out["TableName"]
    ms_log = os.path.join(os.path.dirname(state_path), "ministack.log")
    sim.clock_now()

    begin("subscribe to the outcome bus (a rule and a queue, as an order service does)")
    outcomes = Outcomes(stack)
    check(True, f"rule on {stack.out['OutcomeBusName']} -> {outcomes.url}")

    # ---- 1. An order, end to end ----------------------------------------------------------------
    order = {"amount": 1250, "currency": "usd", "customer_id": "cus_deploy", "payment_method": "pm_card_visa"}
    begin("a signed order from the order service's role (CheckoutCallerRoleNames): 202")
    code, body = stack.api("POST", "/orders/ord-dl-1/charge", order, who="order_service")
    check(code == 202 and body["status"] in ("pending", "succeeded"), f"202 pending: {code} {body}")
    op1 = body["operation_id"]

    begin("the SQS mapping runs charge, stripe-sim charges once, GET says succeeded")
    got = stack.wait_status("ord-dl-1 succeeded", "/orders/ord-dl-1/charge", "succeeded", 60)
    pis = sim.intents_of(op1)
    check(len(pis) == 1 and pis[0]["status"] == "succeeded" and pis[0]["idempotency_key"] == f"payment-op:{op1}",
          f"exactly one PaymentIntent at Stripe, with the operation's key: {pis}")
    check(got["operation_id"] == op1, "GET names the same operation")

    begin("the stream mapping runs notify: ChargeSucceeded on the outcome bus, held to the schema")
    ev = outcomes.wait("ChargeSucceeded", "ord-dl-1")
    check(ev["operation_id"] == op1 and ev["payment_intent"] == pis[0]["id"] and ev["amount"] == 1250,
          f"the event names the operation, its intent and amount: {ev}")

    begin("the same order sent again (a client retry): the same operation, still one charge")
    code, again = stack.api("POST", "/orders/ord-dl-1/charge", order, who="order_service")
    check(code in (200, 202) and again["operation_id"] == op1, f"{code} {again}")
    check(len(sim.intents_of(op1)) == 1, "one PaymentIntent")

    # ---- 2. Who may call ------------------------------------------------------------------------
    begin("refusals at the door: unsigned, a role without the grant, another caller's order")
    code, _ = stack.api("POST", "/orders/ord-dl-x/charge", order)
    check(code == 403, f"unsigned: 403 ({code})")
    code, _ = stack.api("POST", "/orders/ord-dl-x/charge", order, who="ungranted")
    check(code == 403, f"a role without CheckoutInvokePolicy: 403 ({code})")
    code, _ = stack.api("GET", "/orders/ord-dl-x/charge", who="order_service")
    check(code == 404, f"neither wrote anything: ord-dl-x does not exist ({code})")
    code, _ = stack.api("GET", "/orders/ord-dl-1/charge", who="other_service")
    check(code == 404, f"another caller's GET of ord-dl-1: 404 ({code})")
    code, _ = stack.api("POST", "/orders/ord-dl-1/refunds/rf-other", {"amount": 100}, who="other_service")
    check(code == 404, f"another caller's refund of ord-dl-1: 404 ({code})")
    code, body = stack.api("POST", "/orders/ord-dl-2/charge", order, who="other_service")
    check(code == 202, f"twin: the other caller's own order is accepted ({code} {body})")

    begin("a role granted charges only (CheckoutCallerRoleNames, not RefundCallerRoleNames)")
    code, body = stack.api("POST", "/orders/ord-dl-co/charge", order, who="charges_only")
    check(code == 202, f"its own order is accepted ({code} {body})")
    for path, req in [("/orders/ord-dl-co/refunds/rf-co", {"amount": 100}),
                      ("/orders/ord-dl-co/capture", {"amount": 100}), ("/orders/ord-dl-co/cancel", {})]:
        code, _ = stack.api("POST", path, req, who="charges_only")
        check(code == 403, f"POST {path}: 403 without RefundInvokePolicy ({code})")
    code, body = stack.api("GET", "/orders/ord-dl-co/charge", who="charges_only")
    check(code == 200 and body["operation_id"], f"twin: its read of the order is granted ({code} {body})")
    code, _ = stack.api("GET", "/orders/ord-dl-co/refunds/rf-co", who="charges_only")
    check(code == 404, f"the refused refund recorded nothing ({code})")

    # ---- 3. A refund ----------------------------------------------------------------------------
    begin("a refund of 500 of ord-dl-1: 202, refunded once at stripe-sim, RefundSucceeded")
    code, body = stack.api("POST", "/orders/ord-dl-1/refunds/rf-1", {"amount": 500}, who="order_service")
    check(code == 202, f"202 ({code} {body})")
    stack.wait_status("rf-1 succeeded", "/orders/ord-dl-1/refunds/rf-1", "succeeded", 60)
    refunds = [r for r in sim.ledger()["refunds"] if r.get("payment_intent") == pis[0]["id"]]
    check(len(refunds) == 1 and refunds[0]["amount"] == 500, f"one refund of 500 at Stripe: {refunds}")
    outcomes.wait("RefundSucceeded", "ord-dl-1")

    # ---- 4. Authorize, capture, cancel refused ---------------------------------------------------
    begin("an authorization (capture manual): authorized, ChargeAuthorized published")
    code, body = stack.api("POST", "/orders/ord-dl-3/charge", {**order, "capture": "manual"}, who="order_service")
    check(code == 202, f"202 ({code} {body})")
    op3 = body["operation_id"]
    stack.wait_status("ord-dl-3 authorized", "/orders/ord-dl-3/charge", "authorized", 60)
    check([p["status"] for p in sim.intents_of(op3)] == ["requires_capture"], "stripe-sim holds it requires_capture")
    ev = outcomes.wait("ChargeAuthorized", "ord-dl-3")
    check(ev["status"] == "authorized", f"ChargeAuthorized: {ev}")

    begin("capture 1000 of the 1250: 202, captured once, ChargeCaptured; a cancel after it refused")
    code, body = stack.api("POST", "/orders/ord-dl-3/capture", {"amount": 1000}, who="order_service")
    check(code == 202, f"202 ({code} {body})")
    stack.wait_status("the capture succeeded", "/orders/ord-dl-3/capture", "succeeded", 60)
    pi3 = sim.intents_of(op3)
    check(len(pi3) == 1 and pi3[0]["status"] == "succeeded", f"captured at Stripe: {pi3}")
    ev = outcomes.wait("ChargeCaptured", "ord-dl-3")
    check(ev.get("amount_captured", 1000) == 1000, f"ChargeCaptured: {ev}")
    code, body = stack.api("POST", "/orders/ord-dl-3/cancel", {}, who="order_service")
    check(code == 409, f"cancel after the capture: 409 ({code} {body})")
    code, body = stack.api("GET", "/orders/ord-dl-3/cancel", who="order_service")
    check(code == 404, f"the refused cancel recorded nothing: GET /cancel 404 ({code} {body})")

    # ---- 5. A lost answer, left to the reconciler's own schedule ---------------------------------
    begin("ord-dl-4 while stripe-sim loses its answer (dropped, then a 500 to the retry): recorded unknown, charged once at Stripe")
    sim.lose_next_answer()
    code, body = stack.api("POST", "/orders/ord-dl-4/charge", order, who="order_service")
    check(code == 202, f"202 ({code})")
    op4 = body["operation_id"]
    stack.wait_status("ord-dl-4 unknown", "/orders/ord-dl-4/charge", "unknown", 60)
    check([p["status"] for p in sim.intents_of(op4)] == ["succeeded"], "Stripe made it (only the answer was lost)")
    unknown_at = time.time()

    # ---- 6. Stripe's events in: the partner bus, then the signed webhook route -------------------
    begin("Stripe's events through the partner event bus settle an unknown order (ord-dl-5)")
    relay = PartnerRelay(stack, state["event_source"])
    # Stripe's events are held (stripe-sim's clock stands still) until the charge function has
    # recorded the order unknown, then released: an event that came while the charge function
    # held the lease would be deferred to Lambda's retries, minutes apart on AWS.
    held = {"delayed": 1.0, "delay_ms": 2000}
    sim.post("/_sim/webhooks", {"url": relay.url, "mode": "eventbridge", "event_source": state["event_source"],
                                "faults": held})
    sim.lose_next_answer()
    code, body = stack.api("POST", "/orders/ord-dl-5/charge", order, who="order_service")
    op5 = body["operation_id"]
    stack.wait_status("ord-dl-5 unknown", "/orders/ord-dl-5/charge", "unknown", 60)
    check(not relay.forwarded, "no event yet while the charge function had it")
    sim.post("/_sim/clock", {"advance_secs": 5})
    stack.wait_status("ord-dl-5 settled by the event", "/orders/ord-dl-5/charge", "succeeded", 90)
    pi5 = sim.intents_of(op5)
    check(len(pi5) == 1, f"one PaymentIntent: {pi5}")
    check(any(e["data"]["object"].get("id") == pi5[0]["id"] for e in relay.forwarded),
          f"its event went through the partner bus ({len(relay.forwarded)} forwarded)")
    check(not any(e["data"]["object"].get("id") == sim.intents_of(op4)[0]["id"] for e in relay.forwarded),
          "ord-dl-4's intent had no event (it is the reconciler's)")
    sim.post("/_sim/webhooks", {})

    begin("Stripe's signed webhook to POST /stripe/webhook settles an unknown order (ord-dl-6)")
    sim.clock_now()
    hook = f"{stack.ep}/_aws/execute-api/{stack.api_id}/stripe/webhook"
    sim.post("/_sim/webhooks", {"url": hook, "secret": state["webhook_secret"], "faults": held})
    sim.lose_next_answer()
    code, body = stack.api("POST", "/orders/ord-dl-6/charge", order, who="order_service")
    op6 = body["operation_id"]
    stack.wait_status("ord-dl-6 unknown", "/orders/ord-dl-6/charge", "unknown", 60)
    sim.post("/_sim/clock", {"advance_secs": 5})
    stack.wait_status("ord-dl-6 settled by the webhook", "/orders/ord-dl-6/charge", "succeeded", 90)
    check(sim.get("/_sim/webhooks")["counts"]["delivered"] >= 1, "stripe-sim's delivery was accepted")
    check(len(sim.intents_of(op6)) == 1, "one PaymentIntent")
    sim.post("/_sim/webhooks", {})

    begin("a forged webhook (signed with another secret): refused, nothing changes")
    payload = json.dumps({"id": "evt_forged", "type": "payment_intent.succeeded",
                          "data": {"object": {"id": "pi_forged", "object": "payment_intent",
                                              "metadata": {"order_id": "ord-dl-4", "operation_id": op4}}}})
    ts = int(time.time())
    sig = hmac.new(b"whsec_not_the_secret", f"{ts}.{payload}".encode(), hashlib.sha256).hexdigest()
    code, _ = stack.api("POST", "/stripe/webhook", payload, raw=True, headers={"stripe-signature": f"t={ts},v1={sig}"})
    check(400 <= code < 500, f"refused: {code}")
    code, b4 = stack.api("GET", "/orders/ord-dl-4/charge", who="order_service")
    check(b4["status"] == "unknown", f"ord-dl-4 still unknown: {b4['status']}")

    # ---- 7. chargectl with only OperatorPolicy's grants ------------------------------------------
    operator = stack.as_role("operator").get_credentials().get_frozen_credentials()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({
        "AWS_ACCESS_KEY_ID": operator.access_key, "AWS_SECRET_ACCESS_KEY": operator.secret_key,
        "AWS_SESSION_TOKEN": operator.token, "AWS_REGION": stack.region,
        "AWS_ENDPOINT_URL": stack.ep, "TABLE_NAME": table, "QUEUE_URL": stack.out["QueueUrl"],
        "STRIPE_SECRET_ARN": state["parameters"]["StripeSecretArn"], "STRIPE_API_BASE": state["stripe_url"],
    })

    def chargectl_as(environ, *args):
        p = subprocess.run([chargectl, *args], env=environ, capture_output=True, text=True, timeout=180)
        with open(os.path.join(work, "chargectl.log"), "a") as f:
            f.write(f"$ chargectl {' '.join(args)}\n-> {p.returncode}\n{p.stdout}\n{p.stderr}\n")
        return p

    def ctl(*args, ok=True):
        p = chargectl_as(env, *args)
        if ok and p.returncode != 0:
            raise Failed(f"chargectl {' '.join(args)} exited {p.returncode}: {p.stderr.strip()[-400:]}")
        return p

    begin("chargectl as the operator role: two more lost answers (ord-dl-7, ord-dl-8) listed by unknowns")
    ops = {}
    for o in ["ord-dl-7", "ord-dl-8"]:
        sim.lose_next_answer()
        code, body = stack.api("POST", f"/orders/{o}/charge", order, who="order_service")
        ops[o] = body["operation_id"]
        stack.wait_status(f"{o} unknown", f"/orders/{o}/charge", "unknown", 60)
    listed_ids = {json.loads(line)["operation_id"] for line in ctl("unknowns", "--json").stdout.splitlines() if line.strip()}
    check({ops["ord-dl-7"], ops["ord-dl-8"], op4} <= listed_ids, f"unknowns lists them: {sorted(listed_ids)}")

    begin("chargectl show ord-dl-1: the charge with its refund")
    shown = json.loads(ctl("show", "ord-dl-1", "--json").stdout)
    check(json.dumps(shown).count("rf-1") >= 1 and op1 in json.dumps(shown), "the record and its refund")

    begin("chargectl resolve --succeeded (checked at Stripe): ord-dl-7 settled, the operator named")
    pi7 = sim.intents_of(ops["ord-dl-7"])[0]["id"]
    ctl("resolve", ops["ord-dl-7"], "--succeeded", pi7, "--note", "retrieved at Stripe: succeeded")
    shown = json.loads(ctl("show", "ord-dl-7", "--json").stdout)
    text = json.dumps(shown)
    check('"succeeded"' in text and "assumed-role/charge-once-operator" in text,
          "succeeded, with the operator role's identity in its history")
    outcomes.wait("ChargeSucceeded", "ord-dl-7")

    begin("chargectl redrive: ord-dl-8 back on the queue, settled by the charge function")
    ctl("redrive", ops["ord-dl-8"], "--note", "answer lost; same key")
    stack.wait_status("ord-dl-8 succeeded", "/orders/ord-dl-8/charge", "succeeded", 60)
    check(len(sim.intents_of(ops["ord-dl-8"])) == 1, "still one PaymentIntent (same key)")

    begin("refusal twin: chargectl unknowns as a role without OperatorPolicy fails, nothing read")
    ungranted = stack.as_role("ungranted").get_credentials().get_frozen_credentials()
    env_ungranted = {**env, "AWS_ACCESS_KEY_ID": ungranted.access_key,
                     "AWS_SECRET_ACCESS_KEY": ungranted.secret_key, "AWS_SESSION_TOKEN": ungranted.token}
    p = chargectl_as(env_ungranted, "unknowns", "--json")
    check(p.returncode != 0 and "AccessDenied" in (p.stderr + p.stdout), f"exit {p.returncode}: {p.stderr.strip()[-200:]}")

    # ---- 8. A declined order charged again with another card -------------------------------------
    # While ord-dl-4 waits for the reconciler's schedule (step 9): this adds only its own seconds.
    def attempts(body):
        return [(a["attempt"], a["status"], a["payment_method"]) for a in body["attempts"]]

    def ddb_item(order_id, sk):
        return stack.client("dynamodb").get_item(
            TableName=table, Key={"pk": {"S": f"ORDER#{order_id}"}, "sk": {"S": sk}}).get("Item")

    declined = {**order, "payment_method": "pm_card_chargeDeclined"}
    begin("a declined card (ord-dl-r1): failed, its intent canceled at Stripe, ChargeFailed")
    code, body = stack.api("POST", "/orders/ord-dl-r1/charge", declined, who="order_service")
    check(code == 202, f"202 ({code} {body})")
    r1a = body["operation_id"]
    got = stack.wait_status("ord-dl-r1 failed", "/orders/ord-dl-r1/charge", "failed", 60)
    check(got["attempt"] == 1 and got["paid_attempt"] is None
          and attempts(got) == [(1, "failed", "pm_card_chargeDeclined")], f"one failed attempt: {got}")
    held = sim.intents_of_order("ord-dl-r1")
    check(list(held) == [r1a] and held[r1a]["status"] == "canceled",
          f"Stripe holds its one intent canceled (nobody can pay it): {[(p['id'], p['status']) for p in held.values()]}")
    ev = outcomes.wait("ChargeFailed", "ord-dl-r1")
    check(ev["operation_id"] == r1a and "attempt" not in ev, f"ChargeFailed of the first attempt: {ev}")

    begin("the same order with another card (pm_card_visa): 202 attempt 2, succeeded, paid by attempt 2")
    code, body = stack.api("POST", "/orders/ord-dl-r1/charge", order, who="order_service")
    check(code == 202 and body.get("attempt") == 2 and body["operation_id"] != r1a,
          f"202, attempt 2, its own operation ({code} {body})")
    r1b = body["operation_id"]
    got = stack.wait_attempt("ord-dl-r1", 2, "succeeded")
    check(got["operation_id"] == r1b and got["paid_attempt"] == 2
          and attempts(got) == [(1, "failed", "pm_card_chargeDeclined"), (2, "succeeded", "pm_card_visa")],
          f"GET: attempt 2 of 2, the first failed, paid by attempt 2: {attempts(got)}, paid {got['paid_attempt']}")
    held = sim.intents_of_order("ord-dl-r1")
    check(sorted(held) == sorted([r1a, r1b]) and held[r1a]["status"] == "canceled"
          and held[r1b]["status"] == "succeeded" and held[r1b]["metadata"].get("attempt") == "2",
          f"Stripe: the first intent canceled, the second succeeded (metadata attempt 2): "
          f"{[(p['id'], p['status'], p['metadata'].get('attempt')) for p in held.values()]}")
    check(held[r1b]["id"] == got["payment_intent"], "GET names the succeeded intent")
    head = ddb_item("ord-dl-r1", "charge")
    check(head["latest_attempt"] == {"N": "2"} and ddb_item("ord-dl-r1", "charge#2") is not None,
          "the table: the head names latest_attempt 2, charge#2 beside it")
    ev = outcomes.wait("ChargeSucceeded", "ord-dl-r1")
    check(ev["operation_id"] == r1b and ev.get("attempt") == 2, f"ChargeSucceeded names attempt 2: {ev}")

    begin("a third card once it is paid: 409 paid, nothing written; the declined request replayed: attempt 2")
    code, body = stack.api("POST", "/orders/ord-dl-r1/charge", {**order, "payment_method": "pm_card_amex"},
                           who="order_service")
    check(code == 409 and body["error"]["code"] == "paid" and "attempt 2" in body["error"]["message"],
          f"409 paid ({code} {body})")
    check(ddb_item("ord-dl-r1", "charge#3") is None and ddb_item("ord-dl-r1", "charge")["latest_attempt"] == {"N": "2"},
          "no charge#3, the head still names attempt 2")
    code, body = stack.api("POST", "/orders/ord-dl-r1/charge", declined, who="order_service")
    check(code == 200 and body["operation_id"] == r1b, f"the first (declined) request again: the paid attempt, 200 ({code})")

    begin("ord-dl-r2 declined twice (two cards), then two retries at once with two cards: one attempt 3")
    code, body = stack.api("POST", "/orders/ord-dl-r2/charge", declined, who="order_service")
    check(code == 202, f"202 ({code} {body})")
    stack.wait_attempt("ord-dl-r2", 1, "failed")
    code, body = stack.api("POST", "/orders/ord-dl-r2/charge",
                           {**order, "payment_method": "pm_card_chargeDeclinedInsufficientFunds"}, who="order_service")
    check(code == 202 and body.get("attempt") == 2, f"attempt 2: 202 ({code} {body})")
    stack.wait_attempt("ord-dl-r2", 2, "failed")
    cards = ["pm_card_mastercard", "pm_card_amex"]
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda pm: stack.api("POST", "/orders/ord-dl-r2/charge",
                                                     {**order, "payment_method": pm}, who="order_service"), cards))
    won = [(pm, b) for pm, (c, b) in zip(cards, answers) if c == 202]
    lost = [(c, b) for c, b in answers if c != 202]
    check(len(won) == 1 and won[0][1].get("attempt") == 3, f"one 202, attempt 3 (the ConditionCheck on charge#2): {answers}")
    # The loser sees attempt 3 in flight, or already paid if the charge function was that quick.
    check(lost[0][0] == 409 and lost[0][1]["error"]["code"] in ("attempt_in_flight", "paid"),
          f"the other 409 {lost[0][1]['error']['code']}")
    card, r2c = won[0][0], won[0][1]["operation_id"]
    got = stack.wait_attempt("ord-dl-r2", 3, "succeeded")
    check(attempts(got) == [(1, "failed", "pm_card_chargeDeclined"),
                            (2, "failed", "pm_card_chargeDeclinedInsufficientFunds"), (3, "succeeded", card)]
          and got["paid_attempt"] == 3, f"GET: three attempts, paid by 3: {attempts(got)}")
    held = sim.intents_of_order("ord-dl-r2")
    check(len(held) == 3 and [p["status"] for p in held.values()].count("succeeded") == 1
          and held[r2c]["status"] == "succeeded"
          and all(p["status"] == "canceled" for o, p in held.items() if o != r2c),
          f"Stripe: one succeeded intent (attempt 3's), both declined ones canceled: "
          f"{[(p['metadata'].get('attempt'), p['status']) for p in held.values()]}")
    check(len(sim.intents_of_order("ord-dl-r1")) == 2,
          "ord-dl-r1's refused third card queued nothing: still two intents at Stripe")

    begin("chargectl show ord-dl-r2 --json as the operator: the three attempts, paid by attempt 3")
    shown = json.loads(ctl("show", "ord-dl-r2", "--json").stdout)
    check([(a["attempt"], a["status"]) for a in shown.get("attempts", [])]
          == [(1, "failed"), (2, "failed"), (3, "succeeded")] and shown.get("paid_attempt") == 3,
          f"attempts and paid_attempt: {shown.get('attempts')}, {shown.get('paid_attempt')}")

    # ---- 9. The reconciler, fired by its own schedule --------------------------------------------
    begin("the reconciler's scheduled tick settles ord-dl-4 (nobody invokes it; the test waits)")
    stack.wait_status("ord-dl-4 settled by the reconciler", "/orders/ord-dl-4/charge", "succeeded", 330, every=3)
    check(len(sim.intents_of(op4)) == 1, "never created again: one PaymentIntent")
    with open(ms_log, errors="replace") as f:
        log = f.read()
    check(stack.res["ReconcilerFunction"] in log, "the emulator's log shows the reconciler function ran")
    print(f"scenario:          ({time.time() - unknown_at:.0f} s after it was recorded unknown)", file=sys.stderr)

    # ---- 10. The audit ---------------------------------------------------------------------------
    begin("the audit function, invoked as its schedule does: complete, every object matched, no drift")
    hour = time.strftime("%Y-%m-%dT%H:00:00Z", time.gmtime(time.time() + 3600))
    with open(os.path.join(ROOT, "events", "audit-scheduled.json")) as f:
        event = json.load(f)
    event["time"] = hour
    lam = stack.client("lambda")
    r = lam.invoke(FunctionName=stack.res["AuditFunction"], Payload=json.dumps(event).encode())
    report = json.loads(r["Payload"].read())
    check("FunctionError" not in r and report.get("complete") and report.get("drift") == 0,
          f"complete, drift 0: {str(report)[:400]}")
    check(report.get("intents", 0) >= 8, f"it read the scenario's intents: {report.get('intents')}")

    begin("chargectl audit --since 1h, audit --show and summary, as the operator")
    audit = json.loads(ctl("audit", "--since", "1h", "--json").stdout)
    check(audit["complete"] and audit["drift"] == 0 and audit["ran_by"].startswith("arn:aws:sts::")
          and "charge-once-operator" in audit["ran_by"], f"complete, no drift, run by the operator: {str(audit)[:300]}")
    # Both runs kept their reports (an audit whose report cannot be kept still answers, and says
    # so only in its log and a metric): the operator's window, and the function's.
    text = ctl("audit", "--show", "--last", "5", "--json").stdout
    try:
        kept = json.loads(text)
        kept = kept if isinstance(kept, list) else [kept]
    except ValueError:
        kept = [json.loads(line) for line in text.splitlines() if line.strip()]
    by = [r.get("ran_by", "") for r in kept]
    check(any("charge-once-operator" in b for b in by), f"the operator's report is kept: {by}")
    check(any(r.get("ran_by") == "schedule" and r.get("window_from") == report.get("window_from") for r in kept),
          f"the audit function's report is kept (ran by the schedule, its window): {by}")
    dlqs = [stack.out["DeadLetterQueueUrl"], stack.out["NotifyDeadLetterQueueUrl"], stack.out["StripeEventsDeadLetterQueueUrl"]]
    summary = json.loads(ctl("summary", *sum((["--dead-letter-queue", q] for q in dlqs), []), "--json").stdout)
    check(all(summary["dead_letter_queues"][q] == 0 for q in dlqs), f"every DLQ empty: {summary['dead_letter_queues']}")

    # ---- 11. Each function's role: a write it must not make refused, its genuine twin allowed --
    begin("each function's role: the write it must not make is refused, its own write allowed")
    lam = stack.client("lambda")
    roles = {}
    for name in ["CheckoutFunction", "ChargeFunction", "ReconcilerFunction", "NotifyFunction", "AuditFunction", "WebhookFunction"]:
        roles[name] = stack.assume(lam.get_function_configuration(FunctionName=stack.res[name])["Role"], "scenario")
    key = {"pk": {"S": "ORDER#ord-dl-iam"}, "sk": {"S": "charge"}}
    never = {"ConditionExpression": "attribute_not_exists(pk)"}
    absent = {"ConditionExpression": "attribute_exists(pk)"}

    def ddb(fn_name):
        return stack.client("dynamodb", roles[fn_name])

    def put(fn_name, **kw):
        return lambda: ddb(fn_name).put_item(TableName=table, Item={**key, "status": {"S": "succeeded"}}, **{**absent, **kw})

    def update(fn_name):
        return lambda: ddb(fn_name).update_item(TableName=table, Key=key, UpdateExpression="SET #s = :s",
                                                ExpressionAttributeNames={"#s": "status"},
                                                ExpressionAttributeValues={":s": {"S": "succeeded"}}, ReturnValues="ALL_NEW", **absent)

    def reserve(fn_name, in_transaction):
        """A refund's reservation on a charge: refund_reserved, as checkout's ReserveRefund names."""
        update = {"TableName": table, "Key": key, "UpdateExpression": "SET #r = :r",
                  "ExpressionAttributeNames": {"#r": "refund_reserved"},
                  "ExpressionAttributeValues": {":r": {"N": "1"}}, **absent}
        if in_transaction:
            return lambda: ddb(fn_name).transact_write_items(TransactItems=[{"Update": update}])
        return lambda: ddb(fn_name).update_item(**update)

    def start_attempt(fn_name, in_transaction):
        """A declined order's next attempt on its head (StartAttempt): latest_attempt 2 -> 3, as
        create_attempt writes it; in its transaction, beside the new attempt's Put and the check
        of the attempt before it (CheckLatestAttempt). The head is absent: the transaction is
        canceled on its condition, past IAM, and writes nothing."""
        head = {"TableName": table, "Key": key, "UpdateExpression": "SET #l = :l", "ConditionExpression": "#l = :n",
                "ExpressionAttributeNames": {"#l": "latest_attempt"},
                "ExpressionAttributeValues": {":l": {"N": "3"}, ":n": {"N": "2"}}}
        if not in_transaction:
            return lambda: ddb(fn_name).update_item(**head)
        new = {"TableName": table, "Item": {**key, "sk": {"S": "charge#3"}, "status": {"S": "pending"}},
               "ConditionExpression": "attribute_not_exists(pk)"}
        before = {"TableName": table, "Key": {**key, "sk": {"S": "charge#2"}}, "ConditionExpression": "#s = :f",
                  "ExpressionAttributeNames": {"#s": "status"}, "ExpressionAttributeValues": {":f": {"S": "failed"}}}
        return lambda: ddb(fn_name).transact_write_items(
            TransactItems=[{"Put": new}, {"Update": head}, {"ConditionCheck": before}])

    def delete(fn_name):
        return lambda: ddb(fn_name).delete_item(TableName=table, Key=key, **absent)

    def publish(fn_name):
        return lambda: stack.client("events", roles[fn_name]).put_events(Entries=[{
            "Source": "charge-once.iam-probe", "DetailType": "ChargeSucceeded", "EventBusName": stack.out["OutcomeBusName"],
            "Detail": json.dumps({"probe": "iam"})}])

    def send(fn_name, queue):
        return lambda: stack.client("sqs", roles[fn_name]).send_message(
            QueueUrl=queue, MessageBody="{}", MessageGroupId="iam-probe", MessageDeduplicationId=str(time.time()))

    cases = [
        # (role, what it must not do, its genuine twin)
        ("CheckoutFunction", "DeleteItem", delete("CheckoutFunction"), put("CheckoutFunction")),
        ("CheckoutFunction", "a reservation's UpdateItem outside a transaction", reserve("CheckoutFunction", False),
         reserve("CheckoutFunction", True)),
        ("CheckoutFunction", "the attempt's head update (latest_attempt) outside its transaction",
         start_attempt("CheckoutFunction", False), start_attempt("CheckoutFunction", True)),
        ("ChargeFunction", "PutItem (it never creates an operation)", put("ChargeFunction"), update("ChargeFunction")),
        ("ChargeFunction", "PutEvents on the outcome bus", publish("ChargeFunction"), send("ChargeFunction", stack.out["DeadLetterQueueUrl"])),
        ("ReconcilerFunction", "PutItem", put("ReconcilerFunction"), update("ReconcilerFunction")),
        ("NotifyFunction", "UpdateItem on the table", update("NotifyFunction"), publish("NotifyFunction")),
        ("AuditFunction", "UpdateItem on the table", update("AuditFunction"),
         lambda: ddb("AuditFunction").get_item(TableName=table, Key=key)),
        ("WebhookFunction", "PutItem on the operations table", put("WebhookFunction"), update("WebhookFunction")),
        ("WebhookFunction", "SendMessage to the charge queue", send("WebhookFunction", stack.out["QueueUrl"]),
         lambda: ddb("WebhookFunction").get_item(TableName=table, Key=key)),
    ]
    for role, what, forbidden, twin in cases:
        code = denied(forbidden)
        check(code is not None, f"{role}: {what}: refused ({code})")
        check(denied(twin) is None, f"{role}: its twin allowed")



if __name__ == "__main__":
    run(main, "scenario")
