# billing — the two commands a newcomer needs are `make up` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
UV_VERSION := 0.13.8
export PATH := $(CURDIR)/$(BIN):$(PATH)

.DEFAULT_GOAL := help

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-14s %s\n", $$1, $$2}'

$(BIN)/.installed: pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q "uv==$(UV_VERSION)"
	@$(BIN)/uv pip install -q --python $(BIN)/python -r requirements.lock
	@$(BIN)/uv pip install -q --python $(BIN)/python --no-deps -e .
	@touch $@

venv: $(BIN)/.installed ## Create the virtualenv from the pinned lock file

lock: ## Re-resolve requirements.lock from pyproject.toml
	$(BIN)/uv pip compile pyproject.toml --extra dev --python-version 3.11 -o requirements.lock

infra-up: ## Start PostgreSQL, Redis and Kafka on loopback (idempotent)
	@scripts/infra.sh up

infra-down: ## Stop PostgreSQL, Redis and Kafka
	@scripts/infra.sh down

migrate: venv infra-up ## Apply database migrations
	@eval "$$(scripts/infra.sh env)" && $(BIN)/billing migrate

up: venv infra-up migrate ## Run the whole system: infrastructure, migrations, every process (BILLING_LOG_JSON=true: JSON lines)
	@eval "$$(scripts/infra.sh env)" && $(BIN)/billing run-all -e deploy/dev.env -f Procfile \
		$(if $(BILLING_LOG_JSON),--set BILLING_LOG_JSON=$(BILLING_LOG_JSON))

demo: venv ## With `make up` running (another terminal): a small 1st of the month, end to end
	@eval "$$(scripts/infra.sh env)" && $(BIN)/billing demo

status: venv ## Backlogs of the running system
	@eval "$$(scripts/infra.sh env)" && $(BIN)/billing status

check: venv ## Invariant checker against the running system
	@eval "$$(scripts/infra.sh env)" && $(BIN)/billing check

contracts: venv ## Regenerate every checked-in generated contract file (event schemas, AsyncAPI, EVENTS.md, OpenAPI, API.md's scope table)
	$(BIN)/billing contracts

down: infra-down ## Stop the infrastructure (processes stop with Ctrl-C on `make up`)

lint: venv ## ruff + mypy (strict)
	$(BIN)/ruff check libs services tests bench migrations
	$(BIN)/ruff format --check libs services tests bench migrations
	$(BIN)/mypy

browser: ## Install the system's Chromium for the console's browser tests (when missing)
	@scripts/chromium.sh

test: venv infra-up lint browser ## Run the whole test suite (starts what it needs): the parallel-safe part on two workers, then the real-time scenarios one at a time
	$(BIN)/pytest -q -n 2 -m "not slow and not timing"
	$(BIN)/pytest -m "slow or timing"

test-fast: venv infra-up browser ## Developer loop: unit + integration without the slow process/chaos/e2e tests
	$(BIN)/pytest -q -n 2 -m "not slow and not timing" tests/unit tests/deploy tests/integration
	$(BIN)/pytest -q -m "timing and not slow" tests/integration

.PHONY: help venv lock infra-up infra-down migrate up down demo status check contracts lint browser test test-fast

bench-gateway-sim: venv ## Gateway simulator capacity vs. a bare Starlette endpoint
	PYTHONPATH=libs:. $(BIN)/python bench/gateway_sim_capacity.py

bench-relay: venv infra-up ## Relay benchmark: events/s vs a bare producer, lag at 1 000 events/s
	@eval "$$(scripts/infra.sh env)" && $(BIN)/python -m bench.relay_bench

# A shorter run at 200/s only: make bench-collector COLLECTOR_BENCH_ARGS="--invoices 4000 --fast-invoices 0"
COLLECTOR_BENCH_ARGS ?=

bench-collector: venv infra-up ## Collector: drain time vs backlog/200 s, ceiling at 1 000/s, plot (COLLECTOR_BENCH_ARGS: its options)
	$(BIN)/python -m bench.collector_bench $(COLLECTOR_BENCH_ARGS)

bench-api: venv infra-up ## API throughput/latency vs the same server's /healthz
	@eval "$$(scripts/infra.sh env)" && $(BIN)/python -m bench.api_bench --runs 3 --seconds 5

.PHONY: help venv lock infra-up infra-down migrate up down lint test

bench-webhook: venv infra-up ## Webhook receiver: events/s and CPU per event vs the same server's /healthz
	@eval "$$(scripts/infra.sh env)" && $(BIN)/python -m bench.webhook_bench --runs 3 --seconds 5

# A smaller run on a shared machine: make bench-renewer RENEWER_BENCH_ARGS="--subscriptions 100000 --reps 3 --slice 5000"
RENEWER_BENCH_ARGS ?=

bench-renewer: venv infra-up ## Renewer benchmark: 1 M due subscriptions vs the SQL floor and row by row (RENEWER_BENCH_ARGS: its options)
	@eval "$$(scripts/infra.sh env)" && $(BIN)/python -m bench.renewer_bench --json var/bench-renewer.json $(RENEWER_BENCH_ARGS)

.PHONY: bench-renewer

# A smaller run on a shared machine: make bench-first-of-month SUBSCRIPTIONS=20000
SUBSCRIPTIONS ?=

bench-first-of-month: venv infra-up ## The whole system on SUBSCRIPTIONS (100 000 by default) due at once: drain vs backlog/200 s, memory, outbox lag, autovacuum, plot
	$(BIN)/python -m bench.first_of_month --json var/bench-first-of-month.json \
		$(if $(SUBSCRIPTIONS),--subscriptions $(SUBSCRIPTIONS))

.PHONY: bench-first-of-month

bench-db-stack: venv infra-up ## CPU per transaction: the bare driver vs named queries vs SQLAlchemy (connection, session)
	@eval "$$(scripts/infra.sh env)" && $(BIN)/python -m bench.db_stack

.PHONY: bench-db-stack

# A shorter run: make bench-notifier NOTIFIER_BENCH_ARGS="--receipts 4000 --paced-seconds 15"
NOTIFIER_BENCH_ARGS ?=

bench-notifier: venv infra-up ## Notifier: receipts/s, CPU per receipt, delay at 200/s vs the mail server's own rate (NOTIFIER_BENCH_ARGS: its options)
	@eval "$$(scripts/infra.sh env)" && $(BIN)/python -m bench.notifier_bench $(NOTIFIER_BENCH_ARGS)

.PHONY: bench-notifier

bench-stripe-client: venv infra-up ## CPU per charge: the Stripe SDK vs the project's HTTP/1.1 client, against stripe-mock
	@eval "$$(scripts/infra.sh env)" && $(BIN)/python -m bench.stripe_client_cpu

.PHONY: bench-stripe-client
