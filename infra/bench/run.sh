#!/usr/bin/env bash
# The body of `make bench`: runs every measurement and writes BENCHMARKS.md.
#   - request counts (ours and the seed's port) and reconciler reads: against moto, started by
#     infra/local/with-stack.sh (DynamoDB + SQS), with an embedded stripe-sim;
#   - CPU time per charge and peak RSS: the charge handler on in-memory ports (release build);
#   - the simulation (`simulate`, built with the `sim` profile: the release profile with its
#     symbols): 1,000,000 orders with every fault kind on (deterministic: in memory, Stripe in process), 20,000 without faults, and 2,000 over the real
#     wire (moto + a separately started stripe-sim over HTTP, with faults).
#   - footprint (infra/bench/footprint.sh) of all five functions: the arm64 zip as `sam build`
#     makes it (cargo lambda build --release --arm64), and per release profile (BENCH_PROFILES,
#     default `release`) on this x86-64 host: stripped binary, zip, init ms (exec to the first
#     invocation/next against a local Runtime API, moto for the secrets) and CPU per charge, from
#     a real build of each function; the figures they are compared with come from
#     infra/bench/previous-footprint.json;
#   - section 5, the whole bill: `bench bill` counts every request of one charge by function on
#     moto (checkout, charge, the events function with each event source, the notify relay's
#     PutEvents), with our log lines and EMF lines, under the functions' subscriber and again
#     under lambda_runtime's default one (section 5 compares the two);
#   - section 7, the reference burst at Stripe's rate limit: `bench burst` runs `simulate
#     --arrival-rate` (sim build, virtual time, in memory) once per row of
#     infra/bench/src/burst.rs's RUNS and per point of infra/bench/src/grid.rs, and draws
#     docs/bench/burst-{paced,unpaced}.svg; then a burst of 2,000 orders over the wire on the
#     real clock (moto + a separate stripe-sim). About 12 minutes, the wire burst (about 7) and
#     the two unpaced runs most of it.
#   - section 8, the non-test lines of the charge path (the README's reading list), the refund
#     path, the product and the tools: `bench lines`, counted from the tree (under a second).
# Intermediate JSON goes to $BENCH_OUT (default target/bench). Took 10 minutes on 2 cores once built
# (the 10,000-item table on moto and the burst's unpaced runs are most of it; BENCH_SETTLED=N uses
# a smaller table).
#
# BENCH_ONLY=burst: only section 7: its runs, then that section replaced in place in BENCHMARKS.md
# (the rest of the file as the last full run wrote it). `BENCH_ONLY=burst make bench`.
# BENCH_ONLY=footprint: the same for section 4 (its builds and measurements, about 11 optimised
# builds: five arm64, five x86-64 and `footprint`).
# BENCH_ONLY=cost: only section 5: `bench bill` again, then that section replaced in place (it
# also reads section 3's cpu-logs.json and section 4's footprint-*.json from $BENCH_OUT).
# BENCH_ONLY=lines: only section 8 (the line counts), replaced in place.
# BENCH_ONLY=sim: only section 3: CPU per charge and the simulation runs (1M orders, the
# BENCH_SIM_SCALE sizes, the event sources, 2,000 orders on moto over HTTP: about 20 minutes,
# most of it the moto run's waiting), then that section replaced in place.
set -euo pipefail
cd "$(dirname "$0")/../.."
# Where cargo puts the binaries (a worktree may share another checkout's target directory).
target="${CARGO_TARGET_DIR:-target}"

