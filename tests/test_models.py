"""Short model references: the tiny random Llama, the embedded SmolLM2, clear errors."""

import os

import pytest

from trajval_ops import models
from trajval_ops.cli import prepare_model


def _private_cache(tmp_path_factory, share_smollm2: bool):
    path = tmp_path_factory.mktemp("trajval_cache")
    shared = models.model_dir(models.SMOLLM2)
    if share_smollm2 and (shared / "tokenizer.json").is_file():
        # the tokenizer loads in 1 s from a built folder, 20 s from the GGUF
        (path / "models").mkdir()
        (path / "models" / models.SMOLLM2).symlink_to(shared)
    old = os.environ.get("TRAJVAL_CACHE")
    os.environ["TRAJVAL_CACHE"] = str(path)
    yield path
    if old is None:
        del os.environ["TRAJVAL_CACHE"]
    else:
        os.environ["TRAJVAL_CACHE"] = old


@pytest.fixture(scope="module")
def fresh_cache(tmp_path_factory):
    """A private TRAJVAL_CACHE so the build path (not the shared cache) is exercised."""
    yield from _private_cache(tmp_path_factory, share_smollm2=True)


@pytest.fixture()
def empty_cache(tmp_path_factory):
    yield from _private_cache(tmp_path_factory, share_smollm2=False)


def test_existing_directory_is_returned_as_is(tmp_path):
    assert models.resolve_model(str(tmp_path)) == tmp_path


def test_unknown_reference_names_the_known_ones():
    with pytest.raises(FileNotFoundError) as err:
        models.resolve_model("no-such-model-xyz")
    message = str(err.value)
    assert "no-such-model-xyz" in message
    assert "smollm2-135m-instruct" in message and "tiny-random-llama" in message


def test_tiny_random_llama_builds_atomically_and_is_seeded(fresh_cache):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = models.resolve_model("tiny-random-llama")
    assert path == fresh_cache / "models" / "tiny-random-llama"
    assert not [p for p in path.parent.iterdir() if ".tmp-" in p.name]  # no leftovers
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 2
    tokenizer = AutoTokenizer.from_pretrained(path)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                         add_generation_prompt=True)
    assert "<|im_start|>assistant" in text  # SmolLM2's ChatML template
    assert models.resolve_model("tiny-random-llama") == path  # reused, not rebuilt

    # seeded: an independent rebuild gives identical weights
    rebuilt = fresh_cache / "rebuilt"
    rebuilt.mkdir()
    models._build_tiny_random_llama(rebuilt)
    again = AutoModelForCausalLM.from_pretrained(rebuilt)
    for (name, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert (a == b).all(), name


def test_prepare_cli_rejects_unknown_reference(capsys):
    with pytest.raises(SystemExit) as exit_info:
        prepare_model.main(["bogus-model"])
    assert exit_info.value.code == 2
    assert "bogus-model" in capsys.readouterr().err


@pytest.mark.slow
def test_embedded_smollm2_converts_and_loads(empty_cache):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = models.resolve_model("smollm2-135m-instruct")
    model = AutoModelForCausalLM.from_pretrained(path)
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(134.5e6, rel=0.01)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert tokenizer.eos_token == "<|im_end|>"
    ids = tokenizer("The capital of France is", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=5, do_sample=False)
    assert "Paris" in tokenizer.decode(out[0][ids["input_ids"].shape[1]:])
