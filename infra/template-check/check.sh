#!/usr/bin/env bash
# Checks template.yaml offline with pinned tools:
#   1. cfn-lint
#   2. sam validate --lint (the SAM transform plus cfn-lint's SAM rules)
#   3. expand.py: the template after the SAM transform has no `*` in any IAM Action/Resource and
#      attaches no managed policy beyond AWSLambdaBasicExecutionRole and AWSXrayWriteOnlyAccess.
# The tools live in their own venv, .venv-template (override with CHARGE_ONCE_TEMPLATE_VENV), kept
# apart from .venv (moto + stripe, infra/local/with-stack.sh) so neither reinstalls the other's
# pins. Installs on first use and whenever requirements.txt changes. Exits non-zero on any finding.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${CHARGE_ONCE_TEMPLATE_VENV:-$root/.venv-template}"
requirements="$here/requirements.txt"
stamp="$venv/.template-check.sha256"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"

if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "template-check: installing $(grep -v '^#' "$requirements" | tr '\n' ' ')into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
  echo "$want" >"$stamp"
fi

export SAM_CLI_TELEMETRY=0
# sam validate needs a region for the transform; nothing is sent to AWS.
export AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}"
cd "$root"

echo "== cfn-lint $("$venv/bin/cfn-lint" --version | awk '{print $2}') template.yaml"
"$venv/bin/cfn-lint" template.yaml
echo "ok"

echo "== sam validate --lint ($("$venv/bin/sam" --version))"
"$venv/bin/sam" validate --lint --region us-east-1 --template-file template.yaml

echo "== IAM after the SAM transform"
"$venv/bin/python" "$here/expand.py" template.yaml