out="${BENCH_OUT:-target/bench}"
settled="${BENCH_SETTLED:-10000}"
orders="${BENCH_ORDERS:-1000000}"
wire_orders="${BENCH_WIRE_ORDERS:-2000}"
charges="${BENCH_CHARGES:-200000}"
# Profiles for the footprint table: `release` is the one the functions ship with; a candidate is
# any other profile defined in Cargo.toml (each is a full optimised build of the five functions
# and `footprint`).
profiles="${BENCH_PROFILES:-release}"
init_runs="${BENCH_INIT_RUNS:-20}"
# CPU per charge and peak RSS are measured over batches of the template's BatchSize
# (charge::EVENT_SOURCE.batch_size, held to template.yaml by tests/template.rs).
batch="${BENCH_BATCH:-10}"
# Steps to run (default all); a step left out reuses its JSON in $out from an earlier run.
# (`logs` is the old name of `bill`.)
steps=" ${BENCH_STEPS:-wire index cpu footprint bill sim burst lines} "
only="${BENCH_ONLY:-}"
case "$only" in
  "") ;;
  burst) steps=" burst " ;;
  footprint) steps=" footprint " ;;
  cost) steps=" bill " ;;
  sim) steps=" cpu sim " ;;
  lines) steps=" lines " ;;
  *) echo "BENCH_ONLY=$only: unknown section (sim, footprint, cost, burst and lines render alone)" >&2; exit 2 ;;
esac
step() { [[ "$steps" == *" $1 "* ]] || { [[ "$1" == bill ]] && [[ "$steps" == *" logs "* ]]; }; }
mkdir -p "$out"

needs_release=false
for s in wire index cpu bill sim burst; do if step "$s"; then needs_release=true; fi; done
if $needs_release; then
  echo "== build (release): bench, stripe-sim; simulate with its own profile (sim: opt-level 3)" >&2
  nice -n 19 cargo build --locked --release -p bench -p stripe-sim
  nice -n 19 cargo build --locked --profile sim -p simulate
  bench="$target/release/bench"
  simulate="$target/sim/simulate"
else
  # Only the footprint step (it builds its own profiles) and the render: a debug bench renders.
  cargo build --locked -q -p bench
  bench="$target/debug/bench"
fi

if step wire; then
  echo "== 1, 2: requests per operation on the wire, ours and the seed's port (moto)" >&2
  infra/local/with-stack.sh "$bench" wire "$out/wire.json"
fi
if step index; then
  echo "== 6: reconciler reads with $settled settled operations (moto)" >&2
  infra/local/with-stack.sh "$bench" index "$out/index.json" "$settled"
fi

if step cpu; then
  echo "== 3: CPU time per charge (in-memory ports), peak RSS after one batch" >&2
  "$bench" cpu "$out/cpu.json" "$charges" "$batch"
  "$bench" cpu "$out/cpu-logs.json" "$charges" "$batch" logs
  "$bench" rss "$out/rss.json" "$batch"
fi

if step footprint; then
  echo "== 4: footprint: arm64 zips as sam build makes them; per profile ($profiles) on the host: zip, init, CPU per charge" >&2
  infra/bench/footprint.sh "$out" "$profiles" "$init_runs" "$charges" "$batch"
fi

if step bill; then
  echo "== 5: every request of one charge, each event source and the relay; logs before and after (moto)" >&2
  infra/local/with-stack.sh env AWS_LAMBDA_LOG_FORMAT=JSON "$bench" bill "$out/bill.json"
  infra/local/with-stack.sh env AWS_LAMBDA_LOG_FORMAT=JSON "$bench" bill "$out/bill-lambda-subscriber.json" lambda_runtime
fi

