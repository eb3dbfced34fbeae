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

.PHONY: setup export book test test-kernels lint unit nbval browser-check clean

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

# The kernels that execute the notebooks draw figures inline (the Agg backend exported above, for
# nbval and scripts, would leave the pages without their figures).
book: export $(MATHJAX)
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
test: setup lint
	OMP_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest tests notebooks --nbval-lax --nbval-current-env \
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
# to /tmp/site_shots. Exits non-zero on any failure.
browser-check: book
	$(PY) book/check_site.py book/_build/html

# The book as one PDF, offline: builds the site, then headless Chromium prints it in the order of
# book/_toc.yml (see book/make_pdf.py) -> book/_build/pdf/attention-derived.pdf
.PHONY: pdf
pdf: book
	$(PY) book/make_pdf.py book/_build/html -o book/_build/pdf/attention-derived.pdf

clean:
	rm -rf book/_build book/_static/mathjax .pytest_cache
