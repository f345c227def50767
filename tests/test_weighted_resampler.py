"""trajval_weighted_resampler on in-memory datasets (default executor code path)."""

from collections import Counter

import numpy as np
import pytest
from data_juicer.core.data import NestedDataset
from datasets import Dataset

from trajval_ops import core
from trajval_ops.ops.learnability_mapper import TrajvalLearnabilityMapper
from trajval_ops.ops.weighted_resampler import TrajvalWeightedResampler
from trajval_ops.errors import TrajvalInputError


@pytest.fixture
def scored(fixture_rows):
    return TrajvalLearnabilityMapper().run(NestedDataset(Dataset.from_list(fixture_rows))).to_list()


def resample(rows, **params):
    return TrajvalWeightedResampler(**params).run(NestedDataset(Dataset.from_list(rows))).to_list()


@pytest.mark.parametrize("mode", ["multinomial", "systematic"])
def test_same_seed_same_output(scored, mode):
    a = resample(scored, mode=mode, seed=5)
    b = resample(scored, mode=mode, seed=5)
    c = resample(scored, mode=mode, seed=6)
    assert a == b
    assert [r["trajval_source_row"] for r in a] != [r["trajval_source_row"] for r in c]


def test_original_fields_pass_through(scored):
    out = resample(scored, mode="multinomial", num_samples=100, seed=1)
    assert len(out) == 100
    for row in out:
        source = scored[row["trajval_source_row"]]
        assert {k: row[k] for k in source} == source
    assert out[0]["trajval_resample_provenance"]["mode"] == "multinomial"
    assert out[0]["trajval_resample_provenance"]["pool_rows"] == len(scored)


def test_prob_is_normalised_weight(scored):
    out = resample(scored, mode="systematic", seed=0)
    p = core.normalize([r["trajval_weight"] for r in scored])
    for row in out:
        assert row["trajval_prob"] == pytest.approx(p[row["trajval_source_row"]])


def test_systematic_counts_are_floor_or_ceil(scored):
    n = 480
    out = resample(scored, mode="systematic", num_samples=n, seed=3)
    counts = Counter(r["trajval_source_row"] for r in out)
    expected = n * core.normalize([r["trajval_weight"] for r in scored])
    for i, e in enumerate(expected):
        assert counts.get(i, 0) in (np.floor(e), np.ceil(e))
    # pool order kept, duplicates adjacent
    assert [r["trajval_source_row"] for r in out] == sorted(r["trajval_source_row"] for r in out)


def test_shuffle_is_seeded_permutation(scored):
    plain = resample(scored, mode="systematic", seed=2)
    shuffled = resample(scored, mode="systematic", seed=2, shuffle=True)
    assert sorted(r["trajval_source_row"] for r in shuffled) == [r["trajval_source_row"] for r in plain]
    assert shuffled == resample(scored, mode="systematic", seed=2, shuffle=True)


def test_hard_cut_keeps_positive_scores_once(scored):
    out = resample(scored, mode="hard_cut")
    kept = [i for i, r in enumerate(scored) if r["trajval_score"] > 0]
    assert [r["trajval_source_row"] for r in out] == kept
    assert sum(r["trajval_prob"] for r in out) == pytest.approx(1.0)
    higher = resample(scored, mode="hard_cut", threshold=0.2)
    assert all(r["trajval_score"] > 0.2 for r in higher) and len(higher) < len(out)


def test_hard_cut_keeping_nothing_is_an_error(scored):
    with pytest.raises(TrajvalInputError, match="kept no row"):
        resample(scored, mode="hard_cut", threshold=1.0)


def test_online_weight_composes(scored):
    rows = [dict(r, w_online=0.0 if i % 2 else 2.0) for i, r in enumerate(scored)]
    out = resample(rows, mode="multinomial", num_samples=500, seed=0, online_weight_key="w_online")
    assert all(r["trajval_source_row"] % 2 == 0 for r in out)
    p = core.normalize(core.compose_online([r["trajval_weight"] for r in rows], [r["w_online"] for r in rows]))
    assert out[0]["trajval_prob"] == pytest.approx(p[out[0]["trajval_source_row"]])


