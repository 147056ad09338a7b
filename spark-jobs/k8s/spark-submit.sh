#!/usr/bin/env bash
# Run the audit on Kubernetes with spark-submit in cluster mode. Needs rbac.yaml applied first.
#   NAMESPACE=prod CLUSTER=my-cluster REPLICAS=3 spark-jobs/k8s/spark-submit.sh
# SPARK_SUBMIT_EXTRA adds spark-submit options (split on spaces), e.g. smaller CPU requests on a small node:
#   SPARK_SUBMIT_EXTRA="--conf spark.kubernetes.driver.request.cores=250m" spark-jobs/k8s/spark-submit.sh
# The sidecar URLs assume the operator's per-pod DNS names (StatefulSet pods behind a headless
# service named <cluster>-headless); adjust SIDECARS for other layouts.
set -euo pipefail

NAMESPACE="${NAMESPACE:-default}"
CLUSTER="${CLUSTER:-coordinated}"
REPLICAS="${REPLICAS:-3}"
IMAGE="${IMAGE:-coordinated-cluster:0.1.0}"
APISERVER="${APISERVER:-$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')}"
HERE="$(cd "$(dirname "$0")" && pwd)"

if [[ -z "${SIDECARS:-}" ]]; then
  urls=()
  for ((i = 0; i < REPLICAS; i++)); do
    urls+=("http://${CLUSTER}-${i}.${CLUSTER}-headless.${NAMESPACE}.svc:9200")
  done
  SIDECARS="$(IFS=,; echo "${urls[*]}")"
fi
read -r -a extra <<<"${SPARK_SUBMIT_EXTRA:-}"

exec spark-submit \
  --master "k8s://${APISERVER}" \
  --deploy-mode cluster \
  --name "coordinated-audit-${CLUSTER}" \
  --conf spark.kubernetes.namespace="${NAMESPACE}" \
  --conf spark.kubernetes.container.image="${IMAGE}" \
  --conf spark.kubernetes.container.image.pullPolicy=Never \
  --conf spark.kubernetes.authenticate.driver.serviceAccountName=coordinated-audit \
  --conf spark.kubernetes.driver.podTemplateFile="${HERE}/pod-template.yaml" \
  --conf spark.kubernetes.executor.podTemplateFile="${HERE}/pod-template.yaml" \
  --conf spark.kubernetes.pyspark.pythonVersion=3 \
  --conf spark.executor.instances="${EXECUTORS:-2}" \
  --conf spark.executor.cores=1 \
  --conf spark.executor.memory=1g \
  --conf spark.driver.memory=1g \
  --conf spark.sql.shuffle.partitions=16 \
  "${extra[@]}" \
  local:///app/spark-jobs/audit_main.py \
  --from-cluster "${SIDECARS}" \
  --report-dir /reports/"${CLUSTER}" \
  "$@"
