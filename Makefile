# The README's commands. `make test` is what CI runs (through .ci/run).
.PHONY: test lint fmt

test:
	cargo test --workspace

lint:
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings

fmt:
	cargo fmt --all
