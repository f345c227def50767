"""An endpoint pass's columns keep one type across Data-Juicer's batches, whichever rows a batch
holds. ``datasets`` (the default executor) fixes a column's Arrow type from the first batch it
writes: a column null throughout that batch stayed null, and the next batch holding a value
stopped the run with a raw traceback ("Couldn't write column 'trajval_r_early': its type in this
file is null"; a struct field: "Couldn't cast array of type string to null"). A sampled pass wrote
no rate and no engine or dtype on the rows it does not sample, so a pool whose first batch holds
only such rows could not be scored."""

from __future__ import annotations

from tests.conftest import REPO, dj_process, read_jsonl, write_jsonl
from trajval_ops.priors.sampled import stratified_sample

SAMPLE_SEED = 3  # draws none of the 16 rows' first 4 (one batch): the first batch written is all unsampled


def test_a_sampled_pass_whose_first_batch_it_does_not_sample_is_written(tmp_path):
    rows = read_jsonl(REPO / "trajval_ops" / "data" / "demo_arith_pool.jsonl")[:16]
    chosen = stratified_sample([row["task_id"] for row in rows], 0.25, SAMPLE_SEED)
    assert not chosen[:4].any() and chosen.any()
    pool = write_jsonl(tmp_path / "pool.jsonl", rows)
    recipe = {
        "project_name": "sampled_first_batch", "dataset_path": str(pool), "export_path": str(tmp_path / "out.jsonl"),
        "np": 1, "text_keys": None, "skip_op_error": False, "open_tracer": False, "op_fusion": False,
        "process": [{"trajval_endpoint_reward_mapper": {
            "model": "tiny-arith", "window": "early", "engine": "transformers", "n": 2, "max_new_tokens": 8,
            "prompts_per_generate": 4, "batch_size": 4, "seed": 0, "cache_dir": str(tmp_path / "rollouts"),
            "verifier": "math", "verifier_options": {"fallback_last_number": True}, "id_key": "task_id",
            "sample_fraction": 0.25, "sample_seed": SAMPLE_SEED}}],
    }
    result = dj_process(recipe, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = read_jsonl(tmp_path / "out.jsonl")
    assert [row["task_id"] for row in out] == [row["task_id"] for row in rows]
    for row, keep in zip(out, chosen):
        provenance = row["trajval_r_early_provenance"]
        if keep:
            assert row["trajval_r_early"] in (0.0, 0.5, 1.0) and row["trajval_r_early_n"] == 2
            assert provenance["engine"] == "transformers" and isinstance(provenance["dtype"], str)
        else:  # not sampled: no rate, nothing generated; the engine and dtype the pass is set to
            assert row["trajval_r_early"] is None and row["trajval_r_early_status"] == "not_sampled"
            assert (provenance["engine"], provenance["dtype"]) == ("transformers", "auto")
            assert provenance["cost"] == {"completions": 0, "generated_tokens": 0}
    assert "more than one engine or dtype" not in result.stderr  # the rows left out sampled nothing


def test_a_batch_of_bad_ground_truths_gives_the_provenance_type_of_a_sampled_batch(tmp_path):
    """A row with a bad ground truth generates nothing either: a first batch of only such rows had
    an engine and dtype of null type, which a later batch's names could not be cast to."""
    import pyarrow as pa

    from tests.conftest import arithmetic_rows
    from trajval_ops.ops.endpoint_reward_mapper import TrajvalEndpointRewardMapper

    rows = arithmetic_rows()[:4]
    for row in rows[:2]:
        row["reward_model"] = {"ground_truth": "\\frac{"}
    op = TrajvalEndpointRewardMapper(model="tiny-random-llama", output_key="acc", engine="transformers", n=2,
                                     max_new_tokens=4, use_cache=False, max_bad_truth_share=0.5)
    batches = [op.process_batched({key: [row[key] for row in part] for key in part[0]})
               for part in (rows[:2], rows[2:])]
    op.release()
    assert batches[0]["acc_status"] == ["bad_ground_truth"] * 2 and batches[1]["acc_status"] == ["ok"] * 2
    first, second = (pa.array(batch["acc_provenance"]).type for batch in batches)
    assert first == second and first.field("engine").type == pa.string()
