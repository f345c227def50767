"""Prompt templates of the paper and chat-list pass-through."""

import json

import pytest

from trajval_ops.rollout.prompts import MATH_SYSTEM_PROMPT, build_messages, render_prompt
from trajval_ops.errors import TrajvalInputError


def test_math_template_uses_the_paper_system_prompt():
    messages = build_messages({"prompt": "What is 2+3?"}, "math")
    assert messages == [{"role": "system", "content": MATH_SYSTEM_PROMPT},
                        {"role": "user", "content": "What is 2+3?"}]
    assert "\\boxed{}" in MATH_SYSTEM_PROMPT


def test_auto_passes_chat_lists_through_and_defaults_to_math():
    chat = [{"role": "user", "content": "Solve x+1=2. Answer: $Answer"}]
    assert build_messages({"prompt": chat}) == chat
    assert build_messages({"prompt": json.dumps(chat)}) == chat  # JSON-string column
    assert build_messages({"prompt": "1+1?"})[0]["content"] == MATH_SYSTEM_PROMPT


def test_a_json_string_chat_is_read_by_the_rule_its_identity_is():
    """The prompt's identity decoded a JSON-string chat with a space after '[' and the pass did
    not (it rendered the JSON text under the math template): one rule now, in both."""
    from trajval_ops.pools.identity import prompt_messages

    text = '[ {"role": "user", "content": "What is 2+2?"} ]'
    assert prompt_messages(text) == [["user", "What is 2+2?"]]
    assert build_messages({"prompt": text}) == [{"role": "user", "content": "What is 2+2?"}]
    for plain in ("[3, 1, 2]", "[]", "[not json"):  # text, in both
        assert prompt_messages(plain) == [["user", plain]]
        assert build_messages({"prompt": plain})[-1]["content"].endswith(plain)


def test_a_json_array_of_objects_that_are_no_messages_is_text_in_identity_and_rendering():
    """docs/pools.md: only an array of message objects decodes as a chat; before, an array of
    plain objects (data a question quotes) was decoded and refused for its missing 'content'."""
    from trajval_ops.pools.identity import prompt_hash, prompt_messages

    for text in ('[{"name": "Ann", "age": 3}, {"name": "Bo", "age": 5}]', '[{"content": "q"}, {"name": "x"}]'):
        assert prompt_messages(text) == [["user", text]]
        assert prompt_hash(text) == prompt_hash([{"role": "user", "content": text}])
        assert build_messages({"prompt": text}) == [{"role": "system", "content": MATH_SYSTEM_PROMPT},
                                                    {"role": "user", "content": text}]
    with pytest.raises(TrajvalInputError, match="list of chat messages"):
        build_messages({"prompt": text}, "chat")
    # a chat-like array (a role, or content) with a broken message is refused by both, not taken as text
    for broken in ('[{"role": "user"}]', '[{"role": "user", "content": 3}]', '[{"content": null}]'):
        with pytest.raises(ValueError):
            prompt_messages(broken)
        with pytest.raises(TrajvalInputError, match="message"):
            build_messages({"prompt": broken})


def test_logic_templates_embed_task_and_category():
    arc = build_messages({"question": "[[1]] -> [[2]]"}, "logic_arc", prompt_key="question")
    assert len(arc) == 1 and "[[1]] -> [[2]]" in arc[0]["content"] and "<answer>" in arc[0]["content"]
    order = build_messages({"prompt": "The owl is left of the hawk", "category": "birds"}, "logic_ordering")
    assert "order of the birds from left to right. The owl is left of the hawk." in order[0]["content"]
    graph = build_messages({"prompt": "p(a,b)"}, "logic_graph")
    assert graph[0]["content"].startswith("Given the following list of predicates: p(a,b).")


def test_dotted_prompt_key():
    row = {"extra": json.dumps({"q": "2*2?"})}
    assert build_messages(row, "math", prompt_key="extra.q")[1]["content"] == "2*2?"


@pytest.mark.parametrize("row, template, fragment", [
    ({}, "math", "'prompt'"),
    ({"prompt": ""}, "math", "non-empty"),
    ({"prompt": "text"}, "chat", "list of chat messages"),
    ({"prompt": [{"role": "user", "content": "x"}]}, "math", "chat message list"),
    ({"prompt": [{"role": "user"}]}, "chat", "message 0"),
    ({"prompt": "a < b"}, "logic_ordering", "'category'"),
])
def test_bad_prompts_name_the_field(row, template, fragment):
    with pytest.raises(TrajvalInputError, match=fragment):
        build_messages(row, template)


def test_unknown_template():
    with pytest.raises(ValueError, match="unknown prompt template"):
        build_messages({"prompt": "x"}, "poetry")


def test_render_prompt_applies_chat_template_with_generation_prompt(tiny_tokenizer):
    text = render_prompt(tiny_tokenizer, build_messages({"prompt": "2+2?"}, "math"))
    assert text.endswith("<|im_start|>assistant\n")
    assert "2+2?" in text and "boxed" in text


@pytest.fixture(scope="module")
def tiny_tokenizer():
    from transformers import AutoTokenizer

    from trajval_ops.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("tiny-random-llama"))


DAPO_ROW = {
    "data_source": "math_dapo",
    "prompt": [{"role": "user", "content": (
        "Solve the following math problem step by step. The last line of your response should be of the form "
        "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
        "What is $4^3$?\n\nRemember to put your answer on its own line after \"Answer:\".")}],
    "ability": "MATH",
    "reward_model": {"ground_truth": "64", "style": "rule-lighteval/MATH_v2"},
    "extra_info": {"index": "0d5e6f0a-0000-4000-8000-000000000001"},
}


