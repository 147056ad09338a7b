#!/usr/bin/env bash
# Run the audit on Kubernetes with spark-submit in cluster mode. Needs rbac.yaml applied first.
#   NAMESPACE=prod CLUSTER=my-cluster REPLICAS=3 spark-jobs/k8s/spark-submit.sh
# Secure by default, like the operator's clusters: https with the cluster's CA (only `ca.crt` of the Secret
# CA_SECRET, default <cluster>-certs, is mounted in the driver; never the pods' keys that share it) and the
# reader token (key `token` of TOKEN_SECRET, default <cluster>-reader) in the driver's $COORDINATED_TOKEN,
# through a driver pod template written for the run (a temporary file, removed on exit).
# For a cluster created without them (spec.tls.enabled / spec.auth.enabled false): TLS=false, AUTH=false.
# Driver and executors carry the label coordinated.dev/client=<cluster>, which the cluster's NetworkPolicy
# admits to the client port unless spec.clientAccess says otherwise.
# Exits with the audit's exit code (0 ok, 1 violations, 2 unusable input), read from the driver's pod.
# SPARK_SUBMIT_EXTRA adds spark-submit options (split on spaces), e.g. smaller CPU requests on a small node:
#   SPARK_SUBMIT_EXTRA="--conf spark.kubernetes.driver.request.cores=250m" spark-jobs/k8s/spark-submit.sh
# The sidecar URLs assume the operator's per-pod DNS names (StatefulSet pods behind a headless
# service named <cluster>-headless); adjust SIDECARS for other layouts.
# INPUT audits history files instead (JSONL or compacted Parquet, comma-separated paths or Hadoop URIs) that
# the driver and every executor can read, e.g. a folder on the report volume (ReadWriteMany when executors run
# on several nodes); no sidecar is asked, so TLS, AUTH, SIDECARS and REPLICAS play no part:
#   INPUT=/reports/archive/2026-11 EXECUTORS=4 CLUSTER=my-cluster spark-jobs/k8s/spark-submit.sh
# INPUT may also be the history archive in object storage (s3://BUCKET/PREFIX, read through s3a://; the jars
# are in the image): S3_ENDPOINT names an S3-compatible service (default: AWS), and S3_CREDENTIALS_SECRET a Secret
# whose keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY go into the driver's and the executors' environment by
# reference (without it, the pods' service account's workload identity or the node's role is used):
#   INPUT=s3://histories/prod S3_ENDPOINT=http://minio.storage:9000 S3_CREDENTIALS_SECRET=s3-keys \
#     CLUSTER=my-cluster spark-jobs/k8s/spark-submit.sh
# EXECUTORS (default 2) sets how many executors the audit's tasks spread over. Each driver and executor pod asks
# for DRIVER_REQUEST_CORES / EXECUTOR_REQUEST_CORES of CPU (default 250m: Spark's own default, a whole core per
# pod, leaves the executors of the default run Pending for ever on a 2-CPU node).
# A pod of the run that the scheduler cannot place is reported with the scheduler's reason at once; after
# PENDING_TIMEOUT seconds (default 300) of that the run is stopped (its pods deleted) and the script exits 3.
# spark-submit is taken from SPARK_SUBMIT, else from PATH, else from the repository's .venv (`make install`).
set -euo pipefail

NAMESPACE="${NAMESPACE:-default}"
CLUSTER="${CLUSTER:-coordinated}"
REPLICAS="${REPLICAS:-3}"
IMAGE="${IMAGE:-coordinated-cluster:0.2.0}"
TLS="${TLS:-true}"
AUTH="${AUTH:-true}"
CA_SECRET="${CA_SECRET:-${CLUSTER}-certs}"
TOKEN_SECRET="${TOKEN_SECRET:-${CLUSTER}-reader}"
HERE="$(cd "$(dirname "$0")" && pwd)"
CA_DIR=/etc/coordinated/tls

if [[ -n ${INPUT:-} ]]; then
  TLS=false AUTH=false  # nothing to fetch: the files are read directly
fi
for setting in TLS AUTH; do
  case "${!setting}" in
    true | false) ;;
    *)
      echo "spark-submit.sh: ${setting} must be true or false, not '${!setting}'" >&2
      exit 2
      ;;
  esac
done
EXECUTORS="${EXECUTORS:-2}"
if [[ ! $EXECUTORS =~ ^[1-9][0-9]{0,3}$ ]]; then
  echo "spark-submit.sh: EXECUTORS must be a whole number from 1 to 9999, not '${EXECUTORS}'" >&2
  exit 2
fi
DRIVER_REQUEST_CORES="${DRIVER_REQUEST_CORES:-250m}"
EXECUTOR_REQUEST_CORES="${EXECUTOR_REQUEST_CORES:-250m}"
PENDING_TIMEOUT="${PENDING_TIMEOUT:-300}"
if [[ ! $PENDING_TIMEOUT =~ ^[1-9][0-9]*$ ]]; then
  echo "spark-submit.sh: PENDING_TIMEOUT must be a whole number of seconds, not '${PENDING_TIMEOUT}'" >&2
  exit 2
