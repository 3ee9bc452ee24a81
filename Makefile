# Two commands for a fresh machine (see README):
#   make book   execute every chapter (full profile) and render the HTML book into _build/html
#   make test   pytest: unit tests, every notebook in the smoke profile, a smoke book build + browser check
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Nothing reaches the hub, ever, in the book build or the tests.
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export PYDEVD_DISABLE_FILE_VALIDATION := 1

.PHONY: book test venv vendor chromium clean gpu-wheels

$(STAMP): requirements.txt pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

venv: $(STAMP)

# Read-time JavaScript (widgets, RequireJS, MathJax) from the npm registry into _vendor/, pinned by
# ci/vendor/package-lock.json (no CDN at read time). Needs npm; a no-op when already up to date.
vendor:
	bash ci/vendor_widgets.sh

# Debian's Chromium at /usr/bin/chromium for the browser check (never `playwright install`).
chromium:
	@test -x /usr/bin/chromium || { s=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$s apt-get update -qq && $$s apt-get install -y -qq chromium >/dev/null; }

# The HTML is rendered even when a chapter fails (its page says so); the exit status still fails.
book: venv vendor
	@status=0; \
	$(PY) ci/run_notebooks.py --profile full --out _build/executed --results _build/results || status=$$?; \
	$(PY) ci/build_book.py --executed _build/executed --out . || status=1; \
	exit $$status

# transformers 5.10.2 (DeepSpec's pin) with the dependency versions it needs, overlaid on the venv by
# tests/test_transformers_range.py: the engine is tested at both ends of pyproject.toml's range.
TF_OLD := .venv-tf510
$(TF_OLD)/.installed: tests/requirements-transformers-5.10.txt $(STAMP)
	rm -rf $(TF_OLD)
	$(PY) -m pip install -q --no-deps --target $(TF_OLD) -r tests/requirements-transformers-5.10.txt
	touch $@

test: venv vendor chromium $(TF_OLD)/.installed
	$(PY) -m pytest tests --durations=12

# Wheels for the borrowed GPU machine (DEVELOPERS.md): ci/gpu_wheels.txt as Python 3.12 manylinux x86-64
# wheels in .gpu-wheels/ (git-ignored), which a device call carries; ci/gpu_check.py installs them there
# with no index. pip prefers the platforms in the order given: the oldest glibc first. The folder is
# rebuilt whole when the list changes, then held to the list and to what one device call carries.
GPU_WHEELS := .gpu-wheels
GPU_PLATFORMS := manylinux2014_x86_64 $(foreach n,17 24 26 27 28 31 34 35,manylinux_$(n:%=2_%)_x86_64)
$(GPU_WHEELS)/.built: ci/gpu_wheels.txt
	rm -rf $(GPU_WHEELS) $(GPU_WHEELS).partial
	python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
	  $(addprefix --platform ,$(GPU_PLATFORMS)) -r ci/gpu_wheels.txt -d $(GPU_WHEELS).partial
	python3 ci/gpu_check.py --check-wheels $(GPU_WHEELS).partial
	mv $(GPU_WHEELS).partial $(GPU_WHEELS)
	touch $@

gpu-wheels: $(GPU_WHEELS)/.built

clean:
	rm -rf _build
