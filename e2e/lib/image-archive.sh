#!/usr/bin/env bash
# Packs layer tarballs into a docker-archive (what `docker save` writes), which
# `ctr images import` reads. No registry, no daemon.
# usage: image-archive.sh OUT.tar REF CONFIG_JSON LAYER.tar...
#   CONFIG_JSON is the image's "config" object (Entrypoint, User, Env, ...).
set -euo pipefail
out=$1 ref=$2 config=$3; shift 3
work=$(mktemp -d "${out%/*}/.archive.XXXXXX")
trap 'rm -rf "$work"' EXIT

layers=()
for l in "$@"; do
  d=$(sha256sum "$l" | cut -d' ' -f1)
  mkdir -p "$work/$d" && ln "$l" "$work/$d/layer.tar" 2>/dev/null || cp "$l" "$work/$d/layer.tar"
  layers+=("$d")
done
python3 - "$work" "$ref" "$config" "${layers[@]}" <<'PY'
import hashlib, json, sys
work, ref, config, layers = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4:]
cfg = json.dumps({
    "architecture": "amd64", "os": "linux", "config": config,
    "created": "1970-01-01T00:00:00Z",
    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + d for d in layers]},
}, sort_keys=True).encode()
name = hashlib.sha256(cfg).hexdigest() + ".json"
open(f"{work}/{name}", "wb").write(cfg)
manifest = [{"Config": name, "RepoTags": [ref], "Layers": [f"{d}/layer.tar" for d in layers]}]
open(f"{work}/manifest.json", "w").write(json.dumps(manifest))
PY
tar -C "$work" -cf "$out.tmp" . && mv "$out.tmp" "$out"
