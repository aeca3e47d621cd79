# stackpin: `make demo` sets up and runs the main job on the shipped profiles; `make test` runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STACKPIN := $(BIN)/stackpin
PROFILES := profiles

.PHONY: setup engine-env dynamo-env test-services demo demo-history demo-bench demo-upgrade demo-gitops demo-rollout test bench lint schema examples docs crds catalog clean

# Every extra (stackpin/extras.py): the demo and the tests use them all. `pip install stackpin` alone is the core.
$(BIN)/stackpin: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[all,test]'
	@touch $@

setup: $(BIN)/stackpin

# The demo locks against a local mirror of stand-ins (no registry or Hub is reachable here);
# the locks say so. Against a real site mirror: stackpin lock profiles --mirror nvcr.io=<mirror>.
DEMO_MIRROR := .demo/mirror

demo: setup
	$(STACKPIN) validate $(PROFILES)
	$(BIN)/python -m stackpin.demo $(DEMO_MIRROR) $(PROFILES)
	$(STACKPIN) lock $(PROFILES) --oci-layout $(DEMO_MIRROR)/oci --hf-cache $(DEMO_MIRROR)/hf
	$(STACKPIN) render --lockdir lockfiles --output-dir manifests
	$(STACKPIN) validate --manifests manifests
	$(MAKE) --no-print-directory demo-history
	$(MAKE) --no-print-directory demo-gitops
	$(MAKE) --no-print-directory demo-bench
	$(MAKE) --no-print-directory demo-upgrade

# The GB300 deployment's history: launch and tuned stacks promoted as revisions 1 and 2, then rolled
# back to 1 (revision 3). History is never rewritten in use; the demo alone recreates this one
# deployment's history from scratch on each run, with fixed times (SOURCE_DATE_EPOCH) and author, so
# the committed history/ and deployments/ come out byte for byte the same.
DEMO_DEPLOYMENT := dynamo/dsv41-flash@gb300-nvl72
DEMO_AUTHOR := STACKPIN_AUTHOR='stackpin demo <demo@stackpin.dev>'

demo-history: setup
	rm -rf history/$(DEMO_DEPLOYMENT) deployments/$(DEMO_DEPLOYMENT)
	SOURCE_DATE_EPOCH=1767225600 $(DEMO_AUTHOR) $(STACKPIN) promote lockfiles/gb300-launch.lock.yaml \
		-m "Launch stack: Dynamo 1.6.0, generic kernels, autotune off, disaggregated"
	SOURCE_DATE_EPOCH=1767312000 $(DEMO_AUTHOR) $(STACKPIN) promote lockfiles/gb300-tuned.lock.yaml \
		-m "Tuned stack: the five changes, colocated"
	$(STACKPIN) diff $(DEMO_DEPLOYMENT)@1 $(DEMO_DEPLOYMENT)@2
	SOURCE_DATE_EPOCH=1767315600 $(DEMO_AUTHOR) $(STACKPIN) rollback $(DEMO_DEPLOYMENT) --to 1 \
		-m "Roll back to the launch stack while the tuned one is investigated"
	$(STACKPIN) history $(DEMO_DEPLOYMENT)
	$(STACKPIN) history --check

# A staged rollout in GitOps mode (docs/rollout.md): revision 2 of the GB300 deployment to the example fleet
# (gitops/fleet/gb300-fleet.yaml: a canary rack, then two), as an Argo CD ApplicationSet whose RollingSync
# steps follow the waves and as Flux Kustomizations chained by dependsOn; the committed files come out the same.
FLEET := gitops/fleet/gb300-fleet.yaml
demo-gitops: setup
	$(STACKPIN) rollout gitops $(FLEET) $(DEMO_DEPLOYMENT)@2 --output-dir gitops/fleet/argocd --format argocd \
		--repo-url https://git.example.invalid/YOUR-ORG/stackpin.git --target-revision main --repo-path gitops/fleet/argocd
	$(STACKPIN) rollout gitops $(FLEET) $(DEMO_DEPLOYMENT)@2 --output-dir gitops/fleet/flux --format flux \
		--source stackpin --repo-path gitops/fleet/flux

# Measure: a small agent trace replayed against the simulated launch, tuned and Vera Rubin stacks
# (stackpin sim serve: a test bed, not hardware), then compare, plot, the HTML report and a capacity
# plan for 10,000 agents. Results, charts and the report go to .demo/bench/ (ignored: they are
# measurements, not sources). A few minutes on two cores.
demo-bench: setup
	$(BIN)/python -m stackpin.demo.bench .demo/bench

