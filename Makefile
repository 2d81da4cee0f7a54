# hostpool-operator developer commands. Every target works on a fresh clone.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The Go the project writes (standard library only): the bench's compiled reference controller
# and the real nodes' volume helper, formatted and vetted.
# Every shell script of the project, for shellcheck.
SHELL_SCRIPTS = $(shell git ls-files '*.sh' 2>/dev/null)
GO_CHECK := (cd hack/bench/barecontroller && test -z "$$(gofmt -l .)" && go vet .) && \
	(cd hack/cluster/provisioner && test -z "$$(gofmt -l volumehelper)" && go vet ./volumehelper)

.PHONY: help venv image image-session-host test-image test-image-session-host test-keycloak test-packages test-prepare test test-faults test-unit lint shellcheck crds bench-engine bench-recommend bench bench-hosts bench-scale bench-portal bench-relay-flood bench-portal-events bench-update web-client tools tools-cluster tools-nodes cluster-up cluster-down demo demo-broker demo-desktop demo-portal demo-update demo-down clean

##@ Getting started

help: ## this list
	@awk 'BEGIN {FS = ":.*## "} /^##@ / {printf "\n%s\n", substr($$0, 5)} /^[a-z-]+:.*## / {printf "  %-20s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP) ## create .venv and install the project with its test extra

##@ Demo

demo: $(STAMP) tools-cluster ## the main job: control plane, operator, a depth-first pool and a logon burst
	$(PY) hack/demo/pool.py

demo-broker: $(STAMP) ## after make demo: Keycloak and hostpool-broker; users sign in and get an .rdp file
	$(PY) hack/demo/broker.py

demo-desktop: $(STAMP) ## after make demo (as root): an xrdp host, a desktop Pod on a real node, three users on real desktops via the broker and FreeRDP
	$(PY) hack/demo/desktop.py

demo-portal: $(STAMP) ## after make demo: Keycloak and the broker's portal in your browser (as root also make demo-desktop's desktops, opened in the page); prints the URL, users and passwords
	$(PY) hack/demo/portal.py

demo-update: $(STAMP) ## after make demo: a new image for the demo's pool, its hosts replaced as their users log off (kubectl hostpool rollout)
	$(PY) hack/demo/update.py

