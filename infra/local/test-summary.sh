#!/usr/bin/env bash
# Runs a `cargo test` command as it is (its output unchanged), then ends on one line that adds up
# every test binary's `test result:` line: passed, failed, ignored. Exits with the command's status.
#
#   infra/local/test-summary.sh cargo test --workspace
set -uo pipefail
log="$(mktemp "${TMPDIR:-/tmp}/test-summary.XXXXXX")"
trap 'rm -f "$log"' EXIT
"$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
awk -v status="$status" '
  /^test result:/ {
    for (i = 1; i <= NF; i++) {
      if ($(i+1) ~ /^passed;?$/) passed += $i
      if ($(i+1) ~ /^failed;?$/) failed += $i
      if ($(i+1) ~ /^ignored;?$/) ignored += $i
    }
    binaries++
  }
  END {
    verdict = (status == 0) ? "ok" : "FAILED (exit " status ")"
    printf "tests: %d passed, %d failed, %d ignored, in %d test binaries: %s\n",
      passed, failed, ignored, binaries, verdict
  }' "$log"
exit "$status"
