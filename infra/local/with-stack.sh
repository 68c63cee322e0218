#!/usr/bin/env bash
# Runs a command against the local stack:
#   - moto in server mode (DynamoDB + SQS) on a free loopback port, one request at a time
#     (infra/local/moto_serialized.py: moto's threads do not make conditional writes atomic),
#   - AWS_ENDPOINT_URL, dummy credentials and a region exported for the AWS SDK,
#   - the Python venv (.venv) with moto and the official `stripe` client, created on first use.
# moto is stopped by its PID when the command ends, whether it passed or failed.
#
#   infra/local/with-stack.sh cargo test --workspace
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${CHARGE_ONCE_VENV:-$root/.venv}"
requirements="$root/infra/local/requirements.txt"
"$root/infra/local/pyenv.sh" "$venv" "$requirements" .requirements.sha256 with-stack

port="$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
logdir="${TMPDIR:-/tmp}"
moto_log="$(mktemp "$logdir/moto.XXXXXX.log")"
# moto's own server with requests serialised: see moto_serialized.py for why.
"$venv/bin/python" "$root/infra/local/moto_serialized.py" -H 127.0.0.1 -p "$port" >"$moto_log" 2>&1 &
moto_pid=$!
cleanup() {
  kill "$moto_pid" 2>/dev/null || true
  wait "$moto_pid" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

for _ in $(seq 1 100); do
  if "$venv/bin/python" - "$port" <<'PY' 2>/dev/null; then break; fi
import sys, urllib.request
urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/moto-api/", timeout=1)
PY
  if ! kill -0 "$moto_pid" 2>/dev/null; then
    echo "with-stack: moto_server exited; its log:" >&2
    cat "$moto_log" >&2
    exit 1
  fi
  sleep 0.2
done
echo "with-stack: moto on 127.0.0.1:$port (pid $moto_pid)" >&2

export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
export AWS_ACCESS_KEY_ID=testing
export AWS_SECRET_ACCESS_KEY=testing
export AWS_REGION=us-east-1
export AWS_DEFAULT_REGION=us-east-1
export CHARGE_ONCE_VENV="$venv"

"$@"