def test_all_floor_pool_samples_uniformly_with_a_warning(caplog_loguru):
    rows = [{"id": i, "trajval_weight": 0.05, "trajval_score": 0.0} for i in range(10)]
    out = resample(rows, mode="systematic", seed=0)
    assert sorted(r["trajval_source_row"] for r in out) == list(range(10))
    assert all(r["trajval_prob"] == pytest.approx(0.1) for r in out)
    assert "weight at the floor" in caplog_loguru.text


@pytest.mark.parametrize(
    "weights,message",
    [
        ([0.5, None], "row 1 (id=1): field 'trajval_weight' is missing"),
        ([0.5, float("nan")], "row 1 (id=1): field 'trajval_weight' is nan"),
        ([0.5, -1.0], "row 1 (id=1): field 'trajval_weight' = -1.0 is not a finite number >= 0"),
        (["0.5", "x"], "row 0 (id=0): field 'trajval_weight' must be a number, got str '0.5'"),
        ([0.0, 0.0], "every weight is zero"),
    ],
)
def test_bad_weights(weights, message):
    import pyarrow as pa

    if any(isinstance(w, str) for w in weights):
        table = pa.table({"id": [0, 1], "trajval_weight": pa.array(weights, type=pa.string())})
    else:
        table = pa.table({"id": [0, 1], "trajval_weight": pa.array(weights, type=pa.float64())})
    with pytest.raises(TrajvalInputError) as err:
        TrajvalWeightedResampler().resample_table(table)
    assert message in str(err.value)


def test_empty_pool_is_an_error():
    import pyarrow as pa

    with pytest.raises(TrajvalInputError, match="empty"):
        TrajvalWeightedResampler().resample_table(pa.table({"trajval_weight": pa.array([], type=pa.float64())}))


def test_learnable_subset_keeps_profiles_not_a_score_threshold():
    """The paper's subset is by profile: an Ineffective task with delta <= 0 (score 0) is kept and
    a Mastered task with a small positive delta (score > 0) is not; hard_cut does the opposite."""
    import pyarrow as pa

    from trajval_ops.ops.weighted_resampler import TrajvalWeightedResampler

    table = pa.table({
        "id": ["ineffective-flat", "mastered-up", "stable", "unlearned"],
        "trajval_weight": [0.05, 0.3, 0.9, 0.05],
        "trajval_score": [0.0, 0.004, 0.5, 0.0],
        "trajval_profile": ["ineffective", "mastered", "stable", "unlearned"],
    })
    subset = TrajvalWeightedResampler(mode="learnable_subset").resample_table(table)
    assert subset.column("id").to_pylist() == ["ineffective-flat", "stable"]
    cut = TrajvalWeightedResampler(mode="hard_cut").resample_table(table)
    assert cut.column("id").to_pylist() == ["mastered-up", "stable"]
    with pytest.raises(TrajvalInputError, match="lacks"):
        TrajvalWeightedResampler(mode="learnable_subset").resample_table(table.drop_columns(["trajval_profile"]))


def test_a_bad_profile_names_the_row_and_its_id():
    import pyarrow as pa

    table = pa.table({"id": ["a", "b"], "trajval_weight": [0.5, 0.5], "trajval_score": [0.1, 0.1],
                      "trajval_profile": ["stable", "nonsense"]})
    with pytest.raises(TrajvalInputError, match=r"row 1 \(id='b'\): field 'trajval_profile' = 'nonsense'"):
        TrajvalWeightedResampler(mode="learnable_subset").resample_table(table)


