# Every target installs what it needs into a local virtualenv (.venv) first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-fast lint simulate clean test-deps bench

# The client is its own distribution (client/), which the project depends on: both are installed in one go,
# so that pip takes the client from this checkout.
$(STAMP): pyproject.toml client/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ./client -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## The embedded default: a local multi-node cluster, then an audit of its histories.
demo: $(STAMP)
	bash scripts/system-deps.sh demo
	$(BIN)/coordinated demo

## Lint, type-check and run every test (CI runs exactly this).
test: test-deps lint
	$(BIN)/pytest

## What the tests start besides Python: system packages (iptables, etcd, Maven, ...), the Kubernetes
## binaries for the API-server tests, helm, kubeconform and the S3-compatible server (built once through the Go
## module proxy, then cached), and the jars Spark reads s3a:// with (from Maven Central, cached).
test-deps: $(STAMP)
	bash scripts/system-deps.sh test
	bash e2e/lib/build-kubernetes.sh
	bash scripts/install-tools.sh >/dev/null
	bash scripts/fetch-s3a-jars.sh >/dev/null

## The quick loop: lint and the tests that start no process (under 2 minutes). The markers integration and spark
## come from the fixtures a test uses (PROCESS_FIXTURES in tests/conftest.py); --no-processes fails any test
## that starts a process some other way.
test-fast: lint
	$(BIN)/pytest --no-processes -m "not slow and not spark and not integration and not e2e"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m coordinated.operator.generate --check
	$(BIN)/python -m coordinated.sidecar.web.openapi --check

## The headline benchmarks (docs/performance.md): ours against etcd at 3 and 5 nodes (latency, throughput),
## watch fan-out and history bytes per write, in one run written to $(BENCH_RESULTS) (about 10 minutes; it
## waits for $(BENCH_LOCK), so runs on a shared machine take turns). The [bench] extra comes with the dev one;
## etcd from Debian. `python -m bench --help` lists every suite; `python -m bench report FILE` renders the page.
BENCH_RESULTS ?= bench-results.json
BENCH_LOCK ?= /tmp/bench.lock
bench: $(STAMP)
	bash scripts/system-deps.sh bench
	flock $(BENCH_LOCK) $(BIN)/python -m bench headline --out $(BENCH_RESULTS)

simulate: $(STAMP)
	$(BIN)/coordinated simulate

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis

## A local single-node Kubernetes for the e2e suite (see docs/e2e.md); KUBECONFIG=e2e/.state/kubeconfig.
.PHONY: e2e-up e2e-down e2e-smoke e2e-test
e2e-up:
	bash e2e/up.sh

## The e2e suite (e2e/test_*.py) against that cluster: installs the chart with helm, then checks the product.
e2e-test: $(STAMP)
	bash e2e/test.sh

## Stops everything e2e-up started and restores the machine (always run it, even after a failure).
e2e-down:
	bash e2e/down.sh

## Proves the harness: API server, node, a pod from the local image, a Service with endpoints.
e2e-smoke:
	bash e2e/smoke.sh

## Jepsen-style fault run: 5 nodes in network namespaces, a seeded nemesis, linearizability + audit checks
## (docs/chaos.md). Short by default (under 3 minutes); CHAOS_MINUTES=30 for a long run, CHAOS_SEED=N to replay.
.PHONY: chaos chaos-cleanup
chaos: $(STAMP)
	@trap '$(BIN)/python -m chaos cleanup' EXIT INT TERM; $(BIN)/python -m chaos run

## Removes what a chaos run left behind (processes in its namespaces, namespaces, bridge, host rules).
chaos-cleanup:
	$(BIN)/python -m chaos cleanup
