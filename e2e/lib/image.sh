#!/usr/bin/env bash
# Builds the project image and the pause image as docker-archive tarballs under
# $CACHE/image, without a Docker daemon or a registry, following the repo's Dockerfile:
#   layer 1: Debian bookworm (debootstrap minbase) + python3 + a Java runtime + the
#            users coordinated (10001) and spark (185) + /data, /reports
#   layer 2: /opt/venv with `pip install ./client .[operator,audit]`, the s3a:// jars in pyspark's jars folder
#            (scripts/fetch-s3a-jars.sh), and the Spark-on-Kubernetes files
# Prints the paths of the two archives (pause first). Cached by content.
#
# image.sh --source CHECKOUT --out ARCHIVE: the image of another checkout instead (e2e/lib/previous-release.sh
# builds the previous release's so), tagged with that checkout's release version, on the same base layer; the
# caller caches it. Prints ARCHIVE.
set -euo pipefail
source "$(dirname "$0")/common.sh"
source_dir=$REPO_DIR out=
while (($#)); do
  case $1 in
    --source) source_dir=$(cd "$2" && pwd); shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) die "image.sh: unknown argument $1 (usage: image.sh [--source CHECKOUT --out ARCHIVE])" ;;
  esac
done
[[ $source_dir == "$REPO_DIR" || -n $out ]] || die "image.sh --source needs --out"

dir="$CACHE/image"
mkdir -p "$dir"
BASE_PKGS=python3,python3-venv,openjdk-17-jre-headless,procps,ca-certificates
# What the Dockerfile installs: the extras (the client, client/, is a dependency of its own), and the package
# folders the image is built from (its cache key).
IMAGE_EXTRAS=operator,audit
IMAGE_SOURCES="core s3 sidecar operator spark-jobs tools client"

# Pause image: one static binary.
pause_tar="$dir/pause.tar"
if [[ ! -f $pause_tar ]]; then
  rm -rf "$dir/pause" && mkdir -p "$dir/pause/root"
  gcc -static -Os -o "$dir/pause/root/pause" "$E2E_DIR/lib/pause.c"
  tar --numeric-owner --owner=0 --group=0 -C "$dir/pause/root" -cf "$dir/pause/layer.tar" pause
  "$E2E_DIR/lib/image-archive.sh" "$pause_tar" "$PAUSE_IMAGE" '{"Entrypoint":["/pause"],"User":"65535:65535"}' \
    "$dir/pause/layer.tar"
  rm -rf "$dir/pause"
fi

