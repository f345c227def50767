"""Bad input to the probe trainer fails early, names the row and field, and writes nothing."""

from __future__ import annotations

import pyarrow as pa
import pytest

from trajval_ops.probe.config import ProbeConfig
from trajval_ops.probe.run import ProbeDirectoryError, run_probe
from trajval_ops.errors import TrajvalInputError


def rows(n):
    return [{"id": f"t{i}", "prompt": f"What is {i} + 1?", "reward_model": {"ground_truth": str(i + 1)}}
            for i in range(n)]


CONFIG = ProbeConfig(model="tiny-random-llama", epochs=1, prompts_per_batch=2, num_generations=2,
                     micro_batch_size=4, max_completion_length=4)


def test_missing_ground_truth_names_row_and_field(tmp_path):
    pool = rows(2)
    del pool[1]["reward_model"]
    with pytest.raises(TrajvalInputError, match=r"row 1 \(id='t1'\).*'reward_model.ground_truth' is missing"):
        run_probe(pool, ["t0", "t1"], CONFIG, tmp_path / "probe")
    assert not (tmp_path / "probe").exists()


def test_bad_prompt_names_row(tmp_path):
    pool = rows(2)
    pool[0]["prompt"] = ""
    with pytest.raises(TrajvalInputError, match=r"row 0 \(id='t0'\).*prompt"):
        run_probe(pool, ["t0", "t1"], CONFIG, tmp_path / "probe")


def test_probe_smaller_than_a_batch_and_foreign_directory(tmp_path):
    with pytest.raises(ValueError, match="fewer than prompts_per_batch"):
        run_probe(rows(1), ["t0"], CONFIG, tmp_path / "probe")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("x")
    with pytest.raises(ProbeDirectoryError, match="not empty"):
        run_probe(rows(2), ["t0", "t1"], CONFIG, tmp_path / "busy")


def test_operator_refuses_a_probe_larger_than_the_pool(tmp_path):
    from trajval_ops.ops.probe_trainer import TrajvalProbeTrainer

    with pytest.raises(ValueError, match="output_dir is required"):
        TrajvalProbeTrainer()
    op = TrajvalProbeTrainer(output_dir=str(tmp_path / "probe"), probe_size=5, model="tiny-random-llama")
    table = pa.Table.from_pylist(rows(4))
    with pytest.raises(ValueError, match="larger than the pool"):
        op.process_table(table)
    positions, ids = TrajvalProbeTrainer(output_dir="x", probe_size=2, forced_ids=["t3"], seed=5).probe_positions(table)
    assert "t3" in ids and len(ids) == 2 and list(positions) == sorted(positions)
    assert not (tmp_path / "probe").exists()


def test_the_probe_reads_the_id_field_any_row_holds_as_the_passes_do():
    """The probe chose its id field from the first row alone, where a column of nulls counts as
    present: a pool with an empty `id` column (concatenated files, one without ids) and its ids in
    `task_id` was refused ("row 0: id field 'id' is missing") where the passes read `task_id`. Now
    the field is the passes' (input_checks.id_key_of: the first any row holds), and a row without
    it is an error naming the row."""
    from trajval_ops.ops.probe_trainer import TrajvalProbeTrainer

    op = TrajvalProbeTrainer(output_dir="x", probe_size=2, forced_ids=["t3"], seed=5)
    empty_id = [{**row, "id": None, "task_id": row["id"]} for row in rows(4)]
    positions, ids = op.probe_positions(pa.Table.from_pylist(empty_id))
    assert "t3" in ids and len(ids) == 2
    some_without = [{**row, "id": None if i == 1 else row["id"]} for i, row in enumerate(rows(4))]
    with pytest.raises(TrajvalInputError, match=r"row 1.*id field 'id' is missing"):
        op.probe_positions(pa.Table.from_pylist(some_without))


def test_unreadable_ground_truth_names_row_and_writes_nothing(tmp_path):
    pool = rows(2)
    pool[1]["reward_model"]["ground_truth"] = "\\frac{"
    with pytest.raises(TrajvalInputError, match=r"row 1 \(id='t1'\): field 'reward_model.ground_truth': math-verify cannot read"):
        run_probe(pool, ["t0", "t1"], CONFIG, tmp_path / "probe")
    assert not (tmp_path / "probe").exists()


def test_overlong_probe_prompt_names_row(tmp_path):
    pool = rows(2)
    pool[1]["prompt"] = "add " * 2100 + "1 and 1"
    with pytest.raises(TrajvalInputError, match=r"probe row 1 \(id='t1'\): field 'prompt': the rendered prompt has \d+ tokens"):
        run_probe(pool, ["t0", "t1"], CONFIG, tmp_path / "probe")


