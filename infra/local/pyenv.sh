#!/usr/bin/env bash
# Makes sure a Python venv holds a requirements file's pins, installing only when the file changed
# since the last install (its sha256 is kept in the venv under STAMP):
#
#   infra/local/pyenv.sh VENV REQUIREMENTS STAMP [LABEL]
#
# The venv is created with `python3 -m venv` (it keeps bin/pip, which the docs use, and never wipes
# an existing venv: .venv-template holds two requirement files). The packages are installed with uv
# (pinned below; PyPI's wheel, bootstrapped once into .venv-uv), which resolves and installs
# the same pins as pip in seconds where pip takes minutes (aws-sam-cli: 93 s with pip, 5 s with uv
# on two slow cores). `uv` on PATH is used as it is; if uv cannot be had or fails, pip does the
# install, so nothing here depends on uv beyond speed. Set CHARGE_ONCE_PIP=1 to use pip only.
set -euo pipefail

[ $# -ge 3 ] || { echo "usage: $0 VENV REQUIREMENTS STAMP [LABEL]" >&2; exit 2; }
venv="$1"
requirements="$2"
stamp="$venv/$3"
label="${4:-pyenv}"
uv_version="0.13.8"
root="$(cd "$(dirname "$0")/../.." && pwd)"

want="$(sha256sum "$requirements" | cut -d' ' -f1)"
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi

echo "$label: installing $(grep -v '^#' "$requirements" | tr '\n' ' ')into $venv" >&2
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"

find_uv() {
  [ "${CHARGE_ONCE_PIP:-0}" = 1 ] && return 1
  if command -v uv >/dev/null 2>&1; then
    command -v uv
    return 0
  fi
  local uvenv="${CHARGE_ONCE_UV_VENV:-$root/.venv-uv}"
  if ! "$uvenv/bin/uv" --version 2>/dev/null | grep -q "^uv $uv_version"; then
    rm -rf "$uvenv"
    python3 -m venv "$uvenv" >&2 &&
      "$uvenv/bin/pip" install --quiet --disable-pip-version-check "uv==$uv_version" >&2 ||
      return 1
  fi
  echo "$uvenv/bin/uv"
}

installed=0
if uv="$(find_uv)"; then
  if "$uv" pip install --quiet --python "$venv/bin/python" -r "$requirements"; then
    installed=1
  else
    echo "$label: uv failed; installing with pip instead" >&2
  fi
fi
if [ "$installed" = 0 ]; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
fi
echo "$want" >"$stamp"
