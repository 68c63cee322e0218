#!/usr/bin/env bash
# Generates the release fixtures of one release with that release's own code:
#
#   infra/release-fixtures/generate.sh <release-name> <commit>
#   infra/release-fixtures/generate.sh 2026-12-01 2f357ea
#
# 1. a detached git worktree of <commit> under a temp dir;
# 2. the writer (of the repo this script lives in) copied into it as the directory
#    tests/tests/release_fixture_writer/: infra/release-fixtures/writers/common/*.rs (main.rs, the
#    steps every release runs, and the parts an adapter may declare) and the release's adapter
#    writers/<release-name>.rs as release.rs. Cargo discovers the directory (its main.rs) as an
#    integration test of the worktree's `integration-tests` crate (tests/Cargo.toml is not touched,
#    nor anything else of the release);
# 3. `cargo test -p integration-tests --test release_fixture_writer` run under the worktree's own
#    infra/local/with-stack.sh (moto in server mode, AWS_ENDPOINT_URL etc.), with the Python venv of
#    this repo (CHARGE_ONCE_VENV, default <repo>/.venv: nothing reinstalls while the releases'
#    infra/local/requirements.txt is the same) and one CARGO_TARGET_DIR shared by all releases
#    (FX_TARGET_DIR, else CARGO_TARGET_DIR, else /work/fx-target), `--offline` when the release's
#    dependencies are all downloaded already;
# 4. the JSON files it wrote, plus release.json, replace tests/fixtures/releases/<release-name>/ of
#    this repo (only if the run passed);
# 5. the worktree is removed (also on failure).
#
# FX_WRITERS_AT=<rev> takes the writer (writers/common/*.rs and the adapter) from <rev> of this
# repository instead of its work tree: the writer as it was when it compiled against an earlier
# release (the README's table names that commit for each release). Nothing else changes.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 <release-name> <commit>" >&2
  exit 2
fi
release="$1"
commit="$2"
case "$release" in
  *[!A-Za-z0-9._-]* | "" | .*) echo "generate: bad release name: $release" >&2; exit 2 ;;
esac

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(git -C "$here" rev-parse --show-toplevel)"
writer_rel="infra/release-fixtures/writers/$release.rs"
writer="$repo/$writer_rel"
writers_at="${FX_WRITERS_AT:-}"
if [ -n "$writers_at" ]; then
  writers_at="$(git -C "$repo" rev-parse --verify --quiet "$writers_at^{commit}")" || {
    echo "generate: FX_WRITERS_AT is not a commit: $FX_WRITERS_AT" >&2
    exit 2
  }
  if ! git -C "$repo" cat-file -e "$writers_at:$writer_rel" 2>/dev/null; then
    echo "generate: no adapter $writer_rel at $writers_at" >&2
    exit 2
  fi
elif [ ! -f "$writer" ]; then
  echo "generate: no adapter $writer_rel (copy the newest adapter and adapt it to the release's API)" >&2
  exit 2
fi
sha="$(git -C "$repo" rev-parse --verify --quiet "$commit^{commit}")" || {
  echo "generate: not a commit: $commit" >&2
  exit 2
}
venv="${CHARGE_ONCE_VENV:-$repo/.venv}"
target="${FX_TARGET_DIR:-${CARGO_TARGET_DIR:-/work/fx-target}}"
dest="$repo/tests/fixtures/releases/$release"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/release-fixtures.XXXXXX")"
wt="$tmp/worktree-$release"
cleanup() {
  if [ -d "$wt" ]; then
    git -C "$repo" worktree remove --force "$wt" >/dev/null 2>&1 || true
  fi
  git -C "$repo" worktree prune || true
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

echo "generate: release $release = $sha; worktree $wt; CARGO_TARGET_DIR=$target" >&2
git -C "$repo" worktree add --detach --quiet "$wt" "$sha"
for need in tests/Cargo.toml infra/local/with-stack.sh; do
  if [ ! -f "$wt/$need" ]; then
    echo "generate: $sha has no $need; this script cannot run it" >&2
    exit 1
  fi
done
into="$wt/tests/tests/release_fixture_writer"
mkdir -p "$into"
if [ -n "$writers_at" ]; then
  echo "generate: the writer as it was at $writers_at" >&2
  common_rel="${here#"$repo"/}/writers/common"
  for f in $(git -C "$repo" ls-tree --name-only "$writers_at" "$common_rel/"); do
    case "$f" in *.rs) git -C "$repo" show "$writers_at:$f" >"$into/$(basename "$f")" ;; esac
  done
  git -C "$repo" show "$writers_at:$writer_rel" >"$into/release.rs"
else
  cp "$here"/writers/common/*.rs "$into/"
  cp "$writer" "$into/release.rs"
fi

offline=()
if (cd "$wt" && cargo fetch --locked --offline >/dev/null 2>&1); then
  offline=(--offline)
  echo "generate: dependencies already downloaded: building --offline" >&2
else
  echo "generate: some dependencies are not downloaded yet: building online" >&2
fi

out="$tmp/out"
mkdir -p "$out"
(
  cd "$wt"
  export CARGO_TARGET_DIR="$target"
  export CHARGE_ONCE_VENV="$venv"
  export FX_OUT="$out"
  infra/local/with-stack.sh cargo test --locked "${offline[@]}" -p integration-tests \
    --test release_fixture_writer -- --nocapture --test-threads=1
)

if ! ls "$out"/*.json >/dev/null 2>&1; then
  echo "generate: the writer wrote nothing into $out" >&2
  exit 1
fi
rm -rf "$dest"
mkdir -p "$dest"
cp "$out"/*.json "$dest/"
printf '{\n  "release": "%s",\n  "commit": "%s",\n  "writer": "%s"\n}\n' \
  "$release" "$sha" "$writer_rel" >"$dest/release.json"
echo "generate: wrote $(cd "$dest" && ls | tr '\n' ' ')into ${dest#"$repo"/}" >&2
