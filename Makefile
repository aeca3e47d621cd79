# stackpin: `make demo` sets up and runs the main job on the shipped profiles; `make test` runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STACKPIN := $(BIN)/stackpin
PROFILES := profiles

.PHONY: setup demo test bench lint schema docs crds clean

$(BIN)/stackpin: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
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

test: setup
	$(BIN)/pytest

bench: setup
	$(BIN)/python bench/run.py

lint: setup
	$(BIN)/ruff check stackpin tests bench scripts devkit
	$(BIN)/mypy stackpin

# Regenerate the checked-in JSON Schema and profile reference from the models.
schema: setup
	$(STACKPIN) schema > schema/stackprofile.schema.json
docs: setup
	$(BIN)/python scripts/gen_profile_reference.py > docs/profile-reference.md

# The bundled CRDs' schemas as JSON, so validation does not parse 1.5 MB of YAML on every start.
crds: setup
	$(BIN)/python scripts/extract_crd_schemas.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache
