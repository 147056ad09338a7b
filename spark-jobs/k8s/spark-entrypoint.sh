#!/usr/bin/env bash
# Container entrypoint for Spark on Kubernetes with the project's image (pyspark from pip, no Spark
# distribution). spark-submit starts pods with "driver ..." or "executor" as arguments, as Spark's own
# images expect; anything else runs the `coordinated` CLI, the image's normal entrypoint.
# Install it in the image as /usr/local/bin/spark-entrypoint.sh (see spark-jobs/k8s/README.md).
set -euo pipefail

SPARK_HOME="${SPARK_HOME:-$(python3 -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')}"
export SPARK_HOME
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-python3}"

case "${1:-}" in
  driver)
    shift
    exec "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client \
      "$@"
    ;;
  executor)
    shift
    exec java \
      -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
      ${SPARK_JAVA_OPT_0:-} \
      -cp "$SPARK_HOME/jars/*" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL}" \
      --executor-id "${SPARK_EXECUTOR_ID}" \
      --cores "${SPARK_EXECUTOR_CORES}" \
      --app-id "${SPARK_APPLICATION_ID}" \
      --hostname "${SPARK_EXECUTOR_POD_IP}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
      --podName "${SPARK_EXECUTOR_POD_NAME}"
    ;;
  *)
    exec coordinated "$@"
    ;;
esac
