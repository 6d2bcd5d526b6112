# The two entry points a newcomer needs; see README.md.
VENV ?= .venv
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup test lint demo bench bench-quick

setup:
	bash scripts/setup.sh

lint:
	ruff check .
	ruff format --check .
	lint-imports

test: setup
	bash scripts/test.sh

demo: setup
	bash scripts/demo.sh

bench: setup
	bash scripts/bench.sh

# The quick modes of the benchmarks that start the real engine (make test runs the others).
bench-quick: setup
	pytest -n 2 --dist loadgroup -m bench tests/test_bench_quick.py
