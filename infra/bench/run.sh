#!/usr/bin/env bash
# The body of `make bench`: runs every measurement of issue 8 and writes BENCHMARKS.md.
#   - request counts (ours and the seed's port) and reconciler reads: against moto, started by
#     infra/local/with-stack.sh (DynamoDB + SQS), with an embedded stripe-sim;
#   - CPU time per charge and peak RSS: the charge handler on in-memory ports (release build);
#   - orders/s: `chargectl simulate` (release build), clean and with its default faults.
# Intermediate JSON goes to $BENCH_OUT (default target/bench). Took 7 minutes on 2 cores once built
# (the 10,000-item table on moto is most of it; BENCH_SETTLED=N uses a smaller one).
set -euo pipefail
cd "$(dirname "$0")/../.."

out="${BENCH_OUT:-target/bench}"
settled="${BENCH_SETTLED:-10000}"
orders="${BENCH_ORDERS:-20000}"
charges="${BENCH_CHARGES:-200000}"
mkdir -p "$out"

echo "== build (release): bench, chargectl" >&2
cargo build --release -p bench -p chargectl
bench=target/release/bench
chargectl=target/release/chargectl

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

echo "== 3: chargectl simulate --orders $orders" >&2
"$chargectl" simulate --orders "$orders" --no-faults --json | tail -n 1 > "$out/sim-nofaults.json"
"$chargectl" simulate --orders "$orders" --json | tail -n 1 > "$out/sim-faults.json"

echo "== render BENCHMARKS.md" >&2
BENCH_DATE="$(date -u '+%Y-%m-%d %H:%M UTC')" BENCH_SIM_PROFILE=release \
  "$bench" render "$out" BENCHMARKS.md
