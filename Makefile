# The README's commands. `make test` is what CI runs (through .ci/run).
.PHONY: test lint fmt

# Starts moto (DynamoDB + SQS) on a free port for the duration of the tests, installing it into
# .venv on first use; the Stripe simulator is embedded in the tests that need it.
test:
	infra/local/with-stack.sh cargo test --workspace

lint:
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings

fmt:
	cargo fmt --all
