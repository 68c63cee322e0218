#!/usr/bin/env bash
# The README's "Invoke the functions locally", run command by command (the same commands; files
# in a temporary directory instead of /tmp/charge*.json) against the local stack
# (infra/local/up.sh: moto, stripe-sim, `cargo lambda watch` on free ports, in a temporary
# directory), with every step's outcome asserted. CI runs it (.ci/run) so the README cannot rot.
#
# Exits non-zero, naming the step, when any outcome is wrong. Stops what it started — up.sh's
# PIDs and watch's process group, through down.sh — whether it passes or fails.
#
#   infra/local/walkthrough.sh
#
# WALKTHROUGH_KEEP=1 keeps the temporary directory (events, answers, logs) for a look afterwards.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"

work="$(mktemp -d "${TMPDIR:-/tmp}/walkthrough.XXXXXX")"
export LOCAL_STACK_DIR="$work"
step="start the local stack (infra/local/up.sh)"
t0=$SECONDS
ts=$SECONDS

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  infra/local/down.sh >/dev/null 2>&1 || true
  if [ "$rc" -ne 0 ]; then
    echo "walkthrough: FAILED at step: $step (exit $rc, after $((SECONDS - t0)) s)" >&2
    for log in "$work"/.local-watch.log "$work"/.local-stripe-sim.log; do
      [ -f "$log" ] && { echo "--- last lines of $log" >&2; tail -n 25 "$log" >&2; }
    done
  fi
  if [ "${WALKTHROUGH_KEEP:-}" = 1 ] || [ "$rc" -ne 0 ]; then
    echo "walkthrough: files kept in $work" >&2
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

begin() {
  echo "walkthrough: [$((SECONDS - t0))s] $*"
  step="$*"
  ts=$SECONDS
}
fail() {
  echo "walkthrough: step '$step': $*" >&2
  exit 1
}
# check FILE 'python expression over j (the JSON in FILE)' 'what it means'
check() {
  python3 - "$1" "$2" <<'PY' || fail "$3 — not so; $1 holds: $(head -c 1500 "$1")"
import json, sys
with open(sys.argv[1]) as f:
    text = f.read().strip()
j = json.loads(text) if text else None
sys.exit(0 if eval(sys.argv[2], {"j": j, "json": json}) else 1)
PY
}
# value FILE 'python expression' -> prints it
value() {
  python3 - "$1" "$2" <<'PY'
import json, sys
with open(sys.argv[1]) as f:
    j = json.load(f)
print(eval(sys.argv[2], {"j": j, "json": json}))
PY
}
# invoke FUNCTION EVENT_FILE OUT_FILE: `cargo lambda invoke`, its answer in OUT_FILE.
invoke() {
  timeout 900 cargo lambda invoke --invoke-address 127.0.0.1 --invoke-port "$LAMBDA_PORT" \
    "$1" --data-file "$2" >"$3" 2>"$3.err" \
    || fail "cargo lambda invoke $1 failed: $(cat "$3.err" "$3" | head -c 1500)"
}
# The checkout answer's body, decoded.
body() { value "$1" 'json.dumps(json.loads(j["body"]))' >"$1.body"; }

infra/local/up.sh >"$work/up.log" 2>&1 || { cat "$work/up.log" >&2; fail "up.sh failed"; }
# What the README has the user do after up.sh.
set -a
# shellcheck disable=SC1091
. "$work/.local-stack.env"
set +a
export PATH="$root/.venv-template/bin:$root/target/debug:$PATH"
echo "walkthrough: [$((SECONDS - t0))s] stack up: watch :$LAMBDA_PORT, stripe-sim $STRIPE_SIM_URL"

# --- 1. One order, charged exactly once ---------------------------------------------------------
begin "checkout events/checkout-valid.json answers 202 (first invoke: watch starts the prebuilt function)"
invoke checkout events/checkout-valid.json "$work/checkout.out"
check "$work/checkout.out" 'j["statusCode"] == 202' "checkout answers 202"
body "$work/checkout.out"
check "$work/checkout.out.body" 'j["status"] == "pending" and j["operation_id"]' "the answer names a pending operation"
op1="$(value "$work/checkout.out.body" 'j["operation_id"]')"
echo "walkthrough: [$((SECONDS - t0))s]   ord-1001 -> operation $op1 (invoke took $((SECONDS - ts)) s)"

begin "checkout events/checkout-mismatch.json answers 409"
invoke checkout events/checkout-mismatch.json "$work/mismatch.out"
check "$work/mismatch.out" 'j["statusCode"] == 409' "the same order with another amount is refused"

begin "chargectl dev sqs-event turns the queued message into the charge event"
chargectl dev sqs-event >"$work/charge.json" 2>"$work/charge.json.err" \
  || fail "chargectl dev sqs-event: $(cat "$work/charge.json.err")"
