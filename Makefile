# A new user types `make run` or `make test`. Both create .venv, install, and use the machine's
# PostgreSQL/Redis when DATABASE_URL/REDIS_URL are set, or embedded ones under .data/ when not.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: install bytecode run test fuzz screenshots bench bench-webhooks bench-retention chaos lint format clean services-stop

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -e ".[test]"
	@rm -f $(VENV)/.installed-*; touch $(STAMP)

install: $(STAMP) bytecode

# The project's modules compiled ahead (only changed files are compiled again), so that every process
# started later reads bytecode instead of compiling ~100 modules at import: a worker process is then
# ready in about half the CPU time (bench/startup.py), also where PYTHONDONTWRITEBYTECODE is set.
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q -j 0 app actors ledgerflow schemas web bench chaos examples

run: $(STAMP) bytecode
	$(BIN)/ledgerflow dev

# The suite in TEST_WORKERS processes (pytest-xdist), each a whole pytest session with its own database
# and Redis namespace (tests/conftest.py); a test file stays in one process (--dist loadfile), so its
# module fixtures start once. Half the suite's time is waiting on processes it starts (workers, `make
# run`, schedulers): three processes overlap those waits (2 cores: 494 s against 702 s with two,
# docs/decisions/code.md). TEST_WORKERS=0 runs in this process (--pdb, -s).
TEST_WORKERS ?= 3
test: $(STAMP) bytecode
	PYTHONPATH=$(CURDIR) $(BIN)/ledgerflow env -- $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# the fuzzers of `make test` run longer, with new examples each time (a few minutes): hostile strings and
# bytes in every parameter of every route (tests/security), schemathesis over the OpenAPI document, and
# every hostile value in every field of every console form (tests/web/test_console_hostile_input.py)
fuzz: $(STAMP) bytecode
	LEDGERFLOW_FUZZ_RANDOM=1 LEDGERFLOW_FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-100} \
	LEDGERFLOW_SCHEMATHESIS_EXAMPLES=$${FUZZ_EXAMPLES:-100} PYTHONPATH=$(CURDIR) $(BIN)/ledgerflow env -- \
	$(BIN)/python -m pytest -q tests/security/test_api8_fuzz_every_parameter.py tests/web/test_fuzz.py \
	tests/web/test_console_hostile_input.py $(PYTEST_ARGS)

# every console page at 1280 and 390 px into docs/console/ (the browser suite, axe-core included)
screenshots: $(STAMP) bytecode
	rm -f docs/console/*.png
	LEDGERFLOW_SCREENSHOTS=docs/console PYTHONPATH=$(CURDIR) $(BIN)/ledgerflow env -- $(BIN)/python -m pytest tests/browser -q

bench: $(STAMP) bytecode
	$(BIN)/pip install --disable-pip-version-check -q -e ".[test,bench]"
	PYTHONPATH=$(CURDIR) $(BIN)/ledgerflow env -- $(BIN)/python -m bench $(BENCH_ARGS)

# the fault suite (not part of `make test`, which runs its short version): CHAOS_ARGS="--quick" or
# "--only worker-sigkill,redis-stop-and-flush"
chaos: $(STAMP) bytecode
	PYTHONPATH=$(CURDIR) $(BIN)/ledgerflow env -- $(BIN)/python -m chaos $(CHAOS_ARGS)

bench-webhooks: $(STAMP)
	PYTHONPATH=$(CURDIR) $(BIN)/ledgerflow env -- $(BIN)/python -m bench.webhooks $(BENCH_ARGS)

# a day of finished workflows removed by retention beside a claimer (bench/README.md, "Retention");
# BENCH_ARGS="--workflows 1000000" (5,000,000 by default: ~55 GB of disk)
bench-retention: $(STAMP)
	PYTHONPATH=$(CURDIR) $(BIN)/ledgerflow env -- $(BIN)/python -m bench.retention $(BENCH_ARGS)

# mypy: the packages and the strict ones are in pyproject.toml ([tool.mypy]); its cache (.mypy_cache)
# makes a run after a small change take a few seconds
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	PYTHONPATH=$(CURDIR) $(BIN)/lint-imports --no-logo

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

services-stop: $(STAMP)
	$(BIN)/ledgerflow services-stop

clean:
	rm -rf $(VENV) .data
