#!/usr/bin/env bash
# One HTTP/TLS stack per function (a second one is dead weight in the zip). For each Lambda
# package, as it is built for the host and for Lambda's arm64 (`cargo tree -e normal`: what ends
# up in the bootstrap), fails if
#   - hyper, h2, http, rustls, rustls-webpki, hyper-rustls or tokio-rustls appears in more than one version;
#   - the crypto backend is not exactly one ring (aws-lc-rs, aws-lc-sys, openssl-sys or native-tls
#     present). Ring, not aws-lc-rs: measured, aws-lc-rs was the largest piece left in
#     every function's zip (BENCHMARKS.md section 4). deny.toml bans aws-lc-rs from the whole
#     workspace (the tools use the same client); this checks each function as it is built alone.
#   - reqwest is present: a second HTTP client (the Stripe client speaks to hyper-util
#     directly, with the SDK's own stack; reqwest is for the tools);
#   - a function other than notify links the EventBridge SDK (charge-once's `eventbridge` feature
#     is for the relay only).
#   - the six functions, each built on its own, do not build their shared dependencies with the
#     same features (one build of the tree for all six).
# Prints `cargo tree -d -e normal`'s duplicate crates per function for the record.
# Needs only cargo and the lockfile (`--locked`); runs in a few seconds.
set -euo pipefail
cd "$(dirname "$0")/../.."

functions=(checkout charge reconciler notify events audit)
one_version=(hyper h2 http rustls rustls-webpki hyper-rustls tokio-rustls ring)
forbidden=(aws-lc-rs aws-lc-sys openssl-sys native-tls reqwest)
targets=(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu)
offline=()
[ "${CARGO_NET_OFFLINE:-}" = true ] && offline=(--offline)

failed=0
for fn in "${functions[@]}"; do
    for target in "${targets[@]}"; do
        tree="$(cargo tree -q --locked "${offline[@]}" -e normal -p "$fn" --target "$target" --prefix none \
            | awk '{print $1, $2}' | sort -u)"
        problems=()
        for crate in "${one_version[@]}"; do
            versions="$(awk -v c="$crate" '$1 == c {print $2}' <<<"$tree" | tr '\n' ' ')"
            n="$(wc -w <<<"$versions")"
            if [ "$n" -gt 1 ]; then problems+=("$crate in $n versions: $versions"); fi
        done
        for crate in "${forbidden[@]}"; do
            if awk -v c="$crate" '$1 == c {found=1} END {exit !found}' <<<"$tree"; then
                problems+=("$crate present (second crypto backend / TLS stack)")
            fi
        done
        if [ "$fn" != notify ] && awk '$1 == "aws-sdk-eventbridge" {found=1} END {exit !found}' <<<"$tree"; then
            problems+=("aws-sdk-eventbridge present: only notify enables charge-once's eventbridge feature")
        fi
        if ! awk '$1 == "ring" {found=1} END {exit !found}' <<<"$tree"; then
            problems+=("no ring: which crypto backend does rustls use now?")
        fi
        stack="$(awk '$1 ~ /^(hyper|rustls|h2|ring)$/ {printf "%s %s, ", $1, $2}' <<<"$tree")"
        dups="$(cargo tree -q --locked "${offline[@]}" -d -e normal -p "$fn" --target "$target" \
            | grep -E '^[a-z]' | awk '{print $1}' | sort -u | tr '\n' ' ' || true)"
        if [ "${#problems[@]}" -eq 0 ]; then
            echo "ok    $fn ($target): ${stack%, }; duplicate crates: ${dups:-none}"
        else
            failed=1
            for p in "${problems[@]}"; do echo "FAIL  $fn ($target): $p"; done
        fi
    done
done

# One build of the dependency tree for all six functions (host target): a dependency with other
# features in one function than in another is a second build of it and of everything above it
# (tokio, hyper, the SDK...) whenever a function is built on its own, `-p FUNCTION`, as `make
# bench`'s footprint step and `cargo lambda build -p` do. Workspace crates are left out (only
# ours sit above them).
trees=()
for fn in "${functions[@]}"; do
    trees+=("$fn" "$(cargo tree -q --locked "${offline[@]}" -e normal -p "$fn" -f '{p}|{f}' --prefix none | sort -u)")
done
if ! python3 - "${trees[@]}" <<'PY'
import sys
args = sys.argv[1:]
seen = {}
for name, tree in zip(args[0::2], args[1::2]):
    for line in tree.splitlines():
        pkg, _, feats = line.replace(" (*)", "").partition("|")
        if "(/" in pkg:
            continue
        seen.setdefault(pkg.strip(), {})[name] = feats.strip()
bad = {p: by for p, by in seen.items() if len(set(by.values())) > 1}
for p, by in sorted(bad.items()):
    for fn, feats in sorted(by.items()):
        print(f"FAIL  {p}: {fn} builds it with [{feats}]")
sys.exit(1 if bad else 0)
PY
then
    echo "one-stack: the functions build a dependency with different features; give the workspace" >&2
    echo "  dependency (root Cargo.toml) the union, so all six share one build." >&2
    failed=1
else
    echo "ok    one dependency build for all six functions (every shared crate, the same features)"
fi

if [ "$failed" -ne 0 ]; then
    echo "one-stack: a function has a second HTTP/TLS stack or crypto backend, or an SDK it must not link." >&2
    echo "  AWS SDK crates must stay default-features = false (rt-tokio only; the functions' client is" >&2
    echo "  charge_once::adapters::aws::https_client, on ring); the Stripe client on hyper-util, not" >&2
    echo "  reqwest (the tools' client). See the root Cargo.toml." >&2
    exit 1
fi
echo "one-stack: every function has one hyper, one rustls, one h2 and one crypto backend (ring)"
