# sagaboard developer entry points. `make run` and `make test` are all you need.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV      := .venv
VPY       := $(VENV)/bin/python
STAMP     := $(VENV)/.install-stamp
HOST_PORT := 127.0.0.1:8000
DOCS_PORT := 127.0.0.1:8001

# Bytecode is cached (__pycache__/, ignored by git) even where the shell sets
# PYTHONDONTWRITEBYTECODE: without the cache every pytest worker compiles and rewrites
# the asserts of ~700 modules again, 15 s of each test run's start.
unexport PYTHONDONTWRITEBYTECODE

# test-fast's pytest workers: one more than the CPUs (its tests wait on sockets and
# timers part of the time: 2 CPUs finish in 104 s with 3 workers, 112 s with 2).
FAST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))

# Second test run; override to point at another server.
SAGABOARD_TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/sagaboard

.PHONY: help venv install run lint test test-fast test-sqlite test-postgres bench bench-check fuzz faults soak vendor fmt dist check-dist docs docs-build

help:
	@echo "make run            install deps, migrate, serve on http://$(HOST_PORT)/ (HOST_PORT=host:port to move it)"
	@echo "make test           lint, then pytest on SQLite, then on PostgreSQL"
	@echo "make test-fast      the quick loop: SQLite, no slow tests (-m 'not slow'), in parallel"
	@echo "make test-sqlite    pytest on SQLite only"
	@echo "make test-postgres  pytest on \$$SAGABOARD_TEST_DATABASE_URL ($(SAGABOARD_TEST_DATABASE_URL))"
	@echo "make lint           ruff check, ruff format --check, mypy (undo_core strict, sagaboard typed), lint-imports, mkdocs build --strict"
	@echo "make docs           serve the manual (docs/, MkDocs) on http://$(DOCS_PORT)/, rebuilt as you edit"
	@echo "make docs-build     build the manual into site/ (mkdocs build --strict: a broken link or anchor fails)"
	@echo "make fmt            ruff format + ruff check --fix"
	@echo "make bench          every benchmark, full size, writes docs/benchmarks.md (ONLY=engine,pages,...)"
	@echo "make bench-check    the small version; fails on a large ratio regression (CI runs it)"
	@echo "make fuzz           the API fuzzer for 10 min (FUZZ_SECONDS=600) on SQLite, then PostgreSQL"
	@echo "make faults         the fault suite (tests/faults) at length: 30 s outages, on SQLite, then PostgreSQL"
	@echo "make soak           agents and operators for SOAK_MINUTES (30) on SOAK_DB (sqlite): memory and latency a minute"
	@echo "make dist           build the undo-core and sagaboard wheels and sdists into dist/"
	@echo "make check-dist     dist, then install the undo-core wheel alone in a fresh venv and check it (CI runs it)"
	@echo "make vendor         re-vendor htmx, htmx-ext-ws and axe-core (tests only) from npm into static/vendor/"
	@echo "make venv|install   create .venv (Python >= 3.12, see .ci/find-python) / install deps"

venv: $(VPY)

$(VPY):
	@py="$$(PYTHON='$(PYTHON)' .ci/find-python)" && \
		echo "Creating $(VENV) with $$py" && \
		"$$py" -m venv $(VENV)
	@$(VPY) -c 'import sys; assert sys.version_info >= (3, 12), sys.version' \
		|| { echo "$(VENV) is not Python >= 3.12; remove it and retry" >&2; exit 1; }

install: $(STAMP)

# Re-installs only when a pyproject.toml changes or the venv is recreated. Both distributions,
# editable, in one pip run: sagaboard's pin on undo-core is met by this checkout's own.
$(STAMP): pyproject.toml packaging/undo-core/pyproject.toml $(wildcard undo_core/__init__.py) | $(VPY)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -e packaging/undo-core -e ".[dev]"
	@touch $@

