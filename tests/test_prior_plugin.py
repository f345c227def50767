"""A new prior is one module (issue 55): a throwaway pass@k prior with a setting of its own (``k``),
in a temporary folder that names it in the entry-point group ``trajval_ops.priors``, runs through
``dj-process``, ``trajval cost --config``, ``trajval validate --dry-run`` and the validate priors
step with no file of the package touched, and ``k`` reaches its weight everywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import yaml

from tests.conftest import REPO, dj_process, read_jsonl, write_jsonl

NAME = "passk_throwaway"

PRIOR_MODULE = '''
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trajval_ops.priors.base import Prior, rates
from trajval_ops.settings import setting


@dataclass(frozen=True)
class PassAtK(Prior):
    name: ClassVar[str] = "passk_throwaway"
    formula: ClassVar[str] = "`s = 1 - (1 - r_early) ** k`, `w = max(4 s (1 - s), eps)`"

    k: int = setting(4, "Attempts per task.", ge=1)

    def score(self, r_early, r_late=None):
        return 1.0 - (1.0 - rates(r_early)) ** self.k

    def weight(self, score):
        score = rates(score)
        return np.maximum(4.0 * score * (1.0 - score), self.eps)

    def provenance(self):
        return {"eps": self.eps, "score": self.name, "k": self.k}
'''


def _expected(r_early, k: int, eps: float = 0.05) -> list[float]:
    s = 1.0 - (1.0 - np.asarray(r_early, dtype=np.float64)) ** k
    return np.maximum(4.0 * s * (1.0 - s), eps).tolist()


@pytest.fixture
def plugin(tmp_path):
    """A folder holding the prior's module and the distribution metadata that names it in the
    entry-point group, and the environment that puts it on the path (as ``pip install`` of a
    package declaring ``[project.entry-points."trajval_ops.priors"]`` would)."""
    folder = tmp_path / "plugin"
    folder.mkdir()
    (folder / "throwaway_passk.py").write_text(PRIOR_MODULE)
    info = folder / "throwaway_passk-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: throwaway-passk\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[trajval_ops.priors]\n{NAME} = throwaway_passk:PassAtK\n")
    path = os.pathsep.join([str(REPO), str(folder), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {"PYTHONPATH": path, "OMP_NUM_THREADS": "1"}


def _run(args: list[str], env: dict, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600, env={**os.environ, **env})


def _trajval(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from trajval_ops.cli import main; sys.exit(main())", *args]


def _pool(tmp_path, n: int = 24) -> tuple[str, list[float]]:
    r_early = [(i % 9) / 8 for i in range(n)]
    rows = [{"id": f"t{i}", "trajval_r_early": r} for i, r in enumerate(r_early)]
    return str(write_jsonl(tmp_path / "pool.jsonl", rows)), r_early


def _recipe(tmp_path, pool: str, **settings) -> dict:
    return {"project_name": "plugin", "dataset_path": pool, "export_path": str(tmp_path / "out.jsonl"), "np": 1,
            "text_keys": None, "skip_op_error": False, "open_tracer": False, "op_fusion": False,
            "process": [{"trajval_learnability_mapper": {"prior": NAME, **settings}}]}


@pytest.mark.slow
def test_a_prior_from_an_entry_point_runs_through_dj_process_with_its_own_setting(tmp_path, plugin):
    pool, r_early = _pool(tmp_path)
    result = dj_process(_recipe(tmp_path, pool, k=3), tmp_path, env=plugin)
    assert result.returncode == 0, result.stderr[-3000:]
    out = read_jsonl(tmp_path / "out.jsonl")
    assert [row["trajval_weight"] for row in out] == pytest.approx(_expected(r_early, 3), abs=1e-15)
    assert out[0]["trajval_score_provenance"]["k"] == 3 and out[0]["trajval_score_provenance"]["score"] == NAME
    # a misspelled key is refused by Data-Juicer's preflight, naming the nearest
    result = dj_process(_recipe(tmp_path, pool, kk=3), tmp_path, env=plugin)
    assert result.returncode == 2 and "Unknown parameter 'kk' (did you mean: k?)" in result.stderr, result.stderr[-2000:]
    # a setting of another prior than the one named is refused, naming whose it is
    result = dj_process(_recipe(tmp_path, pool, k=3, alpha=0.5), tmp_path, env=plugin)
    assert result.returncode == 2 and f"alpha is a setting of the trajval prior, not of the {NAME} prior" in \
        result.stderr, result.stderr[-2000:]


def test_trajval_cost_prices_a_recipe_that_gives_the_priors_own_setting(tmp_path, plugin):
    pool, _ = _pool(tmp_path)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(_recipe(tmp_path, pool, k=3)))
    result = _run(_trajval("cost", "--config", str(recipe), "--json"), plugin)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["prior"] == {"prior": NAME, "eps": 0.05, "k": 3}


def test_validate_knows_the_prior_as_an_arm_and_weights_the_pool_with_its_setting(tmp_path, plugin):
    config = yaml.safe_load((REPO / "recipes" / "validation" / "smoke.yaml").read_text())
    config["training"].update(arms=["uniform", NAME], sampling=["standard"])
    config["probe"].update(adaptive_late=False, other_model=None)
    config["priors"] = {NAME: {"k": 3}}
    path = tmp_path / "validate.yaml"
    path.write_text(yaml.safe_dump(config))
    result = _run(_trajval("validate", "--config", str(path), "--dry-run", "--rate", "100", "--json"), plugin)
    assert result.returncode == 0, result.stderr[-3000:]
    units = [unit["unit"] for unit in json.loads(result.stdout)["units"]]
    assert f"arms/{NAME}/seed-0" in units and f"arms/{NAME}/seed-1" in units

    # the priors step on a probe unit's pool: every one-pass prior's column, this one's with k = 3
    out = tmp_path / "run"
    (out / "probe").mkdir(parents=True)
    r_early = [(i % 17) / 16 for i in range(40)]
    write_jsonl(out / "probe" / "weighted.jsonl", [
        {"id": f"t{i}", "trajval_r_early": r, "trajval_r_late": min(1.0, r + 0.25), "trajval_weight": 1.0,
         "trajval_score_provenance": {"alpha": 0.3, "eps": 0.05}} for i, r in enumerate(r_early)])
    step = textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        from trajval_ops.experiment.priors import ARMS, PRIOR_COLUMNS, registry_scores, write_priors
        from trajval_ops.pools.io import read_rows
        from trajval_ops.priors import ONE_PASS_PRIORS
        out = Path(sys.argv[1])
        write_priors(out, {{"{NAME}"}} | ONE_PASS_PRIORS, None, None, {{"{NAME}": {{"k": 3}}}})
        rows = list(read_rows(out / "priors" / "train_pool.jsonl"))
        print(json.dumps({{"arm": ARMS["{NAME}"], "column": PRIOR_COLUMNS["{NAME}"],
                          "weights": [row[PRIOR_COLUMNS["{NAME}"]] for row in rows],
                          "lines": sorted(registry_scores(rows))}}))
    """)
    result = _run([sys.executable, "-c", step, str(out)], plugin)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["arm"] == [NAME, None] and seen["column"] == f"trajval_{NAME}_weight"
    assert seen["weights"] == pytest.approx(_expected(r_early, 3), abs=1e-15)
    assert f"{NAME}_r_early" in seen["lines"]  # its agreement line in results.json's baselines


def test_a_prior_whose_name_is_taken_is_refused_naming_its_entry_point(tmp_path, plugin):
    info = tmp_path / "plugin" / "throwaway_passk-0.1.dist-info" / "entry_points.txt"
    info.write_text("[trajval_ops.priors]\nshadow = throwaway_passk:Shadow\n")
    module = tmp_path / "plugin" / "throwaway_passk.py"
    module.write_text(module.read_text() + "\n\nclass Shadow(PassAtK):\n    name = 'variance'\n")
    result = _run([sys.executable, "-c", "import trajval_ops.priors"], plugin)
    assert result.returncode == 1
    assert "entry point shadow = 'throwaway_passk:Shadow' (group trajval_ops.priors): prior name 'variance' is " \
           "taken by trajval_ops.priors.variance" in result.stderr
