#!/usr/bin/env bash
# The body of `make bench`: runs every measurement of issue 8 and writes BENCHMARKS.md.
#   - request counts (ours and the seed's port) and reconciler reads: against moto, started by
#     infra/local/with-stack.sh (DynamoDB + SQS), with an embedded stripe-sim;
#   - CPU time per charge and peak RSS: the charge handler on in-memory ports (release build);
#   - the simulation (`simulate`, release build): 1,000,000 orders with every fault kind on
#     (deterministic: in memory, Stripe in process), 20,000 without faults, and 2,000 over the real
#     wire (moto + a separately started stripe-sim over HTTP, with faults).
# Intermediate JSON goes to $BENCH_OUT (default target/bench). Took 7 minutes on 2 cores once built
# (the 10,000-item table on moto is most of it; BENCH_SETTLED=N uses a smaller one).
set -euo pipefail
cd "$(dirname "$0")/../.."

out="${BENCH_OUT:-target/bench}"
settled="${BENCH_SETTLED:-10000}"
orders="${BENCH_ORDERS:-1000000}"
wire_orders="${BENCH_WIRE_ORDERS:-2000}"
charges="${BENCH_CHARGES:-200000}"
mkdir -p "$out"

echo "== build (release): bench, simulate, stripe-sim" >&2
cargo build --release -p bench -p simulate -p stripe-sim
bench=target/release/bench
simulate=target/release/simulate

echo "== 1, 2: requests per operation on the wire, ours and the seed's port (moto)" >&2
echo "== 6: reconciler reads with $settled settled operations (moto)" >&2
infra/local/with-stack.sh bash -c "
  set -euo pipefail
  '$bench' wire '$out/wire.json'
  '$bench' index '$out/index.json' '$settled'
"

echo "== 3: CPU time per charge (in-memory ports), peak RSS after one batch" >&2
"$bench" cpu "$out/cpu.json" "$charges" 3
"$bench" cpu "$out/cpu-logs.json" "$charges" 3 logs
"$bench" rss "$out/rss.json" 3

echo "== 3: simulate --orders $orders (every fault kind), 20000 without faults" >&2
"$simulate" --orders "$orders" --json | tail -n 1 > "$out/sim-faults.json"
"$simulate" --orders 20000 --no-faults --json | tail -n 1 > "$out/sim-nofaults.json"

echo "== 3: simulate --orders $wire_orders on the wire (moto + a separate stripe-sim over HTTP)" >&2
infra/local/with-stack.sh bash -c "
  set -euo pipefail
  target/release/stripe-sim --port 0 > '$out/stripe-sim.log' 2>&1 &
  sim_pid=\$!
  trap 'kill \$sim_pid' EXIT
  for _ in \$(seq 50); do grep -q listening '$out/stripe-sim.log' && break; sleep 0.1; done
  url=http://\$(grep -o 'listening on [0-9.:]*' '$out/stripe-sim.log' | head -n 1 | cut -d' ' -f3)
  '$simulate' --backend aws --stripe-url \"\$url\" --orders '$wire_orders' --json | tail -n 1 > '$out/sim-wire.json'
"

echo "== render BENCHMARKS.md" >&2
BENCH_DATE="$(date -u '+%Y-%m-%d %H:%M UTC')" BENCH_SIM_PROFILE=release \
  "$bench" render "$out" BENCHMARKS.md