# A stack upgrade as a dependency update (docs/upgrades.md): stand-in engine packages on a package index on
# loopback (pypiserver), then upgrade check, propose (one blocked, one proposed), trial on the simulator
# (a slowed candidate refused, an honest one promoted as no-change). In .demo/upgrade/, made anew. ~1 min.
demo-upgrade: setup
	$(BIN)/python -m devkit.upgrade_demo .demo/upgrade

# A staged rollout across three racks (docs/rollout.md), each a kube-apiserver on loopback (../shared/envtest, as
# the cluster tests), the canary's endpoint the simulator of its live stack: revision 2 in two waves, then
# revision 3 (made slower on the canary) stopped after the canary and rolled back. Where no kube-apiserver can
# start it says so and stops. In .demo/rollout/, made anew. ~3 min.
demo-rollout: setup
	$(BIN)/python -m devkit.rollout_demo .demo/rollout

# An environment of its own, built once (scripts/pinned-venv.sh): $(call own-env,SCRIPT,VENV,DIR,WHAT). Where it
# cannot be built, the tests that need it skip and say why: the reason is kept in DIR/UNAVAILABLE.
define own-env
	@bash $(1) $(2) 2>$(3)-build.log \
		&& rm -f $(3)/UNAVAILABLE $(3)-build.log \
		|| { mkdir -p $(3); tail -n 1 $(3)-build.log > $(3)/UNAVAILABLE; rm -f $(3)-build.log; \
		     echo "$(4) environment not built: $$(cat $(3)/UNAVAILABLE)" >&2; }
endef

# The engine check's environment (tests/test_engine_check.py, `stackpin engines check`): the pinned vLLM from
# its published wheel with CPU torch, in .enginecheck/ (a few minutes and ~2 GB the first time, then a no-op).
# CI requires it.
ENGINE_ENV := .enginecheck/vllm-0.31.0
# SGLang's (tests/test_enginecheck_sglang.py): SGLang 0.5.21 from its wheel with CPU torch (~1.6 GB).
SGLANG_ENGINE_ENV := .enginecheck/sglang-0.5.21
engine-env:
	$(call own-env,scripts/install-engine-check.sh,$(ENGINE_ENV),.enginecheck,engine check)
	$(call own-env,scripts/install-engine-check.sh,$(SGLANG_ENGINE_ENV) --sglang 0.5.21,.enginecheck/sglang,SGLang engine check)

# The Dynamo bed's environment (`stackpin sim serve --backend dynamo`, tests/test_dynamo_bed.py): NVIDIA Dynamo
# 1.6.1's frontend and mocker in .dynamobed/ (about a minute and 700 MB the first time, then a no-op). CI
# requires it.
DYNAMO_ENV := .dynamobed/dynamo-1.6.1
dynamo-env:
	$(call own-env,scripts/install-dynamo-bed.sh,$(DYNAMO_ENV),.dynamobed,Dynamo bed)

# The services the tests run for real (Debian's docker-registry, openssl, chromium), installed when missing:
# a fresh machine needs nothing done by hand before `make test`.
test-services:
	@bash scripts/install-test-services.sh || echo "test services not installed: the registry and report tests will say so" >&2

# One worker per core (pytest-xdist): each worker starts its own registry and API server on free ports.
test: setup engine-env dynamo-env test-services
	$(BIN)/pytest -n auto

bench: setup
	$(BIN)/python bench/run.py

lint: setup
	$(BIN)/ruff check stackpin tests bench scripts devkit
	$(BIN)/mypy stackpin

# Regenerate the checked-in JSON Schema and profile reference from the models.
schema: setup
	$(STACKPIN) schema > schema/stackprofile.schema.json
	$(MAKE) --no-print-directory examples

# The packaged copies of profiles/ and schema/ that `stackpin init` writes from (tests/test_examples.py
# holds them byte for byte equal to these).
examples:
	rm -rf stackpin/examples/profiles stackpin/examples/schema
	mkdir -p stackpin/examples/profiles stackpin/examples/schema
	cp -R $(PROFILES)/. stackpin/examples/profiles/
	cp schema/stackprofile.schema.json stackpin/examples/schema/
docs: setup
	$(BIN)/python scripts/gen_profile_reference.py > docs/profile-reference.md

# The bundled CRDs' schemas as JSON Schema, so validation neither parses 1.5 MB of YAML nor translates it on every start.
crds: setup
	$(BIN)/python scripts/extract_crd_schemas.py

# The bundled catalog YAML's data as one JSON file, read in a tenth of the time (stackpin/catalog/__init__.py).
catalog: setup
	$(BIN)/python scripts/extract_catalog.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache .enginecheck .dynamobed
