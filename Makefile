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

.PHONY: book test venv vendor chromium clean

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

clean:
	rm -rf _build
