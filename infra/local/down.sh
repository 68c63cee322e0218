#!/usr/bin/env bash
# Stops what infra/local/up.sh started, by the PIDs it recorded in
# ${LOCAL_STACK_DIR:-<repo>}/.local-stack.pids: moto, stripe-sim, and cargo lambda watch's process
# group (watch and the function processes it spawned). Nothing else.
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${LOCAL_STACK_DIR:-$root}"
pids="$dir/.local-stack.pids"
if [ -f "$pids" ]; then
  while read -r name pid; do
    case "$pid" in '' | *[!0-9]*) continue ;; esac
    if [ "$name" = watch-group ]; then
      kill -TERM -- "-$pid" 2>/dev/null || true
    else
      kill -TERM "$pid" 2>/dev/null || true
    fi
  done <"$pids"
  # Give them a moment, then make sure.
  for _ in $(seq 1 25); do
    alive=
    while read -r name pid; do
      case "$pid" in '' | *[!0-9]*) continue ;; esac
      kill -0 "$pid" 2>/dev/null && alive=1
    done <"$pids"
    [ -z "$alive" ] && break
    sleep 0.2
  done
  while read -r name pid; do
    case "$pid" in '' | *[!0-9]*) continue ;; esac
    if [ "$name" = watch-group ]; then
      kill -KILL -- "-$pid" 2>/dev/null || true
    else
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done <"$pids"
  rm -f "$pids"
fi
echo "local stack stopped"