fi
if [[ -z ${SPARK_SUBMIT:-} ]]; then
  SPARK_SUBMIT="$(command -v spark-submit || true)"
  venv_bin="$(cd "${HERE}/../.." && pwd)/.venv/bin"
  if [[ -z $SPARK_SUBMIT && -x $venv_bin/spark-submit ]]; then
    SPARK_SUBMIT="$venv_bin/spark-submit"
    # pyspark's spark-submit finds its SPARK_HOME with the `python3` on PATH: it must be the .venv's, which has
    # pyspark (without it: "Could not find valid SPARK_HOME", exit 127).
    export PATH="$venv_bin:$PATH"
  fi
fi
if [[ -z $SPARK_SUBMIT || ! -x $SPARK_SUBMIT ]]; then
  echo "spark-submit.sh: spark-submit not found (${SPARK_SUBMIT:-not on PATH}): run \`make install\` in the" \
    "repository (pyspark in .venv), put a Spark distribution's bin/ on PATH, or set SPARK_SUBMIT" >&2
  exit 2
fi
APISERVER="${APISERVER:-$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')}"

if [[ -n ${INPUT:-} ]]; then
  IFS=, read -r -a sources <<<"$INPUT"
else
  if [[ -z "${SIDECARS:-}" ]]; then
    scheme=http
    [[ $TLS == true ]] && scheme=https
    urls=()
    for ((i = 0; i < REPLICAS; i++)); do
      urls+=("${scheme}://${CLUSTER}-${i}.${CLUSTER}-headless.${NAMESPACE}.svc:9200")
    done
    SIDECARS="$(IFS=,; echo "${urls[*]}")"
  fi
  sources=(--from-cluster "${SIDECARS}")
fi
read -r -a extra <<<"${SPARK_SUBMIT_EXTRA:-}"

# On any exit: spark-submit runs in the background (it ignores Ctrl-C there), so it is stopped here, and the
# driver's temporary pod template is removed.
submit_pid="" temporary_template=""
cleanup() {
  [[ -z $submit_pid ]] || kill "$submit_pid" 2>/dev/null || true
  [[ -z $temporary_template ]] || rm -f "$temporary_template"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Finds this run's pods (the driver's, to read its exit code, and any the scheduler cannot place).
run_id="$(date +%s)-$$-${RANDOM}"
conf=(
  --conf "spark.kubernetes.driver.label.coordinated.dev/audit-run=${run_id}"
  --conf "spark.kubernetes.executor.label.coordinated.dev/audit-run=${run_id}"
  --conf "spark.kubernetes.driver.request.cores=${DRIVER_REQUEST_CORES}"
  --conf "spark.kubernetes.executor.request.cores=${EXECUTOR_REQUEST_CORES}"
  --conf "spark.kubernetes.driver.label.coordinated.dev/client=${CLUSTER}"
  --conf "spark.kubernetes.executor.label.coordinated.dev/client=${CLUSTER}"
)
audit_args=()
if [[ -n ${S3_ENDPOINT:-} ]]; then
  audit_args+=(--s3-endpoint "$S3_ENDPOINT")
fi
if [[ -n ${S3_CREDENTIALS_SECRET:-} ]]; then
  for key in AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY; do
    conf+=(--conf "spark.kubernetes.driver.secretKeyRef.${key}=${S3_CREDENTIALS_SECRET}:${key}")
    conf+=(--conf "spark.kubernetes.executor.secretKeyRef.${key}=${S3_CREDENTIALS_SECRET}:${key}")
  done
fi
driver_template="${HERE}/pod-template.yaml"
if [[ $TLS == true || $AUTH == true ]]; then
  # The driver's pod template for this run: the shipped one plus the token and the CA. Both come from
  # Secrets that the kubelet reads when it starts the driver (its service account needs no Secret access).
  # Only the `ca.crt` item is mounted: the Secret also holds the pods' private keys, all of which
  # spark.kubernetes.driver.secrets.* would mount. `optional`: a cluster without TLS or tokens has no such
  # Secret, and the audit then says what it misses (exit 2) instead of the driver pod waiting for ever.
  # Executors need neither: the driver ships both to the fetching tasks.
  driver_template="$(mktemp "${TMPDIR:-/tmp}/coordinated-audit-driver.XXXXXX")"
  temporary_template="$driver_template"
  awk -v tls="$TLS" -v auth="$AUTH" -v ca_secret="$CA_SECRET" -v token_secret="$TOKEN_SECRET" -v dir="$CA_DIR" '
    { print }
    /^      env:$/ {
      found["env"]++
      if (auth == "true") {
        print "        - name: COORDINATED_TOKEN"; print "          valueFrom:"; print "            secretKeyRef:"
        print "              name: " token_secret; print "              key: token"; print "              optional: true"
      }
    }
    /^      volumeMounts:$/ {
      found["mounts"]++
      if (tls == "true") {
        print "        - name: ca"; print "          mountPath: " dir; print "          readOnly: true"
      }
    }
    /^  volumes:$/ {
      found["volumes"]++
      if (tls == "true") {
        print "    - name: ca"; print "      secret:"; print "        secretName: " ca_secret; print "        optional: true"
        print "        items:"; print "          - key: ca.crt"; print "            path: ca.crt"
      }
    }
    END { exit !(found["env"] == 1 && found["mounts"] == 1 && found["volumes"] == 1) }
  ' "${HERE}/pod-template.yaml" >"$driver_template" || {
    echo "spark-submit.sh: ${HERE}/pod-template.yaml lacks the container's env or volumeMounts, or the pod's volumes" >&2
    exit 2
  }
  if [[ $TLS == true ]]; then
    audit_args+=(--ca-file "${CA_DIR}/ca.crt")
  fi
