"""Stable task identity: the task-id field and the prompt-content hash every pool tool shares.

The hash is what deduplication and prior transfer match on, so it is defined once, here:
SHA-256 of the prompt's messages as ``[[role, content.strip()], ...]`` in compact JSON, first
32 hex digits. A plain-string prompt hashes as one user message, so the same question stored as
a string (OpenRLHF, GSM8K) or as a chat list (verl) gets the same hash; a message without a role,
or with a null one (parquet stores a role some rows lack as null), is a user message too.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

#: Top-level field holding the stable task id of every row written by the pool tools.
TASK_ID = "task_id"
#: Top-level field holding the prompt-content hash (see :func:`prompt_hash`).
PROMPT_HASH = "trajval_prompt_hash"

HASH_HEX_DIGITS = 32


def chat_from_text(text: str) -> list | None:
    """The messages a prompt string holds when it is the JSON of a non-empty list of message
    objects (a chat list stored as text), else None (the string is a prompt's text). One rule for
    the prompt's identity and for what a pass renders.

    A message object holds a ``"role"`` or a ``"content"`` key (its values are checked by the
    reader: a chat-like item without string content is an error, not text); an array of other
    objects (``[{"name": "Ann", "age": 3}]``, data a question quotes) is text.
    """
    stripped = text.strip()
    if not stripped.startswith("["):
        return None
    try:
        decoded = json.loads(stripped)
    except ValueError:
        return None
    if not isinstance(decoded, list) or not decoded:
        return None
    # "content" alone counts too: such strings were decoded (role user) before, and keep their hash
    return decoded if all(isinstance(m, dict) and ("role" in m or "content" in m) for m in decoded) else None


def prompt_messages(prompt: Any) -> list[list[str]]:
    """Normalise a prompt (string, chat list, or JSON string of a chat list) to [[role, content]].

    A string is decoded as a chat list only when it is the JSON of a non-empty list of message
    objects (:func:`chat_from_text`); any other string, a JSON array of numbers (``"[3, 1, 2]"``)
    or of other objects included, is the text of one user message.

    :raises ValueError: when the value is not a prompt (None, empty, a message without content).
    """
    if isinstance(prompt, str):
        decoded = chat_from_text(prompt)
        if decoded is not None:
            return prompt_messages(decoded)
        stripped = prompt.strip()
        if not stripped:
            raise ValueError("prompt is an empty string")
        return [["user", stripped]]
    if isinstance(prompt, (list, tuple)) and prompt:
        messages = []
        for message in prompt:
            if not isinstance(message, dict) or not isinstance(message.get("content"), str):
                raise ValueError(f"chat message {message!r} has no string 'content'")
            messages.append([str(message.get("role") or "user"), message["content"].strip()])
        return messages
    raise ValueError(f"prompt must be a string or a non-empty chat list, got {type(prompt).__name__} {prompt!r}")


def prompt_hash(prompt: Any) -> str:
    """Content hash of a prompt (see the module docstring for the exact definition)."""
    canonical = json.dumps(prompt_messages(prompt), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:HASH_HEX_DIGITS]