check "$work/charge.json" "len(j['Records']) == 1 and json.loads(j['Records'][0]['body'])['operation_id'] == '$op1'" \
  "one record, for the checkout's operation"
check "$work/charge.json" "all(k in j['Records'][0]['attributes'] for k in ('ApproximateReceiveCount', 'SentTimestamp', 'SequenceNumber', 'MessageGroupId', 'MessageDeduplicationId', 'ApproximateFirstReceiveTimestamp')) and j['Records'][0]['attributes']['MessageGroupId'] == 'ord-1001' and j['Records'][0]['eventSource'] == 'aws:sqs' and j['Records'][0]['eventSourceARN'].endswith('.fifo') and j['Records'][0]['receiptHandle']" \
  "the record has Lambda's FIFO shape"

begin "charge the event: no batchItemFailures"
invoke charge "$work/charge.json" "$work/charge.out"
check "$work/charge.out" 'not (j or {}).get("batchItemFailures")' "the charge function reports no failure"

begin "chargectl dev sqs-ack deletes the processed message"
chargectl dev sqs-ack --event "$work/charge.json" --response "$work/charge.out" >"$work/ack.out" \
  || fail "sqs-ack: $(cat "$work/ack.out")"
grep -q '^deleted 1 message' "$work/ack.out" || fail "expected one message deleted: $(cat "$work/ack.out")"

begin "the ledger at stripe-sim holds exactly one PaymentIntent, succeeded, with the operation's key"
curl -sf "$STRIPE_SIM_URL/_sim/ledger" >"$work/ledger1.json" || fail "GET /_sim/ledger"
check "$work/ledger1.json" "len(j['payment_intents']) == 1 and j['payment_intents'][0]['idempotency_key'] == 'payment-op:$op1' and j['payment_intents'][0]['status'] == 'succeeded'" \
  "one succeeded PaymentIntent for payment-op:$op1"
pi1="$(value "$work/ledger1.json" 'j["payment_intents"][0]["id"]')"

begin "a duplicate delivery of the same event: no failure, still one PaymentIntent"
invoke charge "$work/charge.json" "$work/charge-dup.out"
check "$work/charge-dup.out" 'not (j or {}).get("batchItemFailures")' "the duplicate is acknowledged"
curl -sf "$STRIPE_SIM_URL/_sim/ledger" >"$work/ledger2.json" || fail "GET /_sim/ledger"
check "$work/ledger2.json" 'len(j["payment_intents"]) == 1' "still exactly one PaymentIntent"

begin "a reconciler tick has nothing to do"
invoke reconciler events/reconciler-scheduled.json "$work/tick1.out"
check "$work/tick1.out" 'j["examined"] == 0 and j["redriven"] == 0 and j["send_failures"] == 0' "nothing unsettled"

begin "chargectl show ord-1001: succeeded, with the PaymentIntent of the ledger"
chargectl show ord-1001 --json >"$work/show1.json" || fail "chargectl show ord-1001"
check "$work/show1.json" "j['status'] == 'succeeded' and j['external_id'] == '$pi1'" "ord-1001 succeeded with $pi1"

# --- 2. A dropped Stripe response, recorded unknown, settled by the key's replay ----------------
begin "a second order: events/checkout-valid.json with ord-1002 (authorizer block kept as is)"
sed 's/ord-1001/ord-1002/g' events/checkout-valid.json >"$work/checkout-ord-1002.json"
grep -q ord-1001 "$work/checkout-ord-1002.json" && fail "ord-1001 still in the rewritten event"
curl -sf -X POST "$STRIPE_SIM_URL/_sim/faults" -d '{"script":["drop_after_commit"]}' >/dev/null \
  || fail "POST /_sim/faults"
invoke checkout "$work/checkout-ord-1002.json" "$work/checkout2.out"
check "$work/checkout2.out" 'j["statusCode"] == 202' "checkout answers 202"
body "$work/checkout2.out"
op2="$(value "$work/checkout2.out.body" 'j["operation_id"]')"

begin "charge ord-1002 while stripe-sim drops the response: acknowledged, recorded unknown"
chargectl dev sqs-event >"$work/charge2.json" 2>"$work/charge2.json.err" \
  || fail "chargectl dev sqs-event: $(cat "$work/charge2.json.err")"
check "$work/charge2.json" "[json.loads(r['body'])['operation_id'] for r in j['Records']] == ['$op2']" "one record, for ord-1002"
invoke charge "$work/charge2.json" "$work/charge2.out"
check "$work/charge2.out" 'not (j or {}).get("batchItemFailures")' "an unknown outcome is acknowledged (the unknown index drives it)"
chargectl dev sqs-ack --event "$work/charge2.json" --response "$work/charge2.out" >"$work/ack2.out" \
  || fail "sqs-ack: $(cat "$work/ack2.out")"
