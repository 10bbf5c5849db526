# AIMON Admin. `make run` starts the product on its embedded default; `make test` runs
# the whole test suite. Both create .venv and install what they need first.

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run prod test fuzz lint format install install-dev clean-db screenshots

$(BIN)/python:
	$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "AIMON Admin needs Python 3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-runtime: requirements.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.installed-dev: requirements.txt requirements-dev.txt clients/python/pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	touch $@ $(VENV)/.installed-runtime

install: $(VENV)/.installed-runtime
install-dev: $(VENV)/.installed-dev

## The product on its embedded default: SQLite, no Redis, Celery eager, demo data.
run: $(VENV)/.installed-runtime
	@# The key that encrypts the secrets stored for other systems, beside the SQLite file and kept
	@# across runs (a new key would leave what is stored unreadable); made before migrating.
	AIMON_DEMO=1 $(BIN)/python manage.py secrets_key create .demo-secrets-key --if-missing
	AIMON_DEMO=1 $(BIN)/python manage.py migrate --noinput
	AIMON_DEMO=1 $(BIN)/python manage.py demo_data --url http://$(HOST):$(PORT)/
	AIMON_DEMO=1 $(BIN)/python manage.py audit_key create .demo-audit-signing-key.pem --if-missing
	@# No Celery beat here: verify the audit chain once now (auditors can Verify now later); a
	@# broken chain is reported on the audit home, it does not stop the demo.
	-AIMON_DEMO=1 $(BIN)/python manage.py verify_audit --from-checkpoint --record
	@# Notifications link to the address the demo serves at (a channel's messages carry it).
	AIMON_DEMO=1 AIMON_BASE_URL=http://$(HOST):$(PORT) $(BIN)/uvicorn aimon_admin.asgi:application --host $(HOST) --port $(PORT) --lifespan off

## Production on this machine: PostgreSQL (DATABASE_URL), Redis (REDIS_URL), DJANGO_SECRET_KEY,
## the stored secrets' key (AIMON_SECRETS_KEY or AIMON_SECRETS_KEY_FILE) and nginx (Debian: apt-get install -y nginx) required; migrates, collects static files, then
## runs and watches nginx on AIMON_WEB_HOST:AIMON_WEB_PORT in front of granian (WSGI,
## AIMON_WEB_WORKERS) and uvicorn (ASGI, long-polls: AIMON_WAIT_WORKERS), a Celery worker and
## Celery beat until Ctrl-C or SIGTERM (scripts/prod.py).
prod: $(VENV)/.installed-runtime
	$(BIN)/python scripts/prod.py

## The whole suite: lint, then the tests on SQLite, then on PostgreSQL + Redis.
test: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/run_tests.py

## The property tests exploring, by hand: a new random seed each run and ten times the
## examples (tests/fuzzing.py); `make test` and CI run them derandomized. FUZZ_ARGS: more
## pytest arguments.
fuzz: $(VENV)/.installed-dev
	AIMON_FUZZ=1 $(BIN)/python -m pytest -m hypothesis -o cache_dir=.pytest_cache/fuzz $(FUZZ_ARGS)

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

## The README's screenshots, into docs/screenshots/: a temporary SQLite database with the demo
## data, uvicorn on a free port, Debian's Chromium driven by Playwright (installs nothing more).
screenshots: $(VENV)/.installed-dev
	$(BIN)/python scripts/screenshots.py

clean-db:
	rm -f db.sqlite3 db.sqlite3-wal db.sqlite3-shm .demo-credentials.json
