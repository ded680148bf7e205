PYTHON ?= python3
# Extras installed by `make dev`/`make test` (CI uses EXTRAS=all so the Dask, plot and
# Parquet tests run too; without them those tests skip with a message).
EXTRAS ?= test

.PHONY: build dev test test-nojit bench clean

# Compile the Cython extensions in place (for working from the source tree).
build:
	$(PYTHON) setup.py build_ext --inplace

# Editable install with the test dependencies.
dev:
	$(PYTHON) -m pip install -e '.[$(EXTRAS)]'

# What CI and the README run: install, then the whole suite.
test: dev
	$(PYTHON) -m pytest -q

# The whole suite with numba's JIT off: every numba kernel runs as plain Python, so
# coverage tools see it and a kernel that only works compiled is caught. CI runs it.
test-nojit: dev
	NUMBA_DISABLE_JIT=1 $(PYTHON) -m pytest -q -p no:cacheprovider

bench: build
	$(PYTHON) bench/bench_cost.py
	$(PYTHON) bench/bench_placement.py
	$(PYTHON) bench/bench_schedule.py
	$(PYTHON) bench/bench_search.py sweep --mode both
	$(PYTHON) bench/bench_search.py models

# Also clears numba's on-disk caches (phaze's per-user folder, see phaze/__init__.py, and any
# __pycache__ ones): numba keys a kernel's cache on its own source file, so after editing a
# kernel that another file's kernel calls, `make clean` is how to make sure nothing stale is
# loaded. (A NUMBA_CACHE_DIR you set yourself is yours to clear.)
clean:
	rm -rf build dist *.egg-info .pytest_cache .hypothesis
	rm -rf "$${XDG_CACHE_HOME:-$$HOME/.cache}/phaze"
	find phaze -name '*.so' -delete -o -name '*.c' -delete -o -name '*.html' -delete
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