chargectl show ord-1002 --json >"$work/show2.json" || fail "chargectl show ord-1002"
check "$work/show2.json" 'j["status"] == "unknown" and j.get("external_id") is None' "ord-1002 is unknown"
curl -sf "$STRIPE_SIM_URL/_sim/ledger" >"$work/ledger3.json" || fail "GET /_sim/ledger"
check "$work/ledger3.json" "[p['idempotency_key'] for p in j['payment_intents']].count('payment-op:$op2') == 1" \
  "the PaymentIntent exists at Stripe although the answer was lost"

begin "chargectl unknowns lists ord-1002 as unknown"
chargectl unknowns --json >"$work/unknowns.jsonl" || fail "chargectl unknowns"
python3 - "$work/unknowns.jsonl" "$op2" <<'PY' || fail "ord-1002 not listed unknown: $(cat "$work/unknowns.jsonl")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
sys.exit(0 if [(l["operation_id"], l["status"]) for l in lines] == [(sys.argv[2], "unknown")] else 1)
PY

due_ms="$(value "$work/show2.json" 'j["next_due_at_ms"]')"
wait_s="$(python3 -c "import time; print(max(0, int($due_ms / 1000 - time.time()) + 1))")"
begin "wait ${wait_s} s until ord-1002 is due (the first backoff after unknown is 60 s)"
[ "$wait_s" -le 120 ] || fail "due in $wait_s s: more than the 60 s backoff"
sleep "$wait_s"

begin "a reconciler tick re-drives ord-1002 through the queue"
invoke reconciler events/reconciler-scheduled.json "$work/tick2.out"
check "$work/tick2.out" 'j["redriven"] == 1 and j["send_failures"] == 0' "one re-drive"

begin "charge the re-driven message: the same key replays the saved success"
chargectl dev sqs-event >"$work/charge3.json" 2>"$work/charge3.json.err" \
  || fail "chargectl dev sqs-event: $(cat "$work/charge3.json.err")"
check "$work/charge3.json" "[r['attributes']['MessageDeduplicationId'] for r in j['Records']] == ['$op2:1']" \
  "one record, the re-drive (dedup id operation_id:1)"
invoke charge "$work/charge3.json" "$work/charge3.out"
check "$work/charge3.out" 'not (j or {}).get("batchItemFailures")' "the charge function reports no failure"
chargectl dev sqs-ack --event "$work/charge3.json" --response "$work/charge3.out" >"$work/ack3.out" \
  || fail "sqs-ack: $(cat "$work/ack3.out")"

begin "chargectl show ord-1002: succeeded, one PaymentIntent per order in the ledger"
curl -sf "$STRIPE_SIM_URL/_sim/ledger" >"$work/ledger4.json" || fail "GET /_sim/ledger"
check "$work/ledger4.json" "sorted(p['idempotency_key'] for p in j['payment_intents']) == sorted(['payment-op:$op1', 'payment-op:$op2']) and all(p['status'] == 'succeeded' for p in j['payment_intents'])" \
  "exactly two PaymentIntents, one per operation, both succeeded"
pi2="$(value "$work/ledger4.json" "[p['id'] for p in j['payment_intents'] if p['idempotency_key'] == 'payment-op:$op2'][0]")"
chargectl show ord-1002 --json >"$work/show3.json" || fail "chargectl show ord-1002"
check "$work/show3.json" "j['status'] == 'succeeded' and j['external_id'] == '$pi2'" "ord-1002 succeeded with $pi2"
chargectl unknowns >"$work/unknowns2.out" 2>&1 || fail "chargectl unknowns"
grep -q "no unsettled operations" "$work/unknowns2.out" || fail "still unsettled: $(cat "$work/unknowns2.out")"

# --- 3. The static sample batch: a malformed record is reported, never dropped ------------------
begin "events/charge-sqs-batch.json: poison records are parked on the DLQ with their reason, none blocks"
invoke charge events/charge-sqs-batch.json "$work/sample.out"
check "$work/sample.out" 'not (j or {}).get("batchItemFailures")' \
  "all three are acknowledged: none can ever succeed, so none blocks its group"
chargectl --queue-url "$DEAD_LETTER_QUEUE_URL" dev sqs-event >"$work/dlq.json" 2>"$work/dlq.json.err" \
  || fail "chargectl dev sqs-event on the DLQ: $(cat "$work/dlq.json.err")"
check "$work/dlq.json" 'sorted(r["messageAttributes"]["reason"]["stringValue"] for r in j["Records"]) == ["no_such_operation", "no_such_operation", "unparseable"]' \
  "the DLQ holds the three with their reasons (one truncated JSON, two naming operations no checkout created)"

begin "stop the local stack (infra/local/down.sh)"
cp "$work/.local-stack.pids" "$work/started.pids"
infra/local/down.sh >/dev/null
while read -r _ pid; do
  if kill -0 "$pid" 2>/dev/null; then fail "process $pid still running after down.sh"; fi
done <"$work/started.pids"
echo "walkthrough: passed in $((SECONDS - t0)) s"
