# The README's two commands: `make demo` (install + main job) and `make test` (the tests).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.trajval-installed

.PHONY: install demo test test-slow bench validate validate-smoke docs

$(STAMP): pyproject.toml tools/install.sh constraints/cpu.txt
	test -x $(PY) || python3 -m venv $(VENV)
	PYTHON=$(PY) bash tools/install.sh
	touch $(STAMP)

install: $(STAMP)

# The main job: probe -> endpoint rewards -> weights on the embedded default, then a resample.
demo: install
	$(VENV)/bin/dj-process --config recipes/demo_trajval.yaml
	$(VENV)/bin/dj-process --config recipes/resample_pool.yaml \
		--dataset_path outputs/demo/weighted.jsonl --export_path outputs/demo/resampled.jsonl

test: install
	$(PY) -m pytest -m "not slow" -q

test-slow: install
	$(PY) -m pytest -m slow -q --timeout=1800 --durations=15  # the slowest, for keeping CI under 70 min

bench: install
	$(PY) tools/bench/bench_score_resample.py

# The validation protocol on the embedded tiny regime (docs/validation.md; run time: README, Speed).
validate: install
	$(PY) tools/validate.py --config recipes/validation/full.yaml --out outputs/validation/full

validate-smoke: install
	$(PY) tools/validate.py --config recipes/validation/smoke.yaml --out outputs/validation/smoke

# The documentation site (mkdocs, --strict: a broken link or a missing page fails), built into
# SITE_DIR (default: a folder beside the clone, not in it). Installs the docs extra first.
SITE_DIR ?= $(abspath ..)/trajval_ops-site
docs: install
	$(PY) -m pip install --disable-pip-version-check -q -c constraints/cpu.txt -e ".[docs]"
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir "$(SITE_DIR)"
