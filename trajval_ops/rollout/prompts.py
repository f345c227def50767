"""Chat messages for a row: the paper's prompt templates, or the row's own chat list.

Templates (appendix of the TrajVal paper):

- ``math``: system "Please reason step by step, and put your final answer within \\boxed{}.",
  user = the task text.
- ``logic_arc``, ``logic_ordering``, ``logic_graph``: the paper writes each as one instruction
  with the task embedded (``{User_Prompt}``); we send that filled text as the user turn. The
  ordering template also names the category of the items (row key ``category`` by default).
- ``chat``: the row's prompt already is a list of ``{"role", "content"}`` messages (verl / DAPO /
  GURU format): passed through unchanged.
- ``auto``: ``chat`` when the prompt is a message list, else ``math``.
- ``dapo_math``: the paper's ``math`` template on the problem of a DAPO-Math-17k row: the user
  turn's text with DAPO's own instruction wrapper ("Solve the following math problem step by
  step. The last line of your response should be of the form Answer: $Answer ..." /
  "Remember to put your answer on its own line after "Answer:".") removed. DAPO's wrapper asks
  for an ``Answer:`` line, which the ``math`` verifier (``\boxed{}``) does not read; the paper
  used the ``\boxed{}`` instruction. A prompt without the wrapper is used as the problem as is.
- ``pool``: the prompt the main run trains on: the row's own chat list, as verl's ``RLHFDataset``
  reads ``prompt``, passed through unchanged and rendered as verl renders it (below). A DAPO-Math-17k
  row keeps DAPO's "Answer:" wrapper, which the ``dapo`` verifier reads.

The model's own chat template is applied by :func:`render_prompt`: for the paper's templates with
thinking mode off; for ``pool`` as verl applies it (``apply_chat_template(messages,
add_generation_prompt=True, tokenize=False, **data.apply_chat_template_kwargs)``), with the
pass's ``chat_template_kwargs`` as those keyword arguments and nothing else.
"""

from __future__ import annotations

from typing import Any

from trajval_ops.errors import TrajvalInputError
from trajval_ops.rows import get_path

DEFAULT_PROMPT_KEY = "prompt"
DEFAULT_GROUND_TRUTH_KEY = "reward_model.ground_truth"
DEFAULT_CATEGORY_KEY = "category"

MATH_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."

LOGIC_ARC_PROMPT = (
    "You are a world-class puzzle solver with exceptional pattern recognition skills. Your task "
    "is to analyze puzzles, spot patterns, and provide direct solutions. Given input-output grid "
    "pairs as reference examples, carefully observe the patterns to predict the output grid for "
    "new test input. Each pair follows the same transformation rule. Grids are 2D arrays. Here "
    "are the input and output grids for the reference examples: {task}. What is the output "
    "grid? Please put your answer within <answer> and </answer> tags, your final answer should "
    "be only the output grid (2d array)."
)
LOGIC_ORDERING_PROMPT = (
    "Solve the following puzzle to determine the order of the {category} from left to right. "
    "{task}. Please put your answer within <answer> and </answer> tags, for example <answer> "
    "['pigeon', 'sparrow', 'quail'] </answer>."
)
LOGIC_GRAPH_PROMPT = (
    "Given the following list of predicates: {task}. Respond with only the trait of the next "
    "step. Please put your answer within <answer> and </answer> tags, for example <answer> "
    "fdebme </answer>."
)

DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem."
)
DAPO_SUFFIX = 'Remember to put your answer on its own line after "Answer:".'

TEMPLATES = ("auto", "chat", "math", "dapo_math", "logic_arc", "logic_ordering", "logic_graph", "pool")
#: The template that renders a row as the main run's trainer does (verl's chat template call).
POOL_TEMPLATE = "pool"


def dapo_problem(text: str) -> str:
    """The problem inside DAPO-Math-17k's instruction wrapper (the text itself when unwrapped)."""
    text = text.strip()
    if text.startswith(DAPO_PREFIX):
        text = text[len(DAPO_PREFIX):]
    if text.endswith(DAPO_SUFFIX):
        text = text[:-len(DAPO_SUFFIX)]
    return text.strip()