# The embedded default: SQLite, a web process and a worker; DEBUG on for a local dashboard.
run: export SAGABOARD_DEBUG ?= 1
# The links in mails and Slack messages point at the server make run starts.
run: export SAGABOARD_BASE_URL ?= http://$(HOST_PORT)
run: install
	$(VPY) manage.py migrate --no-input
	$(VPY) manage.py sagaboard_demo
	@echo ""
	@echo "  sagaboard is starting at http://$(HOST_PORT)/  (Ctrl-C to stop)"
	@echo "  with a Celery worker for undos (broker: a folder under var/, no server needed)"
	@echo "  and the demo agent (manage.py sagaboard_demo_agent): a checkout saga running over"
	@echo "  HTTP; log in as olga / olga-demo and stop it from its page"
	@echo ""
	@$(VPY) -m celery -A sagaboard worker -B --pool=solo \
		--loglevel=warning & worker=$$!; \
	$(VPY) manage.py sagaboard_demo_agent --url http://$(HOST_PORT) & agent=$$!; \
	trap 'kill $$worker $$agent 2>/dev/null' EXIT INT TERM; \
	$(VPY) -m uvicorn sagaboard.config.asgi:application --host $(firstword $(subst :, ,$(HOST_PORT))) --port $(lastword $(subst :, ,$(HOST_PORT))) --reload --no-access-log

dist: install
	rm -rf dist
	$(VPY) -m build --sdist --wheel --outdir dist packaging/undo-core
	$(VPY) -m build --sdist --wheel --outdir dist .

check-dist: install
	$(VPY) scripts/check_sdk_wheel.py --out dist

lint: install
	$(VPY) -m ruff check .
	$(VPY) -m ruff format --check .
	$(VPY) -m mypy
	$(VENV)/bin/lint-imports
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# The manual: docs/ as a site (mkdocs.yml, Material theme). `make docs` serves it and rebuilds
# on every edit (warnings printed, the server kept); `make docs-build` and `make lint` build it
# strictly into site/: a broken link or anchor (mkdocs.yml's `validation`) or any other
# warning fails them.
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --dev-addr $(DOCS_PORT)

docs-build: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

fmt: install
	$(VPY) -m ruff format .
	$(VPY) -m ruff check --fix .

test: lint
	$(MAKE) --no-print-directory test-sqlite
	$(MAKE) --no-print-directory test-postgres

# The edit-run loop: SQLite, without what is marked slow (browsers, servers and other
# subprocesses, racing threads, fuzz and property runs), one worker per CPU (pytest-xdist).
# `make test` still runs everything (on both databases, also one worker per CPU).
test-fast: install
	env -u DATABASE_URL $(VPY) -m pytest -m "not slow" -n $(FAST_WORKERS)

# What only the production configuration has is left to the second run: the beat as a
# process of its own, a PostgreSQL
# restart, Redis going away (channel layer, cache and broker at once), the production
# topology and the Procfile's processes (several web processes and workers on PostgreSQL
# and Redis).
PRODUCTION_TESTS := tests/faults/test_postgres_restart.py tests/faults/test_redis_outage.py \
	tests/faults/test_beat_restart.py \
	tests/topology/test_topology.py tests/topology/test_deploy.py
test-sqlite: install
	@echo "== pytest on SQLite =="
	env -u DATABASE_URL $(VPY) -m pytest -n auto --dist worksteal --durations=30 \
		$(addprefix --ignore=,$(PRODUCTION_TESTS))

# The second run takes what touches a database (Django, live servers): the engine's, the
# SDK's and the adapters' tests never do, and ran once already.
# Of the demos and the MCP server, only the tests with a live sagaboard touch a database.
# Nor do the browser checks of what a page shows and how it reads (axe, a phone's width, the
# keyboard, hostile text under the CSP, an outcome's wording, the header's live state, the
# README's quickstart): the same templates render the same rows on either database; what
# the database does below them is tested on both in tests/sagaboard (and what each stores of
# hostile values by the API fuzzer).
DATABASE_TESTS := tests/sagaboard tests/security tests/e2e tests/topology tests/faults \
	tests/demos/test_demos.py::test_storebot_with_url_shows_up_rolled_back_on_a_live_sagaboard \
	tests/mcp/test_mcp_connected.py
