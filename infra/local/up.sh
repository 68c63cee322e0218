#!/usr/bin/env bash
# Starts the local stack for invoking the functions by hand with cargo-lambda:
#   - builds what `cargo lambda watch` runs (`cargo build --bin checkout --bin charge --bin
#     reconciler --bin events --bin notify --bin audit` from the workspace root: features unified over the
#     whole workspace, exactly as watch's `cargo run --bin <fn>` resolves them), plus `chargectl`
#     and `stripe-sim` the same way, so the first invoke does not sit in a silent rebuild;
#   - moto (DynamoDB, SQS, Secrets Manager, EventBridge) on 127.0.0.1:$MOTO_PORT, one request at a
#     time;
#   - stripe-sim on 127.0.0.1:$STRIPE_SIM_PORT;
#   - on moto (provision.py), what every function's configuration names: the table, the FIFO
#     queue and its DLQ, the events function's inbox table, the outcome bus, the Stripe key secret
#     and a webhook signing secret made up for this stack (its value in .local-webhook-secret);
#   - `cargo lambda watch` on 127.0.0.1:$LAMBDA_PORT with the functions' environment.
# Ports: free loopback ports unless MOTO_PORT / STRIPE_SIM_PORT / LAMBDA_PORT are set.
# cargo-lambda: the one on PATH, else the pinned one (infra/template-check/build-requirements.txt)
# installed into .venv-template on first use.
# Writes $LOCAL_STACK_DIR/.local-stack.env (KEY=VALUE: the functions' environment plus
# STRIPE_SIM_URL and LAMBDA_PORT), the PIDs to .local-stack.pids and the logs to .local-*.log
# (LOCAL_STACK_DIR defaults to the repository root). infra/local/down.sh stops exactly those.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
dir="${LOCAL_STACK_DIR:-$root}"
mkdir -p "$dir"
pids="$dir/.local-stack.pids"

if [ -s "$pids" ]; then
  while read -r _ pid; do
    if kill -0 "$pid" 2>/dev/null; then
      echo "up.sh: a local stack is already running ($pids); stop it with infra/local/down.sh" >&2
      exit 1
    fi
  done <"$pids"
  rm -f "$pids"
fi

# The venv (moto, boto3) as the tests use it.
infra/local/with-stack.sh true
py=.venv/bin/python
free_port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
moto_port="${MOTO_PORT:-$(free_port)}"
sim_port="${STRIPE_SIM_PORT:-$(free_port)}"
lambda_port="${LAMBDA_PORT:-$(free_port)}"

# cargo-lambda (brings zig for cross builds; watch needs only cargo).
if command -v cargo-lambda >/dev/null 2>&1; then
  cargo_lambda="$(command -v cargo-lambda)"
else
  venv="${CHARGE_ONCE_TEMPLATE_VENV:-$root/.venv-template}"
  req="$root/infra/template-check/build-requirements.txt"
  [ -x "$venv/bin/cargo-lambda" ] || rm -f "$venv/.build-requirements.sha256"
  infra/local/pyenv.sh "$venv" "$req" .build-requirements.sha256 up.sh
  cargo_lambda="$venv/bin/cargo-lambda"
fi

echo "up.sh: building the functions, chargectl and stripe-sim (what cargo lambda watch runs)" >&2
cargo build --bin checkout --bin charge --bin reconciler --bin events --bin notify --bin audit \
  --bin chargectl --bin stripe-sim

started() { echo "$1 $2" >>"$pids"; }
fail() {
  echo "up.sh: $1; its log ($2):" >&2
  tail -n 40 "$2" >&2 || true
  LOCAL_STACK_DIR="$dir" infra/local/down.sh >&2
  exit 1
}

"$py" infra/local/moto_serialized.py -H 127.0.0.1 -p "$moto_port" >"$dir/.local-moto.log" 2>&1 &
started moto $!
moto_pid=$!
target/debug/stripe-sim --port "$sim_port" >"$dir/.local-stripe-sim.log" 2>&1 &
started stripe-sim $!
sim_pid=$!

ready=
for _ in $(seq 1 150); do
  kill -0 "$moto_pid" 2>/dev/null || fail "moto exited" "$dir/.local-moto.log"
  kill -0 "$sim_pid" 2>/dev/null || fail "stripe-sim exited" "$dir/.local-stripe-sim.log"
  if "$py" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$moto_port/moto-api/', timeout=1)" 2>/dev/null \
    && grep -q "listening on" "$dir/.local-stripe-sim.log"; then
    ready=1
    break
  fi
  sleep 0.2
done
[ -n "$ready" ] || fail "moto or stripe-sim not ready after 30 s" "$dir/.local-moto.log"

env_file="$dir/.local-stack.env"
"$py" infra/local/provision.py "http://127.0.0.1:$moto_port" "http://127.0.0.1:$sim_port" \
  "$dir/.local-webhook-secret" >"$env_file.tmp" \
  || fail "provisioning on moto failed" "$dir/.local-moto.log"
{
  cat "$env_file.tmp"
  echo "STRIPE_SIM_URL=http://127.0.0.1:$sim_port"
  echo "LAMBDA_PORT=$lambda_port"
} >"$env_file"
rm -f "$env_file.tmp"

# watch in its own process group (setsid), so down.sh stops it with the function processes it
# spawned, and nothing else.
setsid "$cargo_lambda" lambda watch --invoke-address 127.0.0.1 --invoke-port "$lambda_port" \
  --env-file "$env_file" >"$dir/.local-watch.log" 2>&1 &
started watch-group $!
watch_pid=$!
for _ in $(seq 1 150); do
  kill -0 "$watch_pid" 2>/dev/null || fail "cargo lambda watch exited" "$dir/.local-watch.log"
  if "$py" -c "import socket; socket.create_connection(('127.0.0.1', $lambda_port), timeout=1)" 2>/dev/null; then
    break
  fi
  sleep 0.2
done

echo "local stack up: moto :$moto_port, stripe-sim :$sim_port, cargo lambda watch :$lambda_port"
echo "environment in $env_file (load it with: set -a; . $env_file; set +a):"
cat "$env_file"