def build_messages(
    row: dict,
    template: str = "auto",
    prompt_key: str = DEFAULT_PROMPT_KEY,
    category_key: str = DEFAULT_CATEGORY_KEY,
) -> list[dict]:
    """Chat messages for one row.

    :param row: the data row; the prompt is read from ``prompt_key`` (dotted paths allowed).
    :param template: one of :data:`TEMPLATES`.
    :param category_key: (logic_ordering) the field naming what is being ordered.
    :raises TrajvalInputError: missing prompt, or a prompt of the wrong shape for the template.
    :raises ValueError: unknown template.
    """
    if template not in TEMPLATES:
        raise ValueError(f"unknown prompt template {template!r}; choose one of {TEMPLATES}")
    prompt = get_path(row, prompt_key, None)
    if prompt is None:
        raise TrajvalInputError(f"field '{prompt_key}' (the prompt) is missing")
    messages = _as_messages(prompt, prompt_key)
    if template == "dapo_math":
        if messages is not None:
            users = [m["content"] for m in messages if m.get("role") == "user"]
            if len(users) != 1 or not isinstance(users[0], str):
                raise TrajvalInputError(f"field '{prompt_key}': template 'dapo_math' needs exactly one user turn "
                                        f"with text, got {len(users)}")
            prompt = users[0]
        if not isinstance(prompt, str) or not dapo_problem(prompt):
            raise TrajvalInputError(f"field '{prompt_key}' holds no problem text for template 'dapo_math'")
        return [{"role": "system", "content": MATH_SYSTEM_PROMPT}, {"role": "user", "content": dapo_problem(prompt)}]
    if template == "auto":
        template = "chat" if messages is not None else "math"
    if template in ("chat", POOL_TEMPLATE):
        if messages is None:
            raise TrajvalInputError(
                f"field '{prompt_key}' must be a list of chat messages for template {template!r} (verl's RLHFDataset "
                f"reads a chat list too), got {type(prompt).__name__}; a text prompt needs a template that writes the "
                "instruction (math, logic_arc, ...)"
            )
        return messages
    if messages is not None:
        raise TrajvalInputError(
            f"field '{prompt_key}' is a chat message list; template {template!r} needs the task "
            f"text (use template 'chat' or 'auto')"
        )
    if not isinstance(prompt, str) or not prompt.strip():
        raise TrajvalInputError(f"field '{prompt_key}' must be non-empty text, got {prompt!r}")
    if template == "math":
        return [{"role": "system", "content": MATH_SYSTEM_PROMPT}, {"role": "user", "content": prompt}]
    if template == "logic_arc":
        return [{"role": "user", "content": LOGIC_ARC_PROMPT.format(task=prompt)}]
    if template == "logic_graph":
        return [{"role": "user", "content": LOGIC_GRAPH_PROMPT.format(task=prompt)}]
    category = get_path(row, category_key, None)
    if not isinstance(category, str) or not category.strip():
        raise TrajvalInputError(f"field '{category_key}' (what logic_ordering orders) is missing or empty")
    return [{"role": "user", "content": LOGIC_ORDERING_PROMPT.format(task=prompt, category=category)}]


def _as_messages(prompt: Any, prompt_key: str) -> list[dict] | None:
    """The prompt as a message list when it is one (also as a JSON string), else None."""
    if isinstance(prompt, str):
        from trajval_ops.pools.identity import chat_from_text

        prompt = chat_from_text(prompt)  # the rule the prompt's identity reads it by
    if not isinstance(prompt, (list, tuple)) or not prompt:
        return None
    if not all(isinstance(m, dict) for m in prompt):
        return None
    for position, message in enumerate(prompt):
        if not isinstance(message.get("role"), str) or not isinstance(message.get("content"), str):
            raise TrajvalInputError(
                f"field '{prompt_key}' message {position} needs string 'role' and 'content', got {message!r}"
            )
    return [{"role": m["role"], "content": m["content"]} for m in prompt]


def render_prompt(tokenizer, messages: list[dict], chat_template_kwargs: dict | None = None) -> str:
    """The prompt text for generation, by the tokenizer's chat template.

    :param chat_template_kwargs: None: the paper's templates' rendering, thinking mode off; a
        mapping (template ``pool``): verl's rendering, these keyword arguments and no others
        (verl's ``data.apply_chat_template_kwargs``; ``{}`` is verl's default, under which a
        model whose template thinks by default, Qwen3's, thinks).
    """
    if chat_template_kwargs is None:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                             enable_thinking=False)
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **chat_template_kwargs)


def fit_prompt(tokenizer, prompt: str, max_context: int, max_new_tokens: int, policy: str) -> tuple[str, int | None]:
    """A rendered prompt within ``max_context - max_new_tokens`` tokens.

    :param policy: ``error`` or ``truncate_left`` (keep the prompt's last tokens).
    :return: ``(prompt, None)`` when it fits, ``(cut prompt, original token count)`` when it was
        cut.
    :raises OverflowError: with policy ``error`` (or no room at all), giving the token counts;
        callers name the row.
    """
    limit = max_context - max_new_tokens
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    if len(ids) <= limit:
        return prompt, None
    if policy != "truncate_left" or limit <= 0:
        raise OverflowError(
            f"the rendered prompt has {len(ids)} tokens, more than the model's context of {max_context} minus "
            f"the {max_new_tokens} new tokens; shorten or remove the row, or set overlong_prompt: truncate_left"
        )
    return tokenizer.decode(ids[-limit:]), len(ids)
