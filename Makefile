# The two commands of the README:  make demo  |  make test
.PHONY: setup start stop status reset demo unit integration test test-slow lint screenshots

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

# No service needed: the catalog, the checker's anomaly functions in local Spark, DAG parsing, input validation.
unit: setup
	.venv/bin/python -m pytest tests/unit

integration: start
	bash local/setup --with-browser
	bash local/pytest tests/integration -m "not slow" --durations=60

test: unit integration

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
