#!/usr/bin/env bash
# The previous release (the revision compat/previous-release names), as the upgrade test installs it: its image,
# built by image.sh from that revision's sources on the same base layer as this checkout's, and its chart,
# packaged by helm (which follows the chart's CRD link). Both come from a git worktree of this clone at that
# revision, removed afterwards, and are cached by the revision and the builder's recipe in
# $CACHE/previous-release-image/ (the newest entry only).
# Prints the release as KEY=VALUE lines: revision, version, image, archive, chart.
set -euo pipefail
source "$(dirname "$0")/common.sh"

revision=$(python3 "$E2E_DIR/release.py" previous-revision)
commit=$(git -C "$REPO_DIR" rev-parse --verify --quiet "$revision^{commit}") ||
  die "the previous release's revision $revision (compat/previous-release) is not in this clone; a shallow clone has to fetch its history first (git fetch --unshallow)"
builder=$(cat "$E2E_DIR/lib/image.sh" "$E2E_DIR/lib/image-archive.sh" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)
cache="$CACHE/previous-release-image"
out="$cache/$commit-$builder"
if [[ ! -s $out/release.env ]]; then
  t0=$SECONDS
  rm -rf "$out" && mkdir -p "$out"
  tree=$(mktemp -d "${TMPDIR:-/tmp}/coordinated-previous-release.XXXXXX")
  cleanup() {
    git -C "$REPO_DIR" worktree remove --force "$tree" 2>/dev/null || rm -rf "$tree"
    git -C "$REPO_DIR" worktree prune
  }
  trap cleanup EXIT
  git -C "$REPO_DIR" worktree add --detach --quiet "$tree" "$commit"
  version=$(release_version "$tree")
  log "building the previous release ${commit:0:12} ($version): its image and its chart"
  archive="$out/coordinated-cluster-$version-${commit:0:12}.tar"
  "$E2E_DIR/lib/image.sh" --source "$tree" --out "$archive" >/dev/null
  chart=$(helm package "$tree/charts/coordinated-cluster" --destination "$out" | sed -n 's/^Successfully packaged chart and saved it to: //p')
  [[ -f $chart ]] || die "helm package of the previous release's chart failed"
  printf 'revision=%s\nversion=%s\nimage=coordinated-cluster:%s\narchive=%s\nchart=%s\n' \
    "$commit" "$version" "$version" "$archive" "$chart" >"$out/release.env.tmp"
  mv "$out/release.env.tmp" "$out/release.env"
  find "$cache" -mindepth 1 -maxdepth 1 ! -path "$out" -exec rm -rf {} +
  log "previous release built in $((SECONDS - t0))s"
fi
cat "$out/release.env"