def _unfinished_probe(out, config, probe_ids) -> dict:
    """The manifest an interrupted probe of ``config`` would leave in ``out`` on this CPU."""
    from trajval_ops.models import resolve_model
    from trajval_ops.probe_manifest import STATUS_RUNNING, config_hash
    from trajval_ops.probe.run import _start_manifest, library_versions

    identity = {"config": config.identity(), "probe_ids": list(probe_ids), "device": "cpu",
                "trl": library_versions()["trl"]}
    manifest = _start_manifest(config, probe_ids, resolve_model(config.model), config_hash(identity), "cpu", 1, None)
    assert manifest["status"] == STATUS_RUNNING and (manifest["precision"], manifest["generation_engine"]) == (
        "fp32", "transformers")
    return manifest


def test_an_unfinished_probe_goes_on_only_where_its_numerics_resolve_alike(tmp_path, monkeypatch):
    """``precision: auto`` and ``generation: auto`` resolve per machine and are kept out of the
    probe's identity at their defaults: a probe started on a GPU (bf16-mixed) does not go on here
    in fp32 (nor one started with vLLM without it); the error comes before any model loads."""
    from trajval_ops import models
    from trajval_ops.errors import TrajvalInputError
    from trajval_ops.probe_manifest import write_manifest

    out = tmp_path / "probe"
    manifest = _unfinished_probe(out, CONFIG, ["t0", "t1"])
    write_manifest(out, manifest | {"precision": "bf16-mixed"})  # as if it started on a GPU
    monkeypatch.setattr(models, "resolve_model", lambda *a, **k: pytest.fail("the model was looked up"))
    with pytest.raises(ProbeDirectoryError, match=r"holds an unfinished probe whose steps so far trained otherwise "
                                                  r"than this machine would train the rest: precision bf16-mixed "
                                                  r"\(here fp32\); resume it on a machine like"):
        run_probe(rows(2), ["t0", "t1"], CONFIG, out)
    write_manifest(out, manifest | {"generation_engine": "vllm"})
    with pytest.raises(TrajvalInputError, match=r"generation vllm \(here transformers\)"):
        run_probe(rows(2), ["t0", "t1"], CONFIG, out)


def test_an_unfinished_probe_goes_on_only_with_the_verifier_reading_it_started_with(tmp_path, monkeypatch):
    """The rewards an unfinished probe trained on so far were read by the verifier's revision of the
    release that started it: the rest of its steps under another reading would mix the two.
    Refused before any model loads."""
    from trajval_ops import models
    from trajval_ops.probe_manifest import write_manifest
    from trajval_ops.rollout.verifiers import MathVerifier

    out = tmp_path / "probe"
    manifest = _unfinished_probe(out, CONFIG, ["t0", "t1"])
    assert CONFIG.verifier == "math" and manifest["verifier_revision"] == MathVerifier.revision == 2
    monkeypatch.setattr(models, "resolve_model", lambda *a, **k: pytest.fail("the model was looked up"))
    write_manifest(out, manifest | {"verifier_revision": 1})
    with pytest.raises(ProbeDirectoryError, match=r"holds an unfinished probe whose rewards so far were read by "
                                                  r"revision 1 of the math verifier; this release reads answers "
                                                  r"as revision 2"):
        run_probe(rows(2), ["t0", "t1"], CONFIG, out)


def test_an_unfinished_probe_recording_no_verifier_revision_is_refused_without_naming_one(tmp_path, monkeypatch):
    """The math verifier reads answers as revision 2 since 2026-11-27, and manifests record the
    revision only from later that day: a manifest recording none was read by revision 1 or 2. It is
    refused (the reading is not known) without claiming revision 1, nor advising to finish it with
    the release that started it (one from 2026-11-27 read as this one does and is refused too). A
    verifier never revised reads a manifest recording none as revision 1, its own."""
    from trajval_ops import models
    from trajval_ops.probe_manifest import write_manifest
    from trajval_ops.probe.run import _check_same_reading

    out = tmp_path / "probe"
    manifest = _unfinished_probe(out, CONFIG, ["t0", "t1"])
    write_manifest(out, {k: v for k, v in manifest.items() if k != "verifier_revision"})
    monkeypatch.setattr(models, "resolve_model", lambda *a, **k: pytest.fail("the model was looked up"))
    with pytest.raises(ProbeDirectoryError) as refused:
        run_probe(rows(2), ["t0", "t1"], CONFIG, out)
    message = str(refused.value)
    assert ("whose manifest records no revision of the math verifier (records without one were read by revision 1 or 2, which cannot be told apart); "
            "this release reads answers as revision 2") in message
    assert "revision 1 of the" not in message and "release that started it" not in message
    assert "use another output_dir, or delete this one" in message
    _check_same_reading(out, {}, "answer_tag")  # revision 1 then and now: goes on


