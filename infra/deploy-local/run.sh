#!/usr/bin/env bash
# `make deploy-local`: the stack deployed whole on an AWS emulator with IAM enforced, then every
# step of a scenario over it asserted (docs/deploy.md, "Deploy it on your machine first"):
#   1. infra/deploy-local/up.sh: MiniStack (AUTH=true) and stripe-sim on free loopback ports, the
#      six functions built and zipped, template.yaml through CloudFormation with the SAM transform;
#      every emulator gap printed by name with its reason (gaps.json);
#   2. scenario.py: orders, a refund, an authorization and its capture, lost answers settled by
#      the reconciler's own schedule, by Stripe's events (partner bus and signed webhook) and by
#      chargectl with only OperatorPolicy's grants, declined orders charged again with other
#      cards (attempts), the audit, and the refusals;
#   3. jwt_scenario.py: a second stack with CheckoutAuth=JWT (tokens from the emulator's Cognito);
#   4. down.sh, unless KEEP=1 (then the stack stays up: target/deploy-local/state.json has its
#      endpoint and outputs; stop it with infra/deploy-local/down.sh).
# Exits non-zero naming the failed step, with each function's last log lines.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
export DEPLOY_LOCAL_DIR="${DEPLOY_LOCAL_DIR:-$root/target/deploy-local}"
t0=$SECONDS
rm -rf "$DEPLOY_LOCAL_DIR/work"

infra/deploy-local/up.sh
py="${CHARGE_ONCE_MINISTACK_VENV:-$root/.venv-ministack}/bin/python"
state="$DEPLOY_LOCAL_DIR/state.json"
finish() {
  rc=$?
  if [ "$rc" -ne 0 ] && [ -s "$state" ]; then
    echo "deploy-local: FAILED (exit $rc); what the functions logged last:" >&2
    "$py" infra/deploy-local/logs.py "$state" 40 >&2 || true
    for s in "$DEPLOY_LOCAL_DIR"/state-*.json; do [ -s "$s" ] && "$py" infra/deploy-local/logs.py "$s" 20 >&2 || true; done
    tail -n 40 "$DEPLOY_LOCAL_DIR/ministack.log" >&2 || true
  fi
  if [ "${KEEP:-0}" = 1 ]; then
    echo "deploy-local: KEEP=1: the stack stays up ($state); stop it with infra/deploy-local/down.sh" >&2
  else
    infra/deploy-local/down.sh
  fi
  exit "$rc"
}
trap finish EXIT

"$py" infra/deploy-local/scenario.py "$state" "$root/target/debug/chargectl" "$DEPLOY_LOCAL_DIR/work"
"$py" infra/deploy-local/jwt_scenario.py "$state" "$DEPLOY_LOCAL_DIR/zips"
echo "deploy-local: the deployed stack passed every step in $((SECONDS - t0)) s"
