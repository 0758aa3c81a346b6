# The two commands of the README:  make demo  |  make test
.PHONY: setup start stop status reset demo matrix unit integration test test-slow lint screenshots

setup:
	bash local/setup

start: setup
	local/stack start

stop:
	local/stack stop

status:
	local/stack status

reset:
	local/stack reset

demo: start
	bash local/demo

# Every pair of the matrix, both clients, every strategy and pipeline pair (100 runs).
matrix: start
	MATRIX=all bash local/demo

# No service needed: the catalog, the checker's anomaly functions in local Spark, DAG parsing, input validation.
unit: setup
	.venv/bin/python -m pytest tests/unit -n 2 --dist loadfile

# Two phases: the tests on their own topics and tables in two processes, then those that stop
# brokers or restart PostgreSQL one at a time (tests/integration/conftest.py's SERIAL_FILES).
integration: start
	bash local/setup --with-browser
	bash local/pytest tests/integration -m "not slow and not serial" -n 2 --dist loadfile --durations=30
	bash local/pytest tests/integration -m "not slow and serial" --durations=30

# The stack, the integration suite's two phases, and the unit tier beside the second at the lowest
# priority (local/test says why); each stage's time printed as it ends.
test: setup
	bash local/test

test-slow: start
	bash local/pytest tests/integration -m slow

lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

# The README's screenshots, taken by the UI test from the runs in the ledger: run `make demo` first.
screenshots: start
	bash local/setup --with-browser
	bash local/pytest tests/integration/test_ui.py -k chromium
	cp artifacts/screenshots/*.png docs/screenshots/
