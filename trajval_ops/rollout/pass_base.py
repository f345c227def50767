"""What every mode of an endpoint pass shares (:class:`EndpointPass`): the checkpoint resolved,
the rollout cache and its key, the prompts, the verifier, the engine started once per worker,
each row's provenance, the whole-pool checks before the first batch and the figures after the
last. The modes, and the entry point that builds one, are :mod:`trajval_ops.rollout.endpoint_pass`.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from loguru import logger

from trajval_ops import __version__
from trajval_ops.errors import TrajvalInputError
from trajval_ops.rollout.engines import DecodingConfig
from trajval_ops.rollout.pass_rates import (
    NO_COST, STATUS_BAD_TRUTH, STATUS_NOT_SAMPLED, STATUS_OK, STATUS_TRUNCATED, PromptSettings, build_task, pass_rate,
)
from trajval_ops.rollout.pass_settings import (
    BudgetSettings, CacheSettings, EngineSettings, VerifierSettings, measured_with,
)
from trajval_ops.rollout.reused_pass import STATUS_REUSED


class EndpointPass:
    """What every mode of a pass shares (module docstring): the output columns of a batch of rows
    are the mode's (:meth:`columns`); measuring rows, the rollout cache, the provenance, the
    whole-pool checks before the first batch and the figures after the last are here. Built by
    :func:`~trajval_ops.rollout.endpoint_pass.build_pass`.

    :param model: the checkpoint: a model folder, a short reference or ``manifest:<dir>#<ref>``.
    :param output_key: the field the pass rate goes to (resolved from the window by ``build_pass``).
    :param groups: the settings groups (:func:`~trajval_ops.rollout.pass_settings.group_settings`).
    :param what: the name errors and logs begin with (the operator's).
    """

    #: the rows a sampled pass measures (its settings; None: no sample)
    sample = None
    #: the adaptive budget the measured rows stop on (None: ``n`` rollouts each)
    budget = None

    def __init__(self, model: str, output_key: str, groups: dict[type, Any], id_key: str | None = None,
                 what: str = "endpoint pass"):
        from trajval_ops.rollout.verifiers import build_verifier

        self.what, self.output_key = what, output_key
        self.decoding, self.engine = groups[DecodingConfig], groups[EngineSettings]
        self.prompt, self.checks, self.cache_settings = groups[PromptSettings], groups[VerifierSettings], \
            groups[CacheSettings]
        self.model, self.id_key, self.early_key = model, id_key, groups[BudgetSettings].early_key
        self.verifier = build_verifier(self.checks.verifier, **(self.checks.verifier_options or {}))
        #: torch threads of the engine this worker starts (set by the caller before a batch)
        self.threads = 1
        #: the transformers engine's device in this worker (the caller's placement; ``auto``: CUDA when available)
        self.device = "auto"
        self._init_worker_state()

    def _init_worker_state(self) -> None:
        """What each worker builds on its first batch (engine, cache, provenance) and counts."""
        self._session = self._cache = self._model_path = self._provenance = self._progress = self._pass = None
        # time figures of this worker: operator_s is batch time without engine start
        self._times = {"operator_s": 0.0, "engine_start_s": 0.0}
        self._owner_pid = os.getpid()
        self._worker_pid = None
        # tags the processes of this pass's engines, in whichever process they run
        self._token = uuid.uuid4().hex

    def __getstate__(self):
        # Data-Juicer / datasets pickle the operator to fingerprint it and to ship it to workers:
        # the model, open files and the progress bar stay behind and are rebuilt there.
        state = dict(self.__dict__)
        state.update(_session=None, _cache=None, _progress=None, _provenance=None, _pass=None)
        return state

    # ------------------------------------------------------------------ per worker set-up

    def _prompt_fitting(self, cut_context: int | None) -> dict:
        """What decides a cached row's prompt beyond the model's own files, for the rollout cache's
        key: ``truncate_left`` with the context it cuts to (``cut_context``, :meth:`_cut_context`;
        ``error`` caches no overlong row), and a tokenizer ``engine_kwargs`` names (vLLM renders
        prompts with its chat template). Each only where set, so caches of the defaults keep their
        key."""
        from pathlib import Path

        from trajval_ops.rollout.cache import model_fingerprint

        extra = dict(self.engine.engine_kwargs or {})
        key = {}
        if self.checks.overlong_prompt != "error":
            key["overlong_prompt"] = {"mode": self.checks.overlong_prompt, "context": cut_context}
        if extra.get("tokenizer"):
            tokenizer = Path(extra["tokenizer"])
            key["tokenizer"] = model_fingerprint(tokenizer) if tokenizer.is_dir() else str(extra["tokenizer"])
        return key

    def _cut_context(self) -> int:
        """The context ``truncate_left`` fits prompts into, known before any engine starts (a cached
        row was cut there): vLLM's ``max_model_len`` (``engine_kwargs``' first) for vLLM and for
        ``auto``, whose transformers fallback cuts there too; for the transformers engine the
        model's context as that engine reads it (:func:`~trajval_ops.rollout.engines.config_context`),
        so one key means one cut whichever engine ran."""
        if self.engine.engine != "transformers":
            return int((self.engine.engine_kwargs or {}).get("max_model_len", self.engine.max_model_len))
        from transformers import AutoConfig

        from trajval_ops.rollout.engines import config_context

        return config_context(AutoConfig.from_pretrained(self._model_path))

    def _prepare(self) -> None:
        """Resolve the checkpoint and open its rollout cache (once per worker; no model load)."""
        if self._provenance is not None:
            return
        from trajval_ops.models import cache_dir as default_cache_root
        from trajval_ops.probe_manifest import resolve_model_reference
        from trajval_ops.rollout.cache import RolloutCache, model_fingerprint
        from trajval_ops.rollout.pass_rates import RolloutPass
        from trajval_ops.rollout.verifiers import revision_record

        self._model_path, checkpoint = resolve_model_reference(self.model)
        # `error` refuses past the running engine's own context (vLLM's max_model_len, the model's
        # under transformers): no cut to key, and no config to read (a LoRA adapter folder has none)
        cut_context = self._cut_context() if self.checks.overlong_prompt != "error" else None
        prompt_settings = self.prompt.as_dict()
        if self.cache_settings.use_cache:
            root = self.cache_settings.cache_dir or default_cache_root() / "rollouts"
            run_key = {"model": model_fingerprint(self._model_path), "sampling": self.decoding.as_dict(),
                       "verifier": self.verifier.spec, "prompt": prompt_settings,
                       **revision_record(self.verifier.revision), **self._prompt_fitting(cut_context),
                       **self._cache_key_parts()}
            self._cache = RolloutCache(root, run_key)
            logger.info(f"{self.what} [{self.output_key}]: rollout cache {self._cache.directory} "
                        f"({len(self._cache)} rows already done)")
        self._provenance = {
            "model": self.model, "model_path": str(self._model_path), "checkpoint": checkpoint,
            **measured_with(self.decoding, self.verifier, self.prompt),
            "completions": str(self._cache.directory) if self.cache_settings.keep_completions else None,
            "trajval_ops_version": __version__, **self._provenance_parts(),
        }
        self._pass = RolloutPass(self._ensure_session, self.decoding, self.verifier, self.prompt, self._cache,
                                 prompts_per_generate=self.engine.prompts_per_generate,
                                 keep_completions=self.cache_settings.keep_completions,
                                 max_bad_truth_share=self.checks.max_bad_truth_share,
                                 overlong_prompt=self.checks.overlong_prompt, id_key=self.id_key, what=self.what,
                                 budget=self.budget, early_key=self.early_key,
                                 cut_context=cut_context)

    def _cache_key_parts(self) -> dict:
        """What the mode adds to the rollout cache's key (what decides its rows' rollouts beyond
        the model, the sampling, the verifier and the prompt; a mode that adds nothing keeps the
        key a measured pass's cache has)."""
        return {}

    def _provenance_parts(self) -> dict:
        """What the mode adds to every row's provenance, after the pass's own settings."""
        return {}

    def _ensure_session(self):
        """Start the engine, once per worker, when the first row missing from the cache needs it."""
        if self._session is None:
            from trajval_ops.rollout.session import EngineSession

            self._session = EngineSession(self.engine.engine, self._model_path, tag=self._token,
                                          torch_threads=self.threads, device=self.device,
                                          **self.engine.options(self.decoding.seed)).start()
            self._times["engine_start_s"] += self._session.startup_s  # imports included
        return self._session

    def _enter_worker(self) -> None:
        """In a worker process another library started for this pass: die with its parent, so a
        killed run leaves no worker generating behind it."""
        if self._worker_pid != os.getpid():
            self._worker_pid = os.getpid()
            if self._worker_pid != self._owner_pid:
                from trajval_ops.lifetime import die_with_parent

                die_with_parent()

    # ------------------------------------------------------------------ a batch

    def columns(self, rows: list[dict], first_row: int | None = None) -> dict[str, list]:
        """The output columns for rows in pool order: pass rate, rollout count, status and
        provenance. ``first_row``: the first row's position in the pool (None: unknown)."""
        raise NotImplementedError

    def _measure(self, rows: list[dict], first_row: int | None) -> dict[str, list]:
        """Every row rolled out (or read from the cache)."""
        self._enter_worker()
        start, engine_start_before = time.perf_counter(), self._times["engine_start_s"]
        self._prepare()
        progress = self._progress_bar()
        results = self._pass.results(rows, first_row, on_rows_done=self._progress_step(progress))
        self._times["operator_s"] += (time.perf_counter() - start
                                      - (self._times["engine_start_s"] - engine_start_before))
        self._log_batch(len(rows), sum(1 for r in results if r.get("cost", NO_COST)["completions"]))
        return {
            self.output_key: [pass_rate(r) for r in results],
            f"{self.output_key}_n": [len(r["rewards"]) for r in results],
            f"{self.output_key}_status": [r.get("status", STATUS_OK) for r in results],
            f"{self.output_key}_provenance": [self._row_provenance(r) for r in results],
        }

    @property
    def stats(self) -> dict:
        """This worker's figures: completions generated, seconds in generate, in the pass (engine
        start-up excluded) and starting engines."""
        counters = self._pass.counters if self._pass is not None else None
        return {"completions": counters.completions if counters else 0,
                "generate_s": counters.generate_s if counters else 0.0, **self._times}

    def _progress_step(self, progress):
        def step(rows: int) -> None:
            progress.update(rows)
            stats = self.stats
            progress.set_postfix(completions_per_s=f"{stats['completions'] / max(stats['generate_s'], 1e-9):.1f}")
        return step

    def _log_batch(self, rows: int, sampled: int) -> None:
        if not sampled:
            return
        stats = self.stats
        logger.info(
            f"{self.what} [{self.output_key}]: batch of {rows} rows, {sampled} sampled, {rows - sampled} from the "
            f"cache or repeated; so far in worker {os.getpid()} {stats['completions']} completions, "
            f"{stats['generate_s']:.2f} s in generate, {stats['operator_s']:.2f} s in the operator "
            f"({stats['completions'] / max(stats['operator_s'], 1e-9):.2f} completions/s)"
        )

    def _progress_bar(self):
        if self._progress is None:
            from tqdm import tqdm

            self._progress = tqdm(desc=f"{self.what} [{self.output_key}]", unit="row", dynamic_ncols=True)
        return self._progress

    def _row_provenance(self, result: dict) -> dict:
        fallback_hits = sum(1 for s, m in zip(result["rewards"], result["methods"]) if s > 0 and m == "last_number")
        return self._provenance_of(engine=result["engine"], dtype=result["dtype"], fallback_hits=fallback_hits,
                                   cost=result.get("cost"))

    def _provenance_of(self, *, engine, dtype, fallback_hits: int, cost) -> dict:
        """A row's provenance: the pass's, then what the row's own rollouts add. Every row has the
        same keys of the same types: a row that generated nothing (not sampled, a bad ground truth;
        its status and cost say so) names the engine and dtype the pass is set to, since a batch of
        such rows with nulls there would fix null types that the next batch's names cannot take."""
        return {**self._provenance, "engine": self.engine.engine if engine is None else engine,
                "dtype": self.engine.dtype if dtype is None else dtype, "fallback_hits": fallback_hits, "cost": cost}

    # ------------------------------------------------------------------ the whole pool

    def check_pool(self, table) -> dict | None:
        """Before the first batch: unique ids, then the mode's own checks and log (a sampled pass
        draws its sample: returned, for the Ray actors)."""
        from trajval_ops.input_checks import check_unique_ids

        check_unique_ids(table, self.id_key, what=self.what)
        replaced = [name for name in (self.output_key, *(f"{self.output_key}_{end}" for end in ("n", "status",
                    "provenance"))) if name in table.column_names]
        if replaced:  # a mapper never rewrites rows unsaid
            logger.warning(f"{self.what} [{self.output_key}]: the pool already has {', '.join(replaced)}: this "
                           "pass replaces them (a pool measured before, measured again); name another output_key to "
                           "keep them")
        return self._check_rows(table)

    def _check_rows(self, table) -> dict | None:
        """The mode's whole-pool step before the first batch (here: the main run's prompt or reward
        compared, and the settings logged); returns a sample drawn from the pool, if any."""
        self._warn_main_run_difference(table)
        logger.info(f"{self.what} [{self.output_key}]: start on {table.num_rows} rows: model={self.model}, "
                    f"engine={self.engine.engine}, n={self.decoding.n}, T={self.decoding.temperature}, "
                    f"max_new_tokens={self.decoding.max_new_tokens}, seed={self.decoding.seed}, "
                    f"verifier={self.verifier.spec}")
        return None

    def _warn_main_run_difference(self, table) -> None:
        """Once, before the first batch: where the pool's ``data_source`` makes a verl run train on
        another prompt or reward than this pass measures with (:mod:`trajval_ops.rollout.verl_reward`)."""
        from trajval_ops.rollout.verl_reward import DATA_SOURCE_KEY, main_run_difference

        if DATA_SOURCE_KEY in table.column_names:
            difference = main_run_difference(table.column(DATA_SOURCE_KEY).to_pylist(), self.prompt.template,
                                              self.checks.verifier)
            if difference:
                logger.warning(f"{self.what} [{self.output_key}]: {difference}")

    def warn_repeats_across_workers(self, table, workers: str) -> None:
        """Say so when the pool repeats a task (one prompt and ground truth) and its batches run in
        several workers: copies share the rollouts of whichever worker samples the task first, and
        the transformers engine samples a call as a whole, so their pass rate can follow the
        workers' order (one worker samples a task in its own batch's company)."""
        from trajval_ops.pools.io import table_rows

        hashes = []
        for i, row in enumerate(table_rows(table)):
            if not self._rolled_out(row):
                continue
            try:
                hashes.append(build_task(row, i, self.prompt, self.id_key, self.what).hash)
            except TrajvalInputError:
                continue  # the pass itself stops on that row, in its batch
        repeats = len(hashes) - len(set(hashes))
        if repeats:
            logger.warning(
                f"{self.what} [{self.output_key}]: the pool repeats tasks ({repeats} row(s) copy an earlier row's "
                f"prompt and ground truth) and its batches run in {workers}: a repeated task's pass rate can depend "
                "on which worker samples it first, so two runs can differ there; deduplicate the pool (trajval "
                "import-pool) or run the pass in one worker for rates that do not depend on the order")

    def _rolled_out(self, row: dict) -> bool:
        """Whether the pass rolls ``row`` out (every row, here)."""
        return True

    def finish(self, table, elapsed_s: float) -> None:
        """After the last batch: log the pass's figures; stop on too many bad ground truths."""
        from trajval_ops.pools.io import table_path_values

        statuses = table_path_values(table, f"{self.output_key}_status") or []
        rates = [r for r in table_path_values(table, self.output_key) or [] if r is not None]
        mean = sum(rates) / len(rates) if rates else float("nan")
        between = sum(1 for r in rates if 0 < r < 1)
        counts = {status: statuses.count(status) for status in (STATUS_BAD_TRUTH, STATUS_TRUNCATED)}
        # each row's own rollouts (an adaptive pass stops rows early); a reused row samples none
        completions = sum(n for n, status in zip(table_path_values(table, f"{self.output_key}_n") or [], statuses)
                          if isinstance(n, (int, float)) and not isinstance(n, bool) and status != STATUS_REUSED)
        logger.info(
            f"{self.what} [{self.output_key}]: done, {len(rates)} rows, {completions} rollouts in {elapsed_s:.1f} s "
            f"({completions / max(elapsed_s, 1e-9):.1f} completions/s overall, cached rows "
            f"included); mean pass rate {mean:.3f}, {between} rows strictly between 0 and 1; "
            f"{counts[STATUS_BAD_TRUTH]} rows with a bad ground truth, {counts[STATUS_TRUNCATED]} prompts truncated"
            + self._finish_note(statuses)
        )
        self.warn_mixed_engines(table)
        self.check_bad_truth_share(statuses)

    def _finish_note(self, statuses: list) -> str:
        """What the mode adds to the figures logged after the last batch (nothing, here)."""
        return ""

    def warn_mixed_engines(self, table) -> None:
        """Say so when the pass's rows were sampled by more than one engine or dtype: a resumed
        pass keeps its cached rows, and the cache is keyed by what defines the distribution (model,
        sampling, verifier, prompt), not by the engine that samples it; the two engines' numerics
        differ (vLLM seeds each prompt; bf16 on a GPU, fp32 on CPU by ``dtype: auto``)."""
        from collections import Counter

        from trajval_ops.pools.io import table_path_values

        provenance = f"{self.output_key}_provenance"
        engines = table_path_values(table, f"{provenance}.engine") or []
        dtypes = table_path_values(table, f"{provenance}.dtype") or []
        statuses = table_path_values(table, f"{self.output_key}_status") or [None] * len(engines)
        generated_nothing = (STATUS_NOT_SAMPLED, STATUS_BAD_TRUTH)  # their engine is the pass's setting
        kinds = Counter((engine, dtype) for engine, dtype, status in zip(engines, dtypes, statuses)
                        if engine is not None and status not in generated_nothing)
        if len(kinds) > 1:
            listed = ", ".join(f"{count} by {engine} in {dtype}" for (engine, dtype), count in kinds.most_common())
            logger.warning(f"{self.what} [{self.output_key}]: the rows were sampled by more than one engine or dtype "
                           f"({listed}; each row's {provenance} names its own): a resumed pass keeps the rows its "
                           f"rollout cache holds from an earlier engine; for one engine throughout, rerun with "
                           f"another cache_dir or use_cache: false")

    def check_bad_truth_share(self, statuses: list[str]) -> None:
        """Stop the run when more rows than ``max_bad_truth_share`` have a bad ground truth."""
        bad = statuses.count(STATUS_BAD_TRUTH)
        share = bad / max(len(statuses), 1)
        if share > self.checks.max_bad_truth_share:
            raise TrajvalInputError(
                f"{self.what}: {bad} of {len(statuses)} rows ({share:.1%}) have a ground truth the verifier cannot "
                f"read, more than max_bad_truth_share={self.checks.max_bad_truth_share}; the first is row "
                f"{statuses.index(STATUS_BAD_TRUTH)}"
            )

    def release(self) -> None:
        """Free the model, close the cache log, the progress bar and the verifier's child.

        A worker process another library started for the pass stops its engine with the worker;
        this waits until the engine's processes are gone (found by the pass's session tag),
        ending what is left after a grace period."""
        if self._progress is not None:
            self._progress.close()
        if self._cache is not None:
            self._cache.close()
        self.verifier.close()
        if self._session is not None:
            self._session.close()
        else:
            from trajval_ops.rollout.session import end_session_processes

            end_session_processes(self._token)
        self._session = self._cache = self._progress = self._provenance = None
        import gc

        gc.collect()