demo-down: ## stop the demo's operator, agents, broker and Keycloak, desktops, and the local control plane
	-test -x $(PY) && $(PY) hack/demo/desktop.py down
	-for p in broker keycloak; do test -f .cluster/$$p.pid && kill -- -$$(cat .cluster/$$p.pid) 2>/dev/null; rm -f .cluster/$$p.pid; done
	-test -f .cluster/operator.pid && kill $$(cat .cluster/operator.pid) 2>/dev/null; rm -f .cluster/operator.pid
	-for f in .cluster/agents/*.pid; do test -f "$$f" && kill $$(cat "$$f") 2>/dev/null; rm -f "$$f"; done
	hack/cluster/cluster.sh down .cluster

##@ Test

# shellcheck is Debian's package, installed here where missing (root) like the tests' tools.
shellcheck:
	@command -v shellcheck >/dev/null || hack/cluster/apt-install.sh shellcheck >/dev/null
	shellcheck $(SHELL_SCRIPTS)

lint: $(STAMP) shellcheck ## ruff (with its complexity and size gates), mypy, import-linter's layers, shellcheck, gofmt/go vet
	$(PY) -m ruff check operator tests hack
	$(PY) -m mypy
	$(VENV)/bin/lint-imports
	$(GO_CHECK)

# The suite's tests wait on servers far more than they compute: TEST_WORKERS pytest-xdist
# workers run files at once, each with its own control plane (tests/conftest.py: the groups
# and the order). TEST_WORKERS=0 runs it in one process. The few tests that read the
# machine's own load (marker solo) run afterwards, alone; the fault tests among them (they
# leave the API server busy) with a control plane of their own. Each test's time is in
# .cluster/test-report*.xml (hack/test_times.py sums them by tier). Three on two cores: with
# four every test ran slower (6,000 s of work where three do 4,000) and the whole took longer.
TEST_WORKERS ?= 3

test: lint test-prepare ## everything: lint, then unit, property, CRD, end-to-end and image tests (TEST_WORKERS at once)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope --durations=30 -m "not solo" --junitxml=.cluster/test-report.xml
	$(PY) -m pytest -m "solo and not faults" --durations=5 --junitxml=.cluster/test-report-solo.xml
	$(PY) -m pytest -m "solo and faults" --durations=5 --junitxml=.cluster/test-report-solo-faults.xml

test-unit: $(STAMP) ## pure tests only (no control plane needed)
	$(PY) -m pytest tests/unit

test-faults: $(STAMP) tools ## only the fault-injection tests (also part of make test)
	$(PY) -m pytest -m faults

# make test's set-up. First, alone, every Debian package the tests and their scripts may
# install (podman, mmdebstrap, containerd, xrdp, FreeRDP...: hack/cluster/apt-install.sh
# --list), so that nothing below runs apt-get while another part does. Then, cold, the Go
# tools take most of it and keep both cores busy, while the images (mmdebstrap, pip wheels)
# and Keycloak are mostly downloads: all at once. Warm, each is a cache hit of a second or two.
test-prepare: $(STAMP) test-packages
	@$(MAKE) --no-print-directory -j4 tools test-image test-image-session-host test-keycloak

# As root where apt-get is: what is missing of them, in one apt-get (elsewhere: says so).
test-packages: ## install every Debian package make test may need, at once (root; apt-install.sh --list)
	@hack/cluster/apt-install.sh --test-packages

# make test's: where podman cannot be had, says why and goes on (tests/e2e/test_image_live.py skips).
test-image: $(STAMP)
	@HOSTPOOL_PYTHON=$(PY) hack/cluster/image.sh --optional >/dev/null

# As root the desktop tests run too: their image is built here, beside the operator's.
test-image-session-host: $(STAMP)
	@if [ "$$(id -u)" = 0 ]; then HOSTPOOL_PYTHON=$(PY) hack/cluster/image.sh --optional --session-host >/dev/null; fi

# Keycloak from Maven Central for the sign-in tests; where it cannot be had they say why.
test-keycloak:
	@hack/cluster/keycloak.sh >/dev/null || echo "make: hack/cluster/keycloak.sh failed; the Keycloak tests will say why" >&2

##@ Benchmarks

BENCH_KUBECONFIG ?= $(KUBECONFIG)

bench: $(STAMP) tools-cluster ## logon storm against the API server: operator vs. the write ceiling
	@BENCH_KUBECONFIG="$(BENCH_KUBECONFIG)" $(PY) hack/bench/storm.py --plot .cluster/bench-storm.png

bench-engine: $(STAMP) ## placement decisions per second for 10..10,000 hosts
	$(PY) hack/bench/engine.py

bench-hosts: $(STAMP) tools-cluster ## 50 pod-backed hosts started on demand by a logon storm: hosts created vs. needed
	@$(PY) hack/bench/hosts.py

bench-scale: $(STAMP) tools-cluster ## 100,000 assigned sessions over 1,000 pools: operator start, storm, kill -9, a warm standby taking over (SCALE_* to scale down)
	@BENCH_KUBECONFIG="$(BENCH_KUBECONFIG)" $(PY) hack/bench/scale.py

bench-portal: $(STAMP) tools-cluster web-client ## (root) browser desktops through one broker: click -> first frame, relay CPU per MiB, 20 at once
	@$(PY) hack/bench/portal.py

bench-relay-flood: $(STAMP) tools-cluster web-client ## (root) one user flooding the browser-desktop relay: the broker's /readyz latency quiet and flooded
	@$(PY) hack/bench/portal.py relay_flood_bench.py

bench-portal-events: $(STAMP) tools-cluster ## what open portal pages cost the broker: memory and CPU for 100..1,000 event streams
	@$(PY) hack/bench/portal_events.py

bench-update: $(STAMP) tools-cluster ## a new image on a full pool of 50 pod-backed hosts under churn: WaitForLogoff and ForceLogoff, time to complete, hosts out of service, sessions ended
	@$(PY) hack/bench/update.py

bench-recommend: $(STAMP) ## recommend-plan over four weeks of 5,000 sessions a day: run time and the plan's figures
	$(PY) hack/bench/recommend.py

##@ Build

crds: $(STAMP) ## regenerate crds/ from the pydantic models
	$(PY) -m hostpool_operator.cli crds --output-dir crds

# The image is built with podman from Debian's packages, no registry needed (podman, runc and
# mmdebstrap are installed with apt-get where missing); cached, so a rebuild takes seconds.
image: $(STAMP) ## build the operator image localhost/hostpool-operator:<version> with podman (docs/install.md)
	HOSTPOOL_PYTHON=$(PY) hack/cluster/image.sh

image-session-host: $(STAMP) ## build the xrdp session-host image localhost/hostpool-session-host:<version> (operator/session-host.Containerfile)
	HOSTPOOL_PYTHON=$(PY) hack/cluster/image.sh --session-host

##@ Local cluster

tools: ## build kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kubectl, helm, kwok, promtool, prometheus into the cache
	hack/cluster/tools.sh

# The control plane alone: promtool is for the alert-rule tests (make test), not for a demo.
# The browser's RDP client (npm, from hack/portal/package-lock.json) in the tools' cache.
web-client: ## fetch the browser RDP client the broker serves with --web-client-dir (prints its directory)
	@hack/portal/web-client.sh

tools-cluster: ## the same without promtool and prometheus (what the demo, the benches and cluster-up need)
	hack/cluster/tools.sh --control-plane

# Real nodes (root): the kubelet and the pause image, built from the same Kubernetes module.
tools-nodes: ## the control plane's tools plus the kubelet, the pause image and the volumes' provisioner, for real nodes (docs/cluster.md)
	hack/cluster/tools.sh --control-plane --nodes

# HOSTPOOL_REAL_NODES=1 make cluster-up adds a real kubelet node (tools.sh then builds it too).
cluster-up: tools-cluster ## start a local control plane with 3 fake nodes (HOSTPOOL_REAL_NODES=N: N real nodes too); kubeconfig in .cluster/kubeconfig
	hack/cluster/cluster.sh up .cluster

cluster-down: ## stop the local control plane
	hack/cluster/cluster.sh down .cluster

clean: ## remove .venv, .cluster and the tools' caches of this clone (not ~/.cache)
	rm -rf $(VENV) .cluster .pytest_cache .mypy_cache .ruff_cache
