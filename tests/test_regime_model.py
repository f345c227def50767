"""The miniature regime's tokenizer and the shipped ``tiny-arith`` model (and the script that
made it)."""

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO
from trajval_ops.regime.tasks import FAMILIES, generate_tasks, question_of
from trajval_ops.regime.tokenizer import CHARS, build_char_tokenizer

#: The band the shipped model's pass@1 (T = 1.0) is meant to lie in: partial competence.
MEAN_BAND = (0.3, 0.5)
MASTERED, OUT_OF_REACH, FRONTIER = 0.9, 0.05, (0.2, 0.7)
#: A rebuild on another CPU: the training is chaotic in its float roundings, so another CPU's kernels
#: give other weights. Measured rebuilds of the shipped model (mean pass@1 0.392, an AMD EPYC): on
#: an Intel Xeon (AVX-512, 2 cores) 0.316, 0.340 with ATen's AVX2 kernels, 0.350 with MKL's AVX2
#: too; one family moved by up to 0.33 (add2 0.44 -> 0.11), and one of the two mastered families
#: fell to 0.84-0.89. What every rebuild kept: the mean within this of the shipped, the band's
#: shape with at least one mastered family.
MEAN_TOLERANCE, REBUILD_MASTERED = 0.08, 1


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def shipped():
    from trajval_ops.models import resolve_model

    return resolve_model("tiny-arith")


def test_every_question_and_answer_round_trips(tokenizer):
    assert len(tokenizer) == 46
    assert (tokenizer.pad_token, tokenizer.eos_token) == ("<pad>", "<eos>")
    for row in generate_tasks(50 * len(FAMILIES), seed=0, part=None):
        text = question_of(row) + "=" + row["reward_model"]["ground_truth"]
        ids = tokenizer(text)["input_ids"]  # nothing added around the text
        assert len(ids) == len(text) and tokenizer.unk_token_id not in ids, text
        assert tokenizer.decode(ids) == text
    ids = tokenizer(CHARS, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == CHARS
    assert tokenizer.decode(ids + [tokenizer.eos_token_id, tokenizer.pad_token_id], skip_special_tokens=True) == CHARS


def test_chat_template_renders_question_and_answer_marker(tokenizer):
    from trajval_ops.rollout.prompts import build_messages, render_prompt

    row = generate_tasks(1, seed=0)[0]
    question = question_of(row)
    assert render_prompt(tokenizer, build_messages(row, template="auto")) == question + "="
    # the math template's system prompt is left out: the model knows no instructions
    assert render_prompt(tokenizer, build_messages({"prompt": question}, template="math")) == question + "="
    turn = [{"role": "user", "content": "2+3"}, {"role": "assistant", "content": "5"}]
    assert tokenizer.apply_chat_template(turn, tokenize=False) == "2+3=5<eos>"


def test_shipped_model_resolves_loads_and_answers(shipped, tokenizer):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trajval_ops import models

    assert shipped == REPO / "trajval_ops" / "data" / "models" / "tiny-arith"
    assert "tiny-arith" in models.KNOWN_MODELS
    model = AutoModelForCausalLM.from_pretrained(shipped)
    assert type(model).__name__ == "LlamaForCausalLM" and model.config.tie_word_embeddings
    assert model.config.head_dim in (32, 64)  # sizes vLLM's CPU attention has kernels for
    assert 600_000 < sum(p.numel() for p in model.parameters()) < 700_000
    loaded = AutoTokenizer.from_pretrained(shipped)
    assert loaded.get_vocab() == tokenizer.get_vocab() and loaded.chat_template == tokenizer.chat_template
    assert json.loads((shipped / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    prompt = loaded.apply_chat_template([{"role": "user", "content": "max 3 8 4 1"}], tokenize=False,
                                        add_generation_prompt=True)
    inputs = loaded(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=4, do_sample=False, pad_token_id=loaded.pad_token_id)
    assert out[0, -1].item() == loaded.eos_token_id  # answers, then stops
    assert loaded.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True) == "8"


def test_prepare_cli_lists_the_shipped_model(shipped, capsys):
    from trajval_ops.cli import prepare_model

    assert prepare_model.main(["tiny-arith"]) == 0
    assert capsys.readouterr().out.strip() == f"tiny-arith\t{shipped}"


def _in_band(pass_at_1: dict, mean: float, mastered: int = 2):
    assert set(pass_at_1) == set(FAMILIES)
    assert MEAN_BAND[0] <= mean <= MEAN_BAND[1], mean
    values = sorted(pass_at_1.values())
    assert sum(v >= MASTERED for v in values) >= mastered, pass_at_1
    assert sum(v < OUT_OF_REACH for v in values) >= 2, pass_at_1
    assert sum(FRONTIER[0] <= v <= FRONTIER[1] for v in values) >= 3, pass_at_1


def test_shipped_quality_is_partial_competence(shipped):
    quality = json.loads((shipped / "quality.json").read_text())
    _in_band(quality["pass_at_1"], quality["mean"])
    assert quality["temperature"] == 1.0
    assert quality["training"]["threads"] == 1


def test_measure_quality_runs_on_the_shipped_model(shipped):
    from trajval_ops.regime.pretrain import measure_quality

    quality = measure_quality(shipped, tasks_per_family=2, n=2)
    assert set(quality["pass_at_1"]) == set(FAMILIES)
    assert quality["pass_at_1"]["max"] >= 0.5


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_pretraining_script_reproduces_the_shipped_quality(shipped, tmp_path):
    shipped_quality = json.loads((shipped / "quality.json").read_text())
    out = tmp_path / "tiny-arith"
    subprocess.run([sys.executable, "-m", "trajval_ops.regime.pretrain", "--out", str(out)], cwd=REPO,
                   check=True, timeout=850)
    quality = json.loads((out / "quality.json").read_text())
    _in_band(quality["pass_at_1"], quality["mean"], mastered=REBUILD_MASTERED)
    assert abs(quality["mean"] - shipped_quality["mean"]) <= MEAN_TOLERANCE
    settings = {key: value for key, value in quality["training"].items() if key not in ("log", "train_seconds")}
    assert settings == {key: shipped_quality["training"][key] for key in settings}  # the shipped model's settings
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
