#!/usr/bin/env bash
# Stops what infra/local/up.sh started.
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
if [ -f "$root/.local-stack.pids" ]; then
  xargs -r kill <"$root/.local-stack.pids" 2>/dev/null || true
  rm -f "$root/.local-stack.pids"
fi
echo "local stack stopped"
