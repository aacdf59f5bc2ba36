# Thin wrappers; each target is one line of shell. The venv and the control-plane
# binaries are set up on first use (`make test` and `make demo` need nothing else).
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | sha256sum | cut -c1-12)
PYTEST_ARGS ?=

.PHONY: venv controlplane image dist release test test-unit test-integration test-faults lint demo bench soak clean

venv: $(STAMP)
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV); $(BIN)/pip install -q --upgrade pip && $(BIN)/pip install -q -c constraints.txt -e '.[test,dev]' && rm -f $(VENV)/.installed-* && touch $@

controlplane: venv
	$(BIN)/python -c "from controlplane.binaries import main; main()"

# The OCI image (buildah + mmdebstrap, installed on first use) into dist/; up to date = no-op.
image:
	hack/image.sh

# The CLI as a wheel and an sdist into dist/ (`pipx install dist/*.whl`; hack/dist.sh).
dist:
	hack/dist.sh

# The image, its SBOM (syft: SPDX + CycloneDX), the wheel and sdist, the packaged chart,
# the image's digest and labels, and SHA256SUMS, into dist/ (docs/release.md); prints the
# digest and the command that pushes the image.
release: venv
	hack/release.sh

lint: venv
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/mypy

# The three set-up steps are independent (the image is built from Debian packages and
# the package sources, the control plane from Go modules), so a cold run does them side
# by side: the image's downloads and unpacking overlap the Go builds' CPU.
test: venv
	$(MAKE) --no-print-directory -j3 --output-sync=line lint controlplane image
	$(BIN)/pytest -ra -p no:cacheprovider --durations=25 -n 3 --dist loadfile $(PYTEST_ARGS) tests

test-unit: venv
	$(BIN)/pytest -ra -p no:cacheprovider $(PYTEST_ARGS) tests/unit

test-integration: controlplane
	$(BIN)/pytest -ra -p no:cacheprovider $(PYTEST_ARGS) tests/integration

# Builds (once) only what the demo's cluster runs: Kubernetes 1.37's kube-apiserver, etcd,
# kube-controller-manager and hollow-node (controlplane/demo.py DEMO_BINARIES).
demo: venv
	$(BIN)/python -m controlplane.demo

bench: controlplane
	$(BIN)/python -m bench

# Scenarios that take real minutes (KCM's 15-minute PCR cleaner, the kubelet's token
# refresh, a managed CA rotation, the kubelet's certificate refresh at half-life); not part
# of `make test`. Three lines run side by side, each on its own cluster; the certificate
# refresh takes ~32 min.
soak: controlplane
	$(BIN)/pytest -ra -s -p no:cacheprovider $(PYTEST_ARGS) soak/test_long_wait.py & p=$$!; $(BIN)/pytest -ra -s -p no:cacheprovider $(PYTEST_ARGS) soak/test_kubelet_refresh.py & r=$$!; $(BIN)/pytest -ra -s -p no:cacheprovider $(PYTEST_ARGS) soak/test_token_refresh.py soak/test_managed_rotation.py; b=$$?; wait $$p; a=$$?; wait $$r; c=$$?; exit $$((a || b || c))

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
