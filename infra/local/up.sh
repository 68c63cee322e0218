#!/usr/bin/env bash
# Starts the local stack for invoking the functions by hand (`cargo lambda watch` / `invoke`):
# moto on 127.0.0.1:${MOTO_PORT:-5000}, stripe-sim on 127.0.0.1:${STRIPE_SIM_PORT:-12111}, the
# table, the FIFO queue and the Stripe key secret on moto. Writes .local-stack.env (KEY=VALUE) and
# the PIDs to .local-stack.pids; infra/local/down.sh stops both.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
moto_port="${MOTO_PORT:-5000}"
sim_port="${STRIPE_SIM_PORT:-12111}"

# The venv (moto, boto3) as the tests use it.
infra/local/with-stack.sh true

.venv/bin/python infra/local/moto_serialized.py -H 127.0.0.1 -p "$moto_port" >.local-moto.log 2>&1 &
echo $! >.local-stack.pids
cargo build -q -p stripe-sim
target/debug/stripe-sim --port "$sim_port" >.local-stripe-sim.log 2>&1 &
echo $! >>.local-stack.pids

for _ in $(seq 1 100); do
  if .venv/bin/python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$moto_port/moto-api/', timeout=1)" 2>/dev/null \
    && grep -q "listening on" .local-stripe-sim.log; then
    break
  fi
  sleep 0.2
done

.venv/bin/python infra/local/provision.py "http://127.0.0.1:$moto_port" "http://127.0.0.1:$sim_port" >.local-stack.env
echo "local stack up: moto :$moto_port, stripe-sim :$sim_port; environment in .local-stack.env:"
cat .local-stack.env
