#!/usr/bin/env bash
# Stops what infra/deploy-local/up.sh started (by the PIDs it wrote): stripe-sim, and MiniStack's
# process group with the function processes it spawned.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${DEPLOY_LOCAL_DIR:-$root/target/deploy-local}"
pids="$dir/pids"
[ -s "$pids" ] || exit 0
while read -r what pid; do
  case "$what" in
    *-group) kill -TERM -- "-$pid" 2>/dev/null || true ;;
    *) kill -TERM "$pid" 2>/dev/null || true ;;
  esac
done <"$pids"
sleep 1
while read -r what pid; do
  case "$what" in
    *-group) kill -KILL -- "-$pid" 2>/dev/null || true ;;
    *) kill -KILL "$pid" 2>/dev/null || true ;;
  esac
done <"$pids"
rm -f "$pids"
