#!/usr/bin/env bash
# Fetches the jars Spark needs to read s3a:// (spark-jobs/s3a/pom.xml: hadoop-aws for the Hadoop version pyspark
# bundles, and the AWS SDK v2 modules it uses) from Maven Central with Maven, once, and caches them by the pom's
# content under ~/.cache/coordinated-cluster/s3a-jars/. Prints the folder. The audit finds them there
# (coordinated.audit.s3), and the image build copies them into pyspark's jars folder.
#   scripts/fetch-s3a-jars.sh [PYSPARK_JARS]   the pyspark jars folder whose Hadoop must match (default: .venv's)
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
POM="$REPO/spark-jobs/s3a/pom.xml"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/coordinated-cluster/s3a-jars"
jars="${1:-$(find "$REPO/.venv/lib" -maxdepth 4 -type d -path '*/pyspark/jars' | head -1)}"

pinned="$(sed -n 's#.*<hadoop.version>\(.*\)</hadoop.version>.*#\1#p' "$POM")"
bundled="$(find "$jars" -name 'hadoop-client-api-*.jar' -printf '%f\n' 2>/dev/null | sed 's/hadoop-client-api-\(.*\)\.jar/\1/')"
if [[ $bundled != "$pinned" ]]; then
  echo "fetch-s3a-jars: pyspark's jars ($jars) hold Hadoop [$bundled] but $POM pins hadoop.version [$pinned]:" \
    "set it (and aws.sdk.version, from hadoop-project's pom of that release) to match" >&2
  exit 1
fi

key="$(sha256sum "$POM" | cut -c1-16)"
dir="$CACHE/hadoop-$pinned-$key"
if [[ ! -f $dir/.complete ]]; then
  command -v mvn >/dev/null || { echo "fetch-s3a-jars: Maven (mvn) is required: scripts/system-deps.sh test installs it" >&2; exit 1; }
  echo "fetch-s3a-jars: fetching hadoop-aws $pinned and its AWS SDK modules (once; cached in $dir)" >&2
  rm -rf "$dir" && mkdir -p "$dir"
  timeout 900 mvn -q -B -f "$POM" dependency:copy-dependencies -DoutputDirectory="$dir" >&2
  touch "$dir/.complete"
  find "$CACHE" -mindepth 1 -maxdepth 1 ! -path "$dir" -exec rm -rf {} +
fi
echo "$dir"