RENDERING_TESTS := tests/e2e/test_accessibility_browser.py tests/e2e/test_keyboard_browser.py \
	tests/e2e/test_security_browser.py tests/e2e/test_outcome_browser.py \
	tests/e2e/test_live_access_browser.py tests/e2e/test_readme_quickstart.py

test-postgres: install
	@echo "== pytest on PostgreSQL ($(SAGABOARD_TEST_DATABASE_URL)) =="
	DATABASE_URL='$(SAGABOARD_TEST_DATABASE_URL)' $(VPY) -m pytest -n auto --dist worksteal --durations=30 $(DATABASE_TESTS) \
		$(addprefix --ignore=,$(RENDERING_TESTS))

# The published figures: every module against a live local system, several runs each.
bench: install
	$(VPY) -m benchmarks --out docs/benchmarks.md --results benchmarks/results.json $(if $(ONLY),--only $(ONLY))

# CI's regression check: small sizes, ratios compared with benchmarks/baseline.json. Only the
# modules whose ratios guard a code path (search, tool_health and batch have none yet: `make
# bench` runs them at full size), to keep CI within its time; the peak memory figures (a
# minute for two fresh stacks) are checked by `make bench-check-memory`, outside CI.
CHECKED_BENCHMARKS := engine,ingest,live_latency,approval,pages
bench-check: install
	$(VPY) -m benchmarks --quick --runs 2 --only $(CHECKED_BENCHMARKS) --check benchmarks/baseline.json --out var/bench-quick.md

bench-check-memory: install
	$(VPY) -m benchmarks --quick --runs 2 --only memory --check benchmarks/baseline.json --out var/bench-quick-memory.md

# The API fuzzer at length (`make test` runs it with 6 examples per operation): new examples
# round after round for FUZZ_SECONDS on each database.
FUZZ_EXAMPLES ?= 100
FUZZ_SECONDS ?= 600
fuzz: install
	env -u DATABASE_URL SAGABOARD_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) SAGABOARD_FUZZ_SECONDS=$(FUZZ_SECONDS) \
		$(VPY) -m pytest tests/security/test_api_fuzz.py -k every
	DATABASE_URL='$(SAGABOARD_TEST_DATABASE_URL)' SAGABOARD_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) \
		SAGABOARD_FUZZ_SECONDS=$(FUZZ_SECONDS) $(VPY) -m pytest tests/security/test_api_fuzz.py -k every

# The fault suite at length (`make test` runs it with 10 s outages): dependencies taken down
# for FAULT_OUTAGE_SECONDS while agents and operators work, on each database.
FAULT_OUTAGE_SECONDS ?= 30
faults: install
	env -u DATABASE_URL SAGABOARD_FAULT_OUTAGE_SECONDS=$(FAULT_OUTAGE_SECONDS) \
		$(VPY) -m pytest tests/faults -s -p no:cacheprovider
	DATABASE_URL='$(SAGABOARD_TEST_DATABASE_URL)' SAGABOARD_FAULT_OUTAGE_SECONDS=$(FAULT_OUTAGE_SECONDS) \
		$(VPY) -m pytest tests/faults -s -p no:cacheprovider

# The soak (benchmarks/soak.py; outside CI): a real site under agents and an operator for
# SOAK_MINUTES, memory and page latency a minute; fails when either grows past its bound.
SOAK_MINUTES ?= 30
SOAK_DB ?= sqlite
soak: install
	mkdir -p var
	$(VPY) -m benchmarks.soak --minutes $(SOAK_MINUTES) --db $(SOAK_DB) --out var/soak-$(SOAK_DB).json

# Re-vendor htmx, its ws extension and axe-core (for the accessibility tests only) from the
# npm registry (versions in the script).
vendor:
	scripts/vendor-static