@pytest.mark.parametrize("mode", ["multinomial", "systematic"])
def test_a_pool_drawn_by_its_weight_is_not_drawn_by_it_again(scored, mode):
    """A resampled pool's rows already come in proportion to w: a weighted sampler on it drew in
    proportion to w squared (a task of weight 1 beside one of 0.25 came 94% of the time, not 80%).
    Refused for the weight it was drawn by; a subset mode's pool (each row once) is weighted."""
    from trajval_ops.samplers import weights_from_dataset

    drawn = Dataset.from_list(resample(scored, mode=mode, seed=0))
    with pytest.raises(TrajvalInputError, match=rf"field 'trajval_weight': this pool was drawn by that weight "
                                                rf"already \(trajval_weighted_resampler, mode {mode}"):
        weights_from_dataset(drawn)
    with pytest.raises(TrajvalInputError, match="drawn by that weight already"):
        weights_from_dataset(drawn.to_pandas())
    with pytest.raises(TrajvalInputError, match="field 'trajval_prob': this pool was drawn"):  # the same draw
        weights_from_dataset(drawn, "trajval_prob")
    cut = Dataset.from_list(resample(scored, mode="hard_cut", threshold=0.0))
    assert weights_from_dataset(cut).size == len(cut)


@pytest.mark.parametrize("mode", ["multinomial", "systematic"])
def test_the_resampler_does_not_resample_a_pool_it_drew(scored, mode):
    """The resampler is a weighted drawer too: run again on its own drawn export it drew by w once
    more (a task of weight 1 beside one of 0.25 came 94% of the time, not 80%); a cut after the
    draw recorded itself as the cut, so the weighted samplers drew the duplicated rows by w again.
    Both are refused naming the first draw; cut, then draw, is the order that works."""
    drawn = resample(scored, mode=mode, seed=0)
    for again in ("multinomial", "systematic", "hard_cut", "learnable_subset"):
        with pytest.raises(TrajvalInputError, match=rf"this pool was drawn by its weight 'trajval_weight' already "
                                                    rf"\(mode {mode}: 48 of 48 rows carry 'trajval_resample_provenance'\)"):
            resample(drawn, mode=again, seed=1)
    cut = resample(scored, mode="hard_cut", threshold=0.0)
    assert len(resample(cut, mode=mode, seed=1)) == len(cut)


@pytest.mark.parametrize("mode", ["multinomial", "systematic"])
def test_a_drawn_pool_read_from_json_lines_by_a_plain_reader_is_known_as_drawn(scored, mode, tmp_path):
    """The export stores the resampler's record once, in trajval_provenance_record: read with
    json.loads or datasets' json loader (as the trainers' examples read pools), the drawn pool was
    weighted again (weights squared; floor tasks 1.3% of draws instead of 14%)."""
    import json

    from trajval_ops.pools.io import write_rows
    from trajval_ops.samplers import weights_from_dataset
    from trajval_ops.samplers.torch_sampler import TrajvalSampler

    path = tmp_path / "drawn.jsonl"
    write_rows(path, resample(scored, mode=mode, seed=0))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert "trajval_resample_provenance" not in rows[0]  # stored in the record
    with pytest.raises(TrajvalInputError, match="drawn by that weight already"):
        TrajvalSampler.from_dataset(rows, seed=0)
    from datasets import load_dataset

    with pytest.raises(TrajvalInputError, match="drawn by that weight already"):
        weights_from_dataset(load_dataset("json", data_files=str(path), split="train"))


def test_learnable_subset_names_a_predicted_row_and_what_to_use():
    import pyarrow as pa

    table = pa.table({"id": ["a", "b"], "trajval_weight": [0.5, 0.5], "trajval_score": [0.1, 0.1],
                      "trajval_profile": ["stable", None], "trajval_predicted": [False, True]})
    with pytest.raises(TrajvalInputError, match=r"row 1 \(id='b'\): .*\(a sampled prior predicted this row's score: it "
                                                r"has no profile; use hard_cut or a drawing mode"):
        TrajvalWeightedResampler(mode="learnable_subset").resample_table(table)


def _scored_and_drawn(scored, tmp_path, mode: str):
    """A scored pool and the pool drawn from it, written as the operators export them."""
    from trajval_ops.pools.io import write_rows

    folder = tmp_path / "pools"
    folder.mkdir()
    write_rows(folder / "a_scored.jsonl", scored)
    write_rows(folder / "b_drawn.jsonl", resample(scored, mode=mode, seed=0))
    both = tmp_path / "both.jsonl"  # `cat scored.jsonl drawn.jsonl`: the first row was never drawn
    both.write_bytes((folder / "a_scored.jsonl").read_bytes() + (folder / "b_drawn.jsonl").read_bytes())
    return both, folder


