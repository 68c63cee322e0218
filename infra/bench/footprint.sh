#!/usr/bin/env bash
# The footprint step of `make bench` (BENCHMARKS.md section 4), for all five
# functions:
#   - arm64 (the template's architecture), as `sam build` makes it: `cargo lambda build --release
#     --arm64` in each function's directory (what SAM's rust-cargolambda build method runs), then
#     `zip -9` of the stripped `bootstrap`. The release profile only: that is what ships.
#   - on this x86-64 host, for each profile in PROFILES: `cargo build --profile P -p FUNCTION` (one
#     package per build, so features resolve as they do for that function alone), its stripped
#     binary and zip, and its init (`footprint init`: exec to the first invocation/next against a
#     local Runtime API, moto for the secrets; arm64 binaries cannot run here), then CPU per charge
#     (`footprint cpu`, built with the same profile).
# Writes OUT/footprint-P.json per profile (the renderer, infra/bench/src/footprint_table.rs, and
# section 5's cold starts read it).
#
#   infra/bench/footprint.sh OUT PROFILES INIT_RUNS CHARGES BATCH
#
# FOOTPRINT_NO_BUILD=1 measures what is already built (a function whose binaries are missing is
# left out of the JSON, and the table says "not measured"); FOOTPRINT_ARM64_TARGET_DIR puts the
# arm64 builds in a target directory of their own.
#
# Needs cargo-lambda (with zig) from .venv-template (README: `pip install -r
# infra/template-check/build-requirements.txt`) or on PATH, and the aarch64-unknown-linux-gnu
# target (`rustup target add aarch64-unknown-linux-gnu`).
set -euo pipefail
cd "$(dirname "$0")/../.."
out="$1"; profiles="$2"; runs="$3"; charges="$4"; batch="$5"
target="${CARGO_TARGET_DIR:-target}"
# The arm64 builds may go to a target directory of their own (FOOTPRINT_ARM64_TARGET_DIR), so they
# can be built beside the host's.
# Absolute: the arm64 builds run in each function's directory, the reads from here (a relative
# default once sent them to functions/<f>/target, and every zip read "not measured").
arm_target="$(realpath -m "${FOOTPRINT_ARM64_TARGET_DIR:-$target}")"
# The crates; the events function's rows keep its deployed name, `webhook` (WebhookFunction, the
# metric dimension Function=webhook), which the bill and the previous figures read.
functions=(checkout charge reconciler events notify)
mkdir -p "$out"
rm -f "$out"/footprint-*.json

if [ "${FOOTPRINT_NO_BUILD:-}" != 1 ]; then
  # cargo-lambda finds zig next to itself (.venv-template/bin) or on PATH.
  if [ -x .venv-template/bin/cargo-lambda ]; then PATH="$PWD/.venv-template/bin:$PATH"; fi
  if ! command -v cargo-lambda >/dev/null; then
    echo "footprint: cargo-lambda not found (.venv-template/bin or PATH); see docs/deploy.md" >&2
    exit 1
  fi
  echo "== 4: arm64, as sam build makes it: cargo lambda build --release --arm64, per function" >&2
  for f in "${functions[@]}"; do
    (cd "functions/$f" && CARGO_TARGET_DIR="$arm_target" nice -n 19 cargo lambda build --release --arm64 --locked)
  done
  for p in $profiles; do
    echo "== 4: x86-64 host, profile $p: each function on its own, and footprint" >&2
    for f in "${functions[@]}" footprint; do
      nice -n 19 cargo build --locked --profile "$p" -p "$f"
    done
  done
fi

# zip -9 of FILE as `bootstrap` (as sam and Lambda take it).
zip_bytes() {
  local tmp; tmp="$(mktemp -d)"
  cp "$1" "$tmp/bootstrap"
  (cd "$tmp" && zip -q -9 -X bootstrap.zip bootstrap)
  stat -c %s "$tmp/bootstrap.zip"
  rm -rf "$tmp"
}

infra/local/with-stack.sh bash -c '
  set -euo pipefail
  # The table, FIFO queue, inbox, bus and the Stripe key and webhook signing secret on this moto
  # (provision.py prints KEY=VALUE lines): the events function reads both secrets at init.
  while IFS= read -r line; do export "$line"; done < <(
    "$CHARGE_ONCE_VENV/bin/python" infra/local/provision.py "$AWS_ENDPOINT_URL" http://127.0.0.1:12111)
  target="$1"; arm_target="$2"; out="$3"; runs="$4"; charges="$5"; batch="$6"; zip_bytes="$7"; shift 7
  eval "$zip_bytes"
  for p in "$@"; do
    dir="$target/$p"
    settings="$(sed -n "/^\[profile\.$p\]/,/^\[/p" Cargo.toml | grep -vE "^\[|^#|^\s*$|inherits" | sed "s/ = /=/; s/\"//g" | paste -sd, - | sed "s/,/, /g")"
    # Per-crate overrides: those of the profile itself and those of release (which it inherits).
    crates="$(grep -cE "^\[profile\.($p|release)\.package\." Cargo.toml || true)"
    if [ "${crates:-0}" -gt 0 ]; then settings="$settings; per-crate opt-level for $crates crates ([profile.*.package.*] in Cargo.toml)"; fi
    rows=()
    for f in checkout charge reconciler events notify; do
      name="$f"; [ "$f" = events ] && name=webhook
      row="\"function\":\"$name\""
      if [ "$p" = release ] && [ -f "$arm_target/lambda/$f/bootstrap" ]; then
        a="$arm_target/lambda/$f/bootstrap"
        row+=",\"arm64_binary_bytes\":$(stat -c %s "$a"),\"arm64_zip_bytes\":$(zip_bytes "$a")"
      fi
      if [ -x "$dir/$f" ]; then
        "$dir/footprint" init "$out/init-$p-$f.json" "$name" "$dir/$f" "$runs"
        row+=",\"binary_bytes\":$(stat -c %s "$dir/$f"),\"zip_bytes\":$(zip_bytes "$dir/$f"),\"init\":$(cat "$out/init-$p-$f.json")"
      elif [ "$row" = "\"function\":\"$name\"" ]; then
        echo "footprint: $f not built ($dir/$f, $arm_target/lambda/$f): left out" >&2; continue
      else
        echo "footprint: $dir/$f not built: no init for $f" >&2
      fi
      rows+=("{$row}")
    done
    # CPU time per charge: the least of three runs (one run on a shared machine varied by 30 %).
    for i in 1 2 3; do
      "$dir/footprint" cpu "$out/cpu-$p-$i.json" "$charges" "$batch" logs
    done
    best="$(for i in 1 2 3; do printf "%s %s\n" "$(grep -o "\"cpu_ns\": *[0-9]*" "$out/cpu-$p-$i.json" | grep -o "[0-9]*$")" "$out/cpu-$p-$i.json"; done | sort -n | head -1 | cut -d" " -f2)"
    cp "$best" "$out/cpu-$p.json"
    "$dir/footprint" rss "$out/rss-$p.json" "$batch"
    (IFS=,; printf "{\"profile\":\"%s\",\"settings\":\"%s\",\"functions\":[%s],\"cpu\":%s,\"rss\":%s}\n" \
      "$p" "$settings" "${rows[*]}" "$(cat "$out/cpu-$p.json")" "$(cat "$out/rss-$p.json")") > "$out/footprint-$p.json"
  done
' footprint "$target" "$arm_target" "$out" "$runs" "$charges" "$batch" "$(declare -f zip_bytes)" $profiles
