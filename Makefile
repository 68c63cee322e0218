# The README's commands. `make test` is what CI runs (through .ci/run).
.PHONY: run test walkthrough deploy-local lint fmt template-check bench supply-chain dashboard

# The main job: the whole pipeline locally, with faults, checked against the Stripe simulator.
# Flags go in ARGS: `make run ARGS='--orders 5 --seed 2'` (or run `cargo run -p simulate -- --help`).
run:
	@echo "make run: builds the simulation first (several minutes the first time), then runs it" >&2
	cargo run -p simulate -- $(ARGS)

# Starts moto (DynamoDB + SQS + Secrets Manager) on a free port for the duration of the tests,
# installing it into .venv on first use; the Stripe simulator is embedded in the tests that need it.
# The last line adds up every test binary's result: passed, failed, ignored.
test:
	infra/local/with-stack.sh infra/local/test-summary.sh cargo test --workspace

# docs/local.md, every step asserted: up.sh (moto, stripe-sim,
# cargo lambda watch on free ports), one order charged once, one dropped response settled by the
# reconciler's re-drive, one by Stripe's event (EventBridge form) and one by a signed webhook to
# the events function, a function that cannot start answering why, down.sh. About 3 minutes over
# a built workspace (one minute is the unknown's backoff). CI runs it.
walkthrough:
	infra/local/walkthrough.sh

# The stack deployed whole: template.yaml through CloudFormation (the SAM transform) into
# MiniStack with IAM enforced, the six functions as bootstrap zips built here, stripe-sim as
# Stripe; then a scenario over the deployed stack, every step asserted, and a second stack with
# CheckoutAuth=JWT. Every emulator gap is printed by name with its reason. About 3 minutes over a
# built workspace (two of them wait for the reconciler's own schedule). CI runs it.
# KEEP=1 leaves the stack running (target/deploy-local/state.json; stop: infra/deploy-local/down.sh).
deploy-local:
	infra/deploy-local/run.sh

lint:
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings

fmt:
	cargo fmt --all

# One HTTP/TLS stack per function (cargo tree), the rules crate free of I/O crates, and cargo deny (advisories against the RustSec
# snapshot in ../shared/advisory-db, bans, licenses, sources), offline; CI runs both.
supply-chain:
	infra/supply-chain/one-stack.sh
	infra/supply-chain/core-is-pure.sh
	infra/supply-chain/deny.sh

# cfn-lint, sam validate --lint and the IAM check after the SAM transform (pinned tools in
# .venv-template), then the template held to the code.
# Draws docs/operations-dashboard.svg: the template's OperatorDashboard from a simulation run's
# metrics (every EMF line the functions and the audit emitted, on the virtual clock).
dashboard:
	cargo run -q -p simulate -- --seed 1 --dashboard docs/operations-dashboard.svg

template-check:
	infra/template-check/check.sh
	cargo test -p integration-tests --test it template::

# Writes BENCHMARKS.md: request counts on the wire (moto + stripe-sim), throughput, footprint,
# AWS cost, reconciler reads, the reference burst at Stripe's rate limit (simulate --arrival-rate,
# and docs/bench/burst-*.svg), the lines of the charge path, the product and the tools. About 10
# minutes on 2 cores once the release builds exist.
# `BENCH_ONLY=burst make bench` runs only the burst (about 3 minutes) and replaces only its section.
# `BENCH_ONLY=lines make bench` counts only the lines of section 8 (seconds) and replaces it.
bench:
	infra/bench/run.sh
