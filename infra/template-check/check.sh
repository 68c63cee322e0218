#!/usr/bin/env bash
# Checks template.yaml offline with pinned tools, in each configuration of Stripe events in: the
# template itself (defaults: neither source, no public route) and the copies configurations.py
# writes to a temporary directory with other parameter Defaults (webhook secret set; event source
# set; both with the events key):
#   1. cfn-lint (one run over all the copies)
#   2. sam validate --lint (the SAM transform plus cfn-lint's SAM rules), per configuration
#   3. expand.py: the template after the SAM transform has no `*` in any IAM Action/Resource (both
#      branches of a conditional statement) and attaches no managed policy beyond
#      AWSLambdaBasicExecutionRole and AWSXrayWriteOnlyAccess.
# About 20 s on two cores once the venv exists (the configurations add about 12 s).
# The tools live in their own venv, .venv-template (override with CHARGE_ONCE_TEMPLATE_VENV), kept
# apart from .venv (moto + stripe, infra/local/with-stack.sh) so neither reinstalls the other's
# pins. Installs on first use and whenever requirements.txt changes. Exits non-zero on any finding.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${CHARGE_ONCE_TEMPLATE_VENV:-$root/.venv-template}"
requirements="$here/requirements.txt"
"$root/infra/local/pyenv.sh" "$venv" "$requirements" .template-check.sha256 template-check

export SAM_CLI_TELEMETRY=0
# sam validate needs a region for the transform; nothing is sent to AWS.
export AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}"
cd "$root"

configs="$(mktemp -d)"
trap 'rm -rf "$configs"' EXIT
"$venv/bin/python" "$here/configurations.py" template.yaml "$configs" >"$configs/written"
mapfile -t copies <"$configs/written"
templates=(template.yaml "${copies[@]}")

echo "== cfn-lint $("$venv/bin/cfn-lint" --version | awk '{print $2}') template.yaml + ${#copies[@]} configurations"
"$venv/bin/cfn-lint" "${templates[@]}"
echo "ok"

echo "== sam validate --lint ($("$venv/bin/sam" --version))"
for t in "${templates[@]}"; do
  "$venv/bin/sam" validate --lint --region us-east-1 --template-file "$t"
done

# Once: the transform keeps Fn::If as it is, so its output is the same for every configuration
# (expand.py checks both branches of each conditional statement).
echo "== IAM after the SAM transform"
"$venv/bin/python" "$here/expand.py" template.yaml