def test_dapo_row_gets_the_papers_math_prompt_and_the_verifier_agrees():
    from trajval_ops.rollout.prompts import MATH_SYSTEM_PROMPT, build_messages
    from trajval_ops.rollout.verifiers import build_verifier

    messages = build_messages(DAPO_ROW, template="dapo_math")
    assert messages == [{"role": "system", "content": MATH_SYSTEM_PROMPT},
                        {"role": "user", "content": "What is $4^3$?"}]
    assert "boxed" in messages[0]["content"] and "Answer:" not in messages[1]["content"]
    verifier = build_verifier("math")  # the recipe's verifier: \boxed{} only, no fallback
    try:
        truth = DAPO_ROW["reward_model"]["ground_truth"]
        assert verifier("4^3 = 64, so the answer is \\boxed{64}", truth, DAPO_ROW) == 1.0
        assert verifier("Answer: 64", truth, DAPO_ROW) == 0.0  # what DAPO's own wrapper asks for
    finally:
        verifier.close()
    # a plain problem (no wrapper) is used as is; the recipe's probe uses the same template
    assert build_messages({"prompt": "What is 2+2?"}, template="dapo_math")[1]["content"] == "What is 2+2?"


# --------------------------------------------------------------------------- template pool: the main run's prompt

THINKING_TEMPLATE = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}"
                     "{% if add_generation_prompt %}<assistant>{% if enable_thinking is not defined or enable_thinking %}"
                     "<think>{% endif %}{% endif %}")


def test_pool_keeps_the_rows_own_chat_list():
    assert build_messages(DAPO_ROW, "pool") == DAPO_ROW["prompt"]  # DAPO's Answer: wrapper stays
    with pytest.raises(TrajvalInputError, match="list of chat messages for template 'pool'"):
        build_messages({"prompt": "What is 2+2?"}, "pool")


def test_pool_renders_as_verl_renders(tiny_tokenizer):
    """verl's RLHFDataset / agent loop: ``apply_chat_template(messages, add_generation_prompt=True,
    tokenize=False, **data.apply_chat_template_kwargs)``; the paper's templates turn thinking off."""
    import copy

    tokenizer = copy.deepcopy(tiny_tokenizer)
    tokenizer.chat_template = THINKING_TEMPLATE
    messages = build_messages(DAPO_ROW, "pool")
    as_verl_default = render_prompt(tokenizer, messages, {})
    assert as_verl_default == tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert as_verl_default.endswith("<assistant><think>")  # verl's default thinks where the template does
    assert render_prompt(tokenizer, messages, {"enable_thinking": False}).endswith("<assistant>")
    assert render_prompt(tokenizer, messages).endswith("<assistant>")  # the paper's rendering
    chat_template = pytest.importorskip("verl.utils.chat_template", reason="verl is not installed")
    for kwargs in ({}, {"enable_thinking": False}):
        for tok in (tokenizer, tiny_tokenizer):
            assert render_prompt(tok, messages, kwargs) == chat_template.apply_chat_template(
                tok, messages, tokenize=False, add_generation_prompt=True, **kwargs)


def test_chat_template_kwargs_go_with_the_pool_template_only():
    from trajval_ops.rollout.pass_rates import PromptSettings

    settings = PromptSettings("pool", chat_template_kwargs={"enable_thinking": False})
    assert settings.render_kwargs() == {"enable_thinking": False}
    assert settings.as_dict()["chat_template_kwargs"] == {"enable_thinking": False}
    assert PromptSettings("pool").render_kwargs() == {}
    assert PromptSettings("auto").render_kwargs() is None
    assert "chat_template_kwargs" not in PromptSettings("auto").as_dict()  # caches of the other templates keep their key
    with pytest.raises(ValueError, match="goes with template: pool"):
        PromptSettings("chat", chat_template_kwargs={"enable_thinking": False})
    with pytest.raises(ValueError, match="set by the rendering itself"):
        PromptSettings("pool", chat_template_kwargs={"tokenize": True})
    with pytest.raises(ValueError, match="chat_template_kwargs must be"):
        PromptSettings("pool", chat_template_kwargs="enable_thinking=False")


def test_the_probe_renders_the_pool_template_as_the_passes_do(tiny_tokenizer):
    """The probe trains on the prompt its endpoint passes measure: the same rendering, thinking
    switch included; its config refuses chat_template_kwargs without the pool template."""
    import copy

    from trajval_ops.probe.config import ProbeConfig
    from trajval_ops.probe.run import probe_examples, training_dataset

    tokenizer = copy.deepcopy(tiny_tokenizer)
    tokenizer.chat_template = THINKING_TEMPLATE
    for kwargs, ending in ((None, "<think>"), ({"enable_thinking": False}, "<assistant>")):
        config = ProbeConfig(prompt_template="pool", chat_template_kwargs=kwargs, verifier="dapo")
        dataset = training_dataset(probe_examples([DAPO_ROW], config), tokenizer, config, max_context=4096)
        assert dataset[0]["prompt"].endswith(ending) and "Answer: $Answer" in dataset[0]["prompt"]
    with pytest.raises(ValueError, match="goes with template: pool"):
        ProbeConfig(prompt_template="dapo_math", chat_template_kwargs={"enable_thinking": False})