# Base layer, keyed by its recipe.
base_key=$(echo "bookworm minbase $BASE_PKGS users v2" | sha256sum | cut -c1-16)
base="$dir/base-$base_key"
if [[ ! -f $base/layer.tar ]]; then
  log "debootstrap bookworm + $BASE_PKGS (a few minutes)"
  rm -rf "$base" && mkdir -p "$base"
  timeout 1200 debootstrap --variant=minbase --include="$BASE_PKGS" bookworm "$base/rootfs" \
    http://deb.debian.org/debian >"$base/debootstrap.log" 2>&1 || die "debootstrap failed: see $base/debootstrap.log"
  # The same users and folders as the Dockerfile's runtime stage.
  chroot "$base/rootfs" sh -ec '
    groupadd --gid 10001 coordinated
    useradd --uid 10001 --gid 10001 --home-dir /data --no-create-home --shell /usr/sbin/nologin coordinated
    groupadd --gid 185 spark
    useradd --uid 185 --gid 185 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin spark
    install -d -o 10001 -g 10001 /data /reports'
  # Drop what an image does not need: apt caches, docs, man pages.
  rm -rf "$base/rootfs"/var/cache/apt/* "$base/rootfs"/var/lib/apt/lists/* \
    "$base/rootfs"/usr/share/doc/* "$base/rootfs"/usr/share/man/* "$base/rootfs"/var/log/*.log
  tar --numeric-owner -C "$base/rootfs" -cf "$base/layer.tar.tmp" . && mv "$base/layer.tar.tmp" "$base/layer.tar"
  find "$dir" -maxdepth 1 -name 'base-*' ! -path "$base" -exec rm -rf {} +
fi

# App layer on the base: /opt/venv with the checkout's packages, tagged with its release version.
# build_app CHECKOUT ARCHIVE. The wheels are built on the host (same CPython minor as bookworm's, 3.11) so the
# chroot needs no network at all.
build_app() {
  local src=$1 image_tar=$2 version ref
  version=$(release_version "$src")
  ref="coordinated-cluster:$version"
  unset PIP_FIND_LINKS  # the host's pip setting names a folder the chroot lacks
  local py=${PYTHON:-python3}
  [[ $("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])') == 3.11 ]] ||
    die "$py must be CPython 3.11 (bookworm's python3) to build wheels for the image"
  # The client (client/) is a distribution of its own that the project pins: built in the same resolve, so
  # that pip takes it from this checkout. The folder keeps the dependencies' wheels between builds; the
  # project's own go first, so that another checkout's wheel of the same version is never installed.
  log "building wheels for coordinated-client and coordinated-cluster[$IMAGE_EXTRAS] $version"
  rm -f "$dir"/wheels/coordinated_cluster-*.whl "$dir"/wheels/coordinated_client-*.whl
  "$py" -m pip wheel -q --wheel-dir "$dir/wheels" "${src}/client" "${src}[$IMAGE_EXTRAS]"
  local root="$base/rootfs"
  local app=(opt/venv app usr/local/bin/spark-entrypoint.sh opt/coordinated)
  (cd "$root" && rm -rf "${app[@]}" tmp/wheels) && cp -r "$dir/wheels" "$root/tmp/wheels"
  chroot "$root" python3 -m venv /opt/venv
  chroot "$root" /opt/venv/bin/pip install -q --no-index --no-cache-dir --find-links /tmp/wheels \
    --force-reinstall "coordinated-cluster[$IMAGE_EXTRAS]==$version"
  chroot "$root" /opt/venv/bin/coordinated --help >/dev/null || die "coordinated does not run in the image"
  chroot "$root" /opt/venv/bin/python -c "from coordinated.client import Client, AsyncClient, Lock, LeaderElection" ||
    die "the documented Python client (coordinated.client) does not import in the image"
  # The image's version label is the release its packages call themselves.
  local installed
  installed=$(chroot "$root" /opt/venv/bin/python -c \
    'import importlib.metadata as m; print(m.version("coordinated-cluster"), m.version("coordinated-client"))')
  [[ $installed == "$version $version" ]] ||
    die "the image of $ref holds coordinated-cluster and coordinated-client $installed, not $version"
  find "$root/opt/venv" -name __pycache__ -prune -exec rm -rf {} +
  rm -rf "$root"/opt/venv/lib/python3*/site-packages/pyspark/{examples,data}
  # hadoop-aws and the AWS SDK modules it uses, for the audit of the history archive (s3a://), on the classpath
  # of the driver and of every executor.
  local spark_jars s3a_jars
  spark_jars=$(echo "$root"/opt/venv/lib/python3*/site-packages/pyspark/jars)
  s3a_jars=$("$REPO_DIR/scripts/fetch-s3a-jars.sh" "$spark_jars")
  cp "$s3a_jars"/*.jar "$spark_jars/"
  install -D -m 644 "$src/spark-jobs/audit_main.py" "$root/app/spark-jobs/audit_main.py"
  install -D -m 755 "$src/spark-jobs/k8s/spark-entrypoint.sh" "$root/usr/local/bin/spark-entrypoint.sh"
  install -D -m 644 "$src/spark-jobs/k8s/pod-template.yaml" "$root/opt/coordinated/pod-template.yaml"
  tar --numeric-owner -C "$root" -cf "$dir/app-layer.tar" "${app[@]}"
  (cd "$root" && rm -rf "${app[@]}" tmp/wheels)
  local config='{"Entrypoint":["coordinated"],"Cmd":["--help"],"User":"10001:10001","WorkingDir":"/data",
    "ExposedPorts":{"9200/tcp":{},"9300/tcp":{},"8000/tcp":{},"8080/tcp":{}},
    "Env":["PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "PYTHONDONTWRITEBYTECODE=1","PYTHONUNBUFFERED=1","PYSPARK_PYTHON=/opt/venv/bin/python"],
    "Labels":{"org.opencontainers.image.title":"coordinated-cluster","org.opencontainers.image.version":"'"$version"'"}}'
  mkdir -p "$(dirname "$image_tar")"
  "$E2E_DIR/lib/image-archive.sh" "$image_tar" "$ref" "$config" "$base/layer.tar" "$dir/app-layer.tar"
  rm -f "$dir/app-layer.tar"
}

if [[ -n $out ]]; then
  [[ -f $out ]] || build_app "$source_dir" "$out"
  echo "$out"
  exit 0
fi

# This checkout's image, keyed by the project's sources.
src_key=$(cd "$REPO_DIR" && git ls-files -co --exclude-standard -- pyproject.toml README.md $IMAGE_SOURCES e2e/lib/image.sh \
  scripts/fetch-s3a-jars.sh |
  LC_ALL=C sort | xargs -d '\n' sha256sum | sha256sum | cut -c1-16)
image_tar="$dir/coordinated-cluster-$IMAGE_VERSION-$base_key-$src_key.tar"
if [[ ! -f $image_tar ]]; then
  build_app "$REPO_DIR" "$image_tar"
  # Keep only the newest project image archive.
  find "$dir" -maxdepth 1 -name 'coordinated-cluster-*.tar' ! -path "$image_tar" -delete
fi
echo "$pause_tar"
echo "$image_tar"