if step sim; then
  echo "== 3: simulate --orders $orders (every fault kind), 20000 without faults" >&2
  "$simulate" --orders "$orders" --json | tail -n 1 > "$out/sim-faults.json"
  rm -f "$out"/sim-scale-*.json
  cp "$out/sim-faults.json" "$out/sim-scale-$orders.json"
  # Peak memory by size (section 3): BENCH_SIM_SCALE="100000 10000000" adds the 10M run (about
  # 20 GB and a quarter of an hour on one core).
  for n in ${BENCH_SIM_SCALE:-100000}; do
    [ "$n" = "$orders" ] || "$simulate" --orders "$n" --json | tail -n 1 > "$out/sim-scale-$n.json"
  done
  "$simulate" --orders 20000 --no-faults --json | tail -n 1 > "$out/sim-nofaults.json"
  echo "== 3: time to settle, 20000 orders with EventBridge events, webhooks and neither" >&2
  "$simulate" --orders 20000 --events eventbridge --json | tail -n 1 > "$out/sim-eventbridge.json"
  "$simulate" --orders 20000 --events webhook --json | tail -n 1 > "$out/sim-webhooks.json"
  "$simulate" --orders 20000 --events none --json | tail -n 1 > "$out/sim-no-webhooks.json"

  echo "== 3: simulate --orders $wire_orders on the wire (moto + a separate stripe-sim over HTTP)" >&2
  # --unlimited: this step counts requests per operation on the wire; Stripe's rate limits are
  # measured by the load model (simulate --arrival-rate), where time is virtual.
  infra/local/with-stack.sh bash -c "
    set -euo pipefail
    '$target/release/stripe-sim' --port 0 --unlimited > '$out/stripe-sim.log' 2>&1 &
    sim_pid=\$!
    trap 'kill \$sim_pid' EXIT
    for _ in \$(seq 50); do grep -q listening '$out/stripe-sim.log' && break; sleep 0.1; done
    url=http://\$(grep -o 'listening on [0-9.:]*' '$out/stripe-sim.log' | head -n 1 | cut -d' ' -f3)
    '$simulate' --backend aws --stripe-url \"\$url\" --orders '$wire_orders' --json | tail -n 1 > '$out/sim-wire.json'
  "
fi

if step burst; then
  echo "== 7: the reference burst at Stripe's rate limit, the grid, the mixed bursts (simulate --arrival-rate, virtual time)" >&2
  "$bench" burst "$out" "$simulate" docs/bench
  echo "== 7: a burst over the wire on the real clock, with the carry and without (moto + a separate stripe-sim, create 5/s; about 7 minutes each)" >&2
  # Create 5/s, arrivals at 6/s: moto binds before Stripe's limit on this machine (one Python
  # process; its SQS receive walks the whole queue and its writes slow as the table grows: at 10
  # orders/s it served 13 requests a second). A live account's budgets (96 overall, the
  # endpoint's whole 5/s: no other client shares this simulator's key): the charges run at the
  # create endpoint's. The second run is the same without the carry (a bank of one call), to tell
  # what its capacity 429s come from; each on a fresh stack and a fresh stripe-sim.
  for variant in "burst-wire:" "burst-wire-no-carry:--charge-burst 1"; do
    name="${variant%%:*}" flags="${variant#*:}"
    infra/local/with-stack.sh bash -c "
      set -euo pipefail
      '$target/release/stripe-sim' --port 0 --create-rps 5 --create-latency-p50-ms 300 > '$out/stripe-sim-$name.log' 2>&1 &
      sim_pid=\$!
      trap 'kill \$sim_pid' EXIT
      for _ in \$(seq 50); do grep -q listening '$out/stripe-sim-$name.log' && break; sleep 0.1; done
      url=http://\$(grep -o 'listening on [0-9.:]*' '$out/stripe-sim-$name.log' | head -n 1 | cut -d' ' -f3)
      '$simulate' --backend aws --stripe-url \"\$url\" --orders '${BENCH_WIRE_BURST_ORDERS:-2000}' --arrival-rate 6 \\
        --stripe-rps 96 --stripe-endpoint-rps 5 $flags --json | tail -n 1 > '$out/$name.json'
    "
  done
fi

if step lines; then
  echo "== 8: non-test lines of the charge path, the refund path, the product and the tools" >&2
  "$bench" lines "$out/lines.json"
fi

BENCH_DATE="$(date -u '+%Y-%m-%d %H:%M UTC')"
export BENCH_DATE
if [[ -n "$only" ]]; then
  echo "== render section $only of BENCHMARKS.md in place" >&2
  "$bench" render-section "$only" "$out" BENCHMARKS.md
else
  echo "== render BENCHMARKS.md" >&2
  BENCH_SIM_PROFILE=sim "$bench" render "$out" BENCHMARKS.md
fi