def test_a_probe_of_the_same_ids_on_other_task_content_is_not_reused(tmp_path, monkeypatch):
    """The probe's hash holds its task ids, not their content: a pool whose prompt or ground truth
    was fixed under the same ids got the finished probe trained on the old tasks ("already
    complete; not repeating it"). The manifest records the tasks' sha256 and a rerun compares it."""
    from trajval_ops import models
    from trajval_ops.probe_manifest import STATUS_COMPLETE, write_manifest
    from trajval_ops.probe.run import probe_examples, tasks_digest

    out = tmp_path / "probe"
    manifest = _unfinished_probe(out, CONFIG, ["t0", "t1"])
    finished = manifest | {"status": STATUS_COMPLETE, "tasks_sha256": tasks_digest(probe_examples(rows(2), CONFIG))}
    write_manifest(out, finished)
    monkeypatch.setattr(models, "resolve_model", lambda *a, **k: pytest.fail("the model was looked up"))
    assert run_probe(rows(2), ["t0", "t1"], CONFIG, out)["status"] == STATUS_COMPLETE  # the same tasks: reused
    fixed = rows(2)
    fixed[1]["reward_model"]["ground_truth"] = "999"
    with pytest.raises(ProbeDirectoryError, match="holds a probe of the same task ids whose prompts or ground truths "
                                                  "were others"):
        run_probe(fixed, ["t0", "t1"], CONFIG, out)
    write_manifest(out, {k: v for k, v in finished.items() if k != "tasks_sha256"})  # before the digest: not compared
    assert run_probe(fixed, ["t0", "t1"], CONFIG, out)["status"] == STATUS_COMPLETE


def test_a_refused_probe_directory_is_a_user_error():
    """Under dj-process a user error is one readable block and exit 2, not Data-Juicer's traceback."""
    from trajval_ops.ops.dj.error_exit import user_error_of

    refused = ProbeDirectoryError("probe: /x holds a probe run with a different configuration")
    assert user_error_of(refused) is refused


def _special_adding_tokenizer(single: str):
    """The tiny model's tokenizer made to add special tokens to every text (``single`` as
    tokenizers' TemplateProcessing writes it), its chat template writing BOS (as Llama 3's)."""
    from tokenizers.processors import TemplateProcessing

    from trajval_ops.models import resolve_model
    from trajval_ops.probe.run import load_tokenizer

    tokenizer = load_tokenizer(resolve_model("tiny-random-llama"))
    tokenizer.chat_template = "{{ bos_token }}" + tokenizer.chat_template
    specials = [(tokenizer.bos_token, tokenizer.bos_token_id), (tokenizer.eos_token, tokenizer.eos_token_id)]
    tokenizer._tokenizer.post_processor = TemplateProcessing(single=single, special_tokens=specials)
    return tokenizer


def test_the_probe_trains_on_the_prompt_tokens_the_passes_evaluate():
    """TRL tokenizes a text prompt with the tokenizer's special tokens added; the endpoint passes
    without (the chat template writes them). A tokenizer adding BOS to a template that writes it
    (Llama 3) trained the probe on two BOS: now TRL's tokens are the passes' tokens. A tokenizer
    adding what no text can drop is refused naming the row."""
    from trajval_ops.probe.run import probe_examples, training_dataset
    from trajval_ops.rollout.prompts import render_prompt

    tokenizer = _special_adding_tokenizer("<|im_start|> $A")  # SmolLM2's BOS
    examples = probe_examples(rows(3), CONFIG)
    dataset = training_dataset(examples, tokenizer, CONFIG, max_context=2048)
    for example, record in zip(examples, dataset):
        rendered = render_prompt(tokenizer, example["messages"])
        evaluated = tokenizer(rendered, add_special_tokens=False)["input_ids"]
        trained = tokenizer(record["prompt"])["input_ids"]  # as TRL's GRPOTrainer tokenizes a text prompt
        assert trained == evaluated and tokenizer(rendered)["input_ids"] == [tokenizer.bos_token_id] + evaluated
    with pytest.raises(TrajvalInputError, match=r"probe row 0 \(id='t0'\): field 'prompt': the tokenizer adds special "
                                                r"tokens \[\d+, \d+\] to a text"):
        training_dataset(examples, _special_adding_tokenizer(f"<|im_start|> $A {tokenizer.eos_token}"),
                         CONFIG, max_context=2048)
