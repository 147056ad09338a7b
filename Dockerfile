# One image for the sidecar, the operator, the audit job and the Python client (coordinated.client); the
# entrypoint is the `coordinated` CLI.
#   docker build -t coordinated-cluster:0.2.0 .
#   docker build --build-arg BASE_IMAGE=python:3.13-slim-trixie --build-arg JAVA_PACKAGE=openjdk-21-jre-headless .
ARG BASE_IMAGE=python:3.12-slim-bookworm

# ---- s3a jars: hadoop-aws and the AWS SDK modules it uses (spark-jobs/s3a/pom.xml), from Maven Central ------
FROM maven:3-eclipse-temurin-17 AS s3a-jars
COPY spark-jobs/s3a/pom.xml /s3a/pom.xml
RUN mvn -q -B -f /s3a/pom.xml dependency:copy-dependencies -DoutputDirectory=/s3a/jars

# ---- build: a virtualenv with the dependencies, then the project itself -------------------------------
FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src

# Dependency layer: rebuilt only when a pyproject.toml changes, not on every source edit. The client
# (client/, a distribution of its own that the project pins) comes from this checkout, its dependencies
# from the index.
COPY pyproject.toml ./
COPY client/pyproject.toml client/
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
c = tomllib.load(open('client/pyproject.toml', 'rb'))['project']; \
extras = p['optional-dependencies']; \
own = [r for r in p['dependencies'] if not r.startswith(c['name'])]; \
print('\n'.join(own + c['dependencies'] + extras['operator'] + extras['audit']))" > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt

COPY README.md ./
COPY client/ client/
COPY core/ core/
COPY s3/ s3/
COPY sidecar/ sidecar/
COPY operator/ operator/
COPY spark-jobs/ spark-jobs/
COPY tools/ tools/
RUN pip install --no-deps ./client . \
 && python -c "from coordinated.client import Client, AsyncClient, Lock, LeaderElection" \
 && find /opt/venv -name '__pycache__' -prune -exec rm -rf {} + \
 && rm -rf /opt/venv/lib/python3*/site-packages/pyspark/examples /opt/venv/lib/python3*/site-packages/pyspark/data

# ---- runtime: the base image, a Java runtime for Spark, the virtualenv, a non-root user ---------------
FROM ${BASE_IMAGE} AS runtime
ARG JAVA_PACKAGE=openjdk-17-jre-headless
RUN apt-get update \
 && apt-get install -y --no-install-recommends "${JAVA_PACKAGE}" \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 coordinated \
 && useradd --uid 10001 --gid 10001 --home-dir /data --no-create-home --shell /usr/sbin/nologin coordinated \
 && groupadd --gid 185 spark \
 && useradd --uid 185 --gid 185 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin spark \
 && install -d -o 10001 -g 10001 /data /reports

COPY --from=build /opt/venv /opt/venv
# s3a:// for the audit of the history archive, in pyspark's jars folder: on the driver's and executors' classpath.
COPY --from=s3a-jars /s3a/jars/ /tmp/s3a-jars/
RUN cp /tmp/s3a-jars/*.jar /opt/venv/lib/python3*/site-packages/pyspark/jars/ && rm -rf /tmp/s3a-jars
# Spark on Kubernetes (spark-jobs/k8s/): the driver's entry file, the driver/executor entrypoint, and the
# pod template the spark-operator manifests name. Spark's pods run as uid 185 (the `spark` user above).
COPY spark-jobs/audit_main.py /app/spark-jobs/audit_main.py
COPY spark-jobs/k8s/spark-entrypoint.sh /usr/local/bin/spark-entrypoint.sh
COPY spark-jobs/k8s/pod-template.yaml /opt/coordinated/pod-template.yaml
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYSPARK_PYTHON=/opt/venv/bin/python

# The release the image's packages call themselves (pyproject.toml's version; tests/image checks they agree).
ARG VERSION=0.2.0
LABEL org.opencontainers.image.title="coordinated-cluster" org.opencontainers.image.version="${VERSION}"

USER 10001:10001
WORKDIR /data
# 9200: client HTTP API, 9300: transport (peer protocol), 8000/8080: operator metrics and liveness.
EXPOSE 9200 9300 8000 8080
ENTRYPOINT ["coordinated"]
CMD ["--help"]
