# The README's two commands: `make demo` (install + main job) and `make test` (the tests).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.trajval-installed

.PHONY: install demo test test-slow bench

$(STAMP): pyproject.toml tools/install.sh
	test -x $(PY) || python3 -m venv $(VENV)
	PYTHON=$(PY) bash tools/install.sh
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/dj-process --config recipes/score_pool.yaml
	$(VENV)/bin/dj-process --config recipes/resample_pool.yaml

test: install
	$(PY) -m pytest -m "not slow" -q

test-slow: install
	$(PY) -m pytest -m slow -q

bench: install
	$(PY) tools/bench/bench_score_resample.py
