# The two commands of the README:  make demo  |  make test
.PHONY: setup start stop status reset demo test test-slow lint

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

test: start
	bash local/setup --with-browser
	bash local/pytest -m "not slow"

test-slow: start
	bash local/pytest -m slow
