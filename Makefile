# The README's commands. `make test` is what CI runs (through .ci/run).
.PHONY: run test lint fmt template-check bench

# The main job: the whole pipeline locally, with faults, checked against the Stripe simulator.
run:
	cargo run -q -p simulate --

# Starts moto (DynamoDB + SQS + Secrets Manager) on a free port for the duration of the tests,
# installing it into .venv on first use; the Stripe simulator is embedded in the tests that need it.
test:
	infra/local/with-stack.sh cargo test --workspace

lint:
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings

fmt:
	cargo fmt --all

# cfn-lint, sam validate --lint and the IAM check after the SAM transform (pinned tools in
# .venv-template), then the template held to the code.
template-check:
	infra/template-check/check.sh
	cargo test -p integration-tests --test template

# Writes BENCHMARKS.md: request counts on the wire (moto + stripe-sim), throughput, footprint,
# AWS cost, reconciler reads. About 7 minutes on 2 cores once the release builds exist.
bench:
	infra/bench/run.sh
