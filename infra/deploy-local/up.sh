#!/usr/bin/env bash
# Deploys the stack as a whole on an AWS emulator with IAM enforced:
#   - MiniStack (PyPI `ministack`, pinned in requirements.txt, installed into .venv-ministack on
#     first use) on a free loopback port with AUTH=true (every call is evaluated against the
#     caller's IAM policies) and LAMBDA_EXECUTOR=local (provided.* bootstraps run as local
#     processes, each with its execution role's credentials);
#   - stripe-sim as Stripe, on a free loopback port;
#   - the six functions built from the workspace for this machine's architecture and zipped as
#     `bootstrap` (what cargo-lambda zips; the emulator runs them here, so not arm64);
#   - template.yaml as it ships, through CloudFormation with the SAM transform (deploy.py).
# Writes $DEPLOY_LOCAL_DIR/state.json (the stack's outputs, roles, endpoints), the PIDs to
# $DEPLOY_LOCAL_DIR/pids and the logs beside them. infra/deploy-local/down.sh stops exactly those.
#
#   infra/deploy-local/up.sh [--param Key=Value ...]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
dir="${DEPLOY_LOCAL_DIR:-$root/target/deploy-local}"
mkdir -p "$dir"
pids="$dir/pids"
t0=$SECONDS

if [ -s "$pids" ]; then
  while read -r _ pid; do
    if kill -0 "$pid" 2>/dev/null; then
      echo "deploy-local: a deployed stack is already running ($pids); stop it with infra/deploy-local/down.sh" >&2
      exit 1
    fi
  done <"$pids"
  rm -f "$pids"
fi

venv="${CHARGE_ONCE_MINISTACK_VENV:-$root/.venv-ministack}"
infra/local/pyenv.sh "$venv" infra/deploy-local/requirements.txt .requirements.sha256 deploy-local
py="$venv/bin/python"
free_port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ms_port="${MINISTACK_PORT:-$(free_port)}"
sim_port="${STRIPE_SIM_PORT:-$(free_port)}"

echo "deploy-local: building the six functions, chargectl and stripe-sim" >&2
cargo build --bin checkout --bin charge --bin reconciler --bin events --bin notify --bin audit \
  --bin chargectl --bin stripe-sim
mkdir -p "$dir/zips"
"$py" - "$root/target/debug" "$dir/zips" <<'PY'
import os, sys, zipfile
src, out = sys.argv[1], sys.argv[2]
for name in ["checkout", "charge", "reconciler", "notify", "audit", "events"]:
    info = zipfile.ZipInfo("bootstrap")
    info.external_attr = 0o100755 << 16  # an executable file, as Lambda wants bootstrap
    info.compress_type = zipfile.ZIP_DEFLATED
    with open(os.path.join(src, name), "rb") as f, zipfile.ZipFile(os.path.join(out, f"{name}.zip"), "w") as z:
        z.writestr(info, f.read(), compresslevel=1)
PY

started() { echo "$1 $2" >>"$pids"; }
fail() {
  echo "deploy-local: $1; its log ($2):" >&2
  tail -n 60 "$2" >&2 || true
  DEPLOY_LOCAL_DIR="$dir" infra/deploy-local/down.sh >&2
  exit 1
}

# stripe-sim's clock starts at this machine's time and stands still until told: the scenario
# sets it to now before a signed delivery (checked against this machine's clock) and moves it on
# to release the events it holds.
target/debug/stripe-sim --port "$sim_port" >"$dir/stripe-sim.log" 2>&1 &
started stripe-sim $!
sim_pid=$!

# The emulator in its own process group (setsid): down.sh stops it with the function processes
# it spawned. Functions inherit its environment: AWS_ENDPOINT_URL sends their SDK calls back to
# it; the execution role's credentials are set per function by the emulator.
(
  cd "$dir"
  exec setsid env AUTH=true LAMBDA_EXECUTOR=local IOT_MTLS_ENABLED=0 GATEWAY_PORT="$ms_port" \
    MINISTACK_HOST=127.0.0.1 AWS_ENDPOINT_URL="http://127.0.0.1:$ms_port" \
    AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1 \
    "$py" "$root/infra/deploy-local/ministack_run.py"
) >"$dir/ministack.log" 2>&1 &
started ministack-group $!
ms_pid=$!

ready=
for _ in $(seq 1 150); do
  kill -0 "$ms_pid" 2>/dev/null || fail "ministack exited" "$dir/ministack.log"
  kill -0 "$sim_pid" 2>/dev/null || fail "stripe-sim exited" "$dir/stripe-sim.log"
  if "$py" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$ms_port/_ministack/health', timeout=1)" 2>/dev/null \
    && grep -q "listening on" "$dir/stripe-sim.log"; then
    ready=1
    break
  fi
  sleep 0.2
done
[ -n "$ready" ] || fail "ministack or stripe-sim not ready after 30 s" "$dir/ministack.log"
echo "deploy-local: [$((SECONDS - t0)) s] ministack :$ms_port (AUTH=true), stripe-sim :$sim_port" >&2

"$py" infra/deploy-local/deploy.py "http://127.0.0.1:$ms_port" "http://127.0.0.1:$sim_port" \
  "$dir/zips" "$dir/state.json" "$@" || fail "the deploy failed" "$dir/ministack.log"
echo "deploy-local: [$((SECONDS - t0)) s] deployed; state in $dir/state.json" >&2
