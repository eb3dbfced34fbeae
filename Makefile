# Two commands do all the set-up on a fresh machine:
#   make book   -> .venv, package, export, executed notebooks -> book/_build/html/index.html
#   make test   -> .venv, package, lint, unit tests + export-sync check + nbval on every notebook
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
MATHJAX := book/_static/mathjax/tex-chtml.js
# Tests, CI and the book read the datasets from ../shared/data unless the caller says otherwise.
SHARED_DATA := $(abspath ../shared/data)
export TRANSFORMER_LIB_DATA ?= $(if $(wildcard $(SHARED_DATA)),$(SHARED_DATA),)
# Notebooks run their small CPU configuration everywhere except where a GPU is asked for.
export MPLBACKEND := Agg
export PYTHONHASHSEED := 0

.PHONY: setup export book test test-kernels lint quick unit nbval browser-check clean translator serve tags \
  browser-driver

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 > /dev/null
	touch $(STAMP)

setup: $(STAMP)

$(MATHJAX):
	# MathJax is served from the site itself so math renders with no network.
	npm install --silent --no-audit --no-fund --prefix book/_build/npm mathjax@3.2.2
	mkdir -p book/_static/mathjax
	cp -r book/_build/npm/node_modules/mathjax/es5/. book/_static/mathjax/

export: setup
	$(VENV)/bin/nbdev-export

# The page "Try the translator" (book/translator.md) runs the translator in the browser: ONNX
# Runtime Web and tokenizers.js, pinned in book/translator/package-lock.json and installed from npm,
# and the shipped translator exported by `python -m transformer_lib.export`, all copied into
# book/_static/translator/ (book/translator/build_assets.py); nothing is loaded from another host.
TRANSLATOR_VENDOR := book/_static/translator/vendor/ort.wasm.min.mjs
TRANSLATOR_MODEL := book/_static/translator/model/manifest.json
$(TRANSLATOR_VENDOR): book/translator/package.json book/translator/package-lock.json book/translator/build_assets.py
	npm ci --silent --no-audit --no-fund --prefix book/translator
	$(PY) book/translator/build_assets.py vendor

$(TRANSLATOR_MODEL): pretrained/multi30k-de-en-cpu.pt transformer_lib/export.py book/translator/build_assets.py | setup
	$(PY) book/translator/build_assets.py model

translator: $(TRANSLATOR_VENDOR) $(TRANSLATOR_MODEL)

# What the page checks drive Firefox with (book/browsers.py): npm's puppeteer-core, pinned in
# book/browser/package-lock.json, over WebDriver BiDi. Tests only; nothing of it is served.
BROWSER_DRIVER := book/browser/node_modules/puppeteer-core/package.json
$(BROWSER_DRIVER): book/browser/package.json book/browser/package-lock.json
	npm ci --silent --no-audit --no-fund --prefix book/browser
	touch $(BROWSER_DRIVER)

browser-driver: $(BROWSER_DRIVER)

# The kernels that execute the notebooks draw figures inline (the Agg backend exported above, for
# nbval and scripts, would leave the pages without their figures).
book: export $(MATHJAX) translator
	MPLBACKEND=module://matplotlib_inline.backend_inline \
	$(VENV)/bin/jupyter-book build . --config book/_config.yml --toc book/_toc.yml \
	  --path-output book -W -n --keep-going
	@echo "The site is at book/_build/html/index.html"

lint: setup
	$(VENV)/bin/ruff check

# Unit tests (tests/, including the export-sync check) and nbval executing every notebook,
# in one pytest run so CI ends on one summary line, with the slowest items listed. Two workers
# (pytest-xdist), each given whole files (--dist loadfile keeps a notebook's cells together and in
# order), and one torch thread per process: with other work on these 2 cores, torch's two threads
# per process made small models 5-9x slower than one thread did. TEST_WORKERS=0 runs serially.
TEST_WORKERS ?= 2
TEST_THREADS ?= 1
test: setup lint translator browser-driver
	OMP_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest tests notebooks --nbval-lax --nbval-current-env \
	  -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --durations=15

# The two halves of `make test`, for a faster loop: the library's tests (tests/, a few minutes) and
# nbval executing every notebook. `make quick` is the inner loop: the library's tests without those
# marked slow (tests/conftest.py says what the markers mean).
quick: setup lint
	OMP_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest tests -p no:cacheprovider -n $(TEST_WORKERS) \
	  --dist loadfile -m "not slow" -q

unit: setup lint
	OMP_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest tests -p no:cacheprovider -n $(TEST_WORKERS) \
	  --dist loadfile --durations=15

nbval: setup
	OMP_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest notebooks --nbval-lax --nbval-current-env \
	  -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --durations=15

# The same suite under PyTorch's other CPU kernel sets (ATEN_CPU_CAPABILITY): they add floating-point
# numbers in another order, as another processor would. Run before each release; every live check
# against a record must hold under each (results/kernel-audit-cpu.json measured how far they move).
# `make test-kernels KERNELS=avx2` runs one set.
KERNELS ?= default avx2
test-kernels: setup lint
	@for k in $(KERNELS); do echo "== ATEN_CPU_CAPABILITY=$$k"; \
	  ATEN_CPU_CAPABILITY=$$k $(MAKE) --no-print-directory test || exit 1; done

# Loads every page of the built site in headless Chromium (see book/check_site.py); screenshots go
# to /tmp/site_shots. Then drives the page "Try the translator" in headless Chromium and Firefox
# against the PyTorch translator and each other (book/check_translator.py: tokens, translations,
# attention, bad input, the file picker, the page at 1280 and 390 px; screenshots go to
# /tmp/translator_shots). Exits non-zero on any failure.
browser-check: book browser-driver
	$(PY) book/check_site.py book/_build/html
	$(PY) book/check_translator.py book/_build/html --shots /tmp/translator_shots

# The built site on http://127.0.0.1:8000 (WebAssembly is not loaded from file://), cross-origin
# isolated so that the translator may use more than one thread. PORT=8001 for another port.
PORT ?= 8000
serve:
	$(PY) book/serve.py book/_build/html --port $(PORT)

# The book as one PDF, offline: builds the site, then headless Chromium prints it in the order of
# book/_toc.yml (see book/make_pdf.py) -> book/_build/pdf/attention-derived.pdf
.PHONY: pdf
pdf: book
	$(PY) book/make_pdf.py book/_build/html -o book/_build/pdf/attention-derived.pdf

# The release tags v0.2.0, v0.3.0, v0.4.0, ... that a repository published from `main` alone lacks: each is
# made at the commit where its release was made (tools/release_tags.py); `git push origin --tags`
# then publishes them, and the notebooks' set-up cells find the tags they install.
tags:
	$(PYTHON) tools/release_tags.py

clean:
	rm -rf book/_build book/_static/mathjax book/_static/translator/vendor book/_static/translator/model \
	  book/translator/node_modules book/browser/node_modules .pytest_cache