@pytest.mark.parametrize("mode", ["multinomial", "systematic"])
def test_a_pool_holding_drawn_rows_after_undrawn_ones_is_known_as_drawn_by_every_reader(scored, mode, tmp_path):
    """Issue 57: the drawn-pool check read the first row only; `cat scored.jsonl drawn.jsonl`, or
    a folder holding both, was drawn by weight again (the drawn rows in proportion to w squared).
    The whole provenance column is read, by every reader a trainer or the resampler uses: rows from
    json.loads, datasets' json loader, pandas, Arrow tables (a file or a folder of files)."""
    import json

    from datasets import load_dataset

    from trajval_ops.pools.io import read_table
    from trajval_ops.samplers import weights_from_dataset
    from trajval_ops.samplers.torch_sampler import TrajvalSampler

    both, folder = _scored_and_drawn(scored, tmp_path, mode)
    drawn_rows = len(scored)
    count = rf"{drawn_rows} of {2 * drawn_rows} rows"
    refused = rf"field 'trajval_weight': this pool was drawn by that weight already .*mode {mode}.*{count}"
    rows = [json.loads(line) for line in both.read_text().splitlines()]
    assert "trajval_resample_provenance" not in json.dumps(rows[0])
    with pytest.raises(TrajvalInputError, match=refused):
        TrajvalSampler.from_dataset(rows, seed=0)
    loaded = load_dataset("json", data_files=str(both), split="train")
    # (datasets' json loader refuses the folder itself: its files' columns differ)
    for dataset in (loaded, loaded.to_pandas(), read_table(both), read_table(folder), Dataset(read_table(folder))):
        with pytest.raises(TrajvalInputError, match=refused):
            weights_from_dataset(dataset)
    for pool in (both, folder):
        with pytest.raises(TrajvalInputError, match=rf"this pool was drawn by its weight 'trajval_weight' already "
                                                    rf"\(mode {mode}: {count} carry"):
            TrajvalWeightedResampler(mode="systematic").resample_table(read_table(pool))
    undrawn = loaded.select(range(drawn_rows))  # the rows a dataset serves, not the table under it
    assert weights_from_dataset(undrawn).size == drawn_rows


@pytest.mark.parametrize("prior", ["variance", "bandpass"])
def test_learnable_subset_of_a_one_pass_priors_pool_names_the_prior_and_what_to_use(fixture_rows, prior):
    """Issue 57: on a variance-prior pool learnable_subset said to run trajval_learnability_mapper
    first, which had run: a one-pass prior writes no profile. The message names the prior its rows
    record and the modes that work; a pool part of whose rows a one-pass prior scored (its rows'
    profile null) says so for the row named."""
    import pyarrow as pa

    one_pass = TrajvalLearnabilityMapper(prior=prior).run(NestedDataset(Dataset.from_list(fixture_rows))).to_list()
    with pytest.raises(TrajvalInputError, match=rf"learnable_subset keeps rows by their 'trajval_profile', and the "
                                                rf"pool was scored by the {prior} prior \(its rows' "
                                                rf"trajval_score_provenance\), which reads the early pass alone and "
                                                rf"writes no profile: use hard_cut or a drawing mode, or score the pool "
                                                rf"with prior: trajval"):
        resample(one_pass, mode="learnable_subset")
    scored = TrajvalLearnabilityMapper().run(NestedDataset(Dataset.from_list(fixture_rows[:2]))).to_list()
    mixed = pa.Table.from_pylist(scored + [dict(row, id="other") for row in one_pass[:1]])
    with pytest.raises(TrajvalInputError, match=rf"row 2 \(.*\): field 'trajval_profile' = None is not a profile .*"
                                                rf"\(the {prior} prior scored this row: it writes no profile; use "
                                                rf"hard_cut or a drawing mode"):
        TrajvalWeightedResampler(mode="learnable_subset").resample_table(mixed)
