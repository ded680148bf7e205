PYTHON ?= python3
# Extras installed by `make dev`/`make test` (CI uses EXTRAS=all so the Dask, plot and
# Parquet tests run too; without them those tests skip with a message).
EXTRAS ?= test

.PHONY: build dev test bench clean

# Compile the Cython extensions in place (for working from the source tree).
build:
	$(PYTHON) setup.py build_ext --inplace

# Editable install with the test dependencies.
dev:
	$(PYTHON) -m pip install -e '.[$(EXTRAS)]'

# What CI and the README run: install, then the whole suite.
test: dev
	$(PYTHON) -m pytest -q

bench: build
	$(PYTHON) bench/bench_cost.py
	$(PYTHON) bench/bench_placement.py
	$(PYTHON) bench/bench_schedule.py
	$(PYTHON) bench/bench_search.py sweep --mode both
	$(PYTHON) bench/bench_search.py models

# Removes what the build and the tests leave: build folders, the compiled extensions,
# Cython's C and annotation files, bytecode.
clean:
	rm -rf build dist *.egg-info .pytest_cache .hypothesis
	find phaze -name '*.so' -delete -o -name '*.c' -delete -o -name '*.html' -delete
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