fi

"${SPARK_SUBMIT}" \
  --master "k8s://${APISERVER}" \
  --deploy-mode cluster \
  --name "coordinated-audit-${CLUSTER}" \
  --conf spark.kubernetes.namespace="${NAMESPACE}" \
  --conf spark.kubernetes.container.image="${IMAGE}" \
  --conf spark.kubernetes.container.image.pullPolicy=Never \
  --conf spark.kubernetes.authenticate.driver.serviceAccountName=coordinated-audit \
  --conf spark.kubernetes.driver.podTemplateFile="${driver_template}" \
  --conf spark.kubernetes.executor.podTemplateFile="${HERE}/pod-template.yaml" \
  --conf spark.kubernetes.pyspark.pythonVersion=3 \
  --conf spark.executor.instances="${EXECUTORS}" \
  --conf spark.executor.cores=1 \
  --conf spark.executor.memory=1g \
  --conf spark.driver.memory=1g \
  --conf spark.sql.shuffle.partitions=16 \
  "${conf[@]}" \
  "${extra[@]}" \
  local:///app/spark-jobs/audit_main.py \
  "${sources[@]}" \
  --report-dir /reports/"${CLUSTER}" \
  "${audit_args[@]}" \
  "$@" &
submit_pid=$!

# While spark-submit waits for the driver, watch for pods of this run that the scheduler cannot place: say why
# at once (the scheduler's own message), and give up after PENDING_TIMEOUT seconds instead of waiting for ever.
declare -A unschedulable_since=()
unschedulable() { # NAME<TAB>MESSAGE lines, one per pod of this run that is Pending and not scheduled
  kubectl -n "$NAMESPACE" get pods -l "coordinated.dev/audit-run=${run_id}" --field-selector=status.phase=Pending \
    -o jsonpath='{range .items[*]}{.metadata.name}{"\t"}{.status.conditions[?(@.type=="PodScheduled")].status}{"\t"}{.status.conditions[?(@.type=="PodScheduled")].message}{"\n"}{end}' \
    2>/dev/null || true
}
gave_up=""
poll=$((${PENDING_POLL_SECONDS:-5} * 5))
while kill -0 "$submit_pid" 2>/dev/null; do
  for ((tick = 0; tick < poll; tick++)); do
    kill -0 "$submit_pid" 2>/dev/null || break 2
    sleep 0.2
  done
  while IFS=$'\t' read -r pod scheduled message; do
    [[ -n $pod && $scheduled == False ]] || continue
    if [[ -z ${unschedulable_since[$pod]:-} ]]; then
      unschedulable_since[$pod]=$SECONDS
      echo "spark-submit.sh: pod ${pod} cannot be scheduled: ${message}" >&2
    elif ((SECONDS - unschedulable_since[$pod] >= PENDING_TIMEOUT)); then
      gave_up="pod ${pod} could not be scheduled for ${PENDING_TIMEOUT} s: ${message}"
    fi
  done < <(unschedulable)
  if [[ -n $gave_up ]]; then
    echo "spark-submit.sh: giving up: ${gave_up}. Lower DRIVER_REQUEST_CORES, EXECUTOR_REQUEST_CORES or" \
      "EXECUTORS, or free the node's CPU; the run's pods are deleted" >&2
    kill "$submit_pid" 2>/dev/null || true
    wait "$submit_pid" 2>/dev/null || true
    submit_pid=""
    kubectl -n "$NAMESPACE" delete pods -l "coordinated.dev/audit-run=${run_id}" --wait=false >/dev/null 2>&1 || true
    exit 3
  fi
done
submitted=0
wait "$submit_pid" || submitted=$?
submit_pid=""
[[ $submitted -eq 0 ]] || exit "$submitted"

# spark-submit exits 0 in cluster mode whatever the driver did (Spark's SPARK-26365), so the audit's own exit
# code (1: violations, 2: unusable input) is read from the finished driver container.
driver_exit="$(kubectl -n "$NAMESPACE" get pods -l "coordinated.dev/audit-run=${run_id},spark-role=driver" \
  -o jsonpath='{.items[0].status.containerStatuses[0].state.terminated.exitCode}' 2>/dev/null)" || driver_exit=""
if [[ ! $driver_exit =~ ^[0-9]+$ ]]; then
  echo "spark-submit.sh: the driver's exit code is unknown (no finished pod labelled coordinated.dev/audit-run=${run_id}); read its log" >&2
  exit 0
fi
exit "$driver_exit"
