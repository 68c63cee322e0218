#!/usr/bin/env bash
# The rules stay free of I/O: fails if `charge-core` (core/) depends, through any path of its
# normal dependencies (`cargo tree -e normal`: what it links), on an async runtime, an HTTP or TLS
# stack, an AWS SDK crate, the Lambda runtime, a log/trace pipeline or a JSON library. Its
# dev-dependencies (the tests' serde_json) do not count.
#
#   infra/supply-chain/core-is-pure.sh              # checks charge-core
#   infra/supply-chain/core-is-pure.sh --self-test  # shows the check refuses a crate that has them
#                                                   # (charge-once, the shells) and passes charge-core
set -euo pipefail
cd "$(dirname "$0")/../.."

# Crate names, or prefixes ending in '*'.
forbidden=(tokio 'tokio-*' mio hyper 'hyper-*' h2 http reqwest 'rustls*' 'aws-*' 'aws_*'
    lambda_runtime 'lambda-*' async-trait 'futures*' serde_json tracing 'tracing-*')
offline=()
[ "${CARGO_NET_OFFLINE:-}" = true ] && offline=(--offline)

# Prints the forbidden crates in `package`'s normal dependency tree; exit 1 if there are any.
impure() {
    local package="$1" found=() crate pattern
    while read -r crate; do
        for pattern in "${forbidden[@]}"; do
            # shellcheck disable=SC2053 # the pattern is a glob on purpose
            if [[ "$crate" == $pattern ]]; then found+=("$crate"); break; fi
        done
    done < <(cargo tree -q --locked "${offline[@]}" -e normal -p "$package" --prefix none \
        | awk '{print $1}' | sort -u)
    if [ "${#found[@]}" -gt 0 ]; then
        echo "${found[*]}"
        return 1
    fi
}

if [ "${1:-}" = --self-test ]; then
    if found="$(impure charge-once)"; then
        echo "core-is-pure self-test: charge-once passed, but it links tokio, hyper and the AWS SDK" >&2
        exit 1
    fi
    echo "self-test: charge-once refused ($found)"
    impure charge-core >/dev/null || { echo "self-test: charge-core refused" >&2; exit 1; }
    echo "self-test: charge-core passes"
    exit 0
fi

if ! found="$(impure charge-core)"; then
    echo "charge-core depends on I/O crates: $found" >&2
    echo "(cargo tree -e normal -p charge-core -i <crate> shows the path)" >&2
    exit 1
fi
echo "charge-core: no async runtime, HTTP, TLS, AWS, Lambda, tracing or JSON crate in its tree"
