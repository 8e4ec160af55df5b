"""Chat templates: render a conversation with a tokenizer's Jinja chat template, as `transformers` does.

The same environment as `transformers.utils.chat_template_utils` (sandboxed, `trim_blocks`,
`lstrip_blocks`, loop controls; `tojson` without HTML escaping; `raise_exception`, `strftime_now`)
and the same variables (`messages`, `tools`, `documents`, `add_generation_prompt`, the special tokens
as `bos_token`, `eos_token`, ...), so the string equals `apply_chat_template(..., tokenize=False)`
without importing `transformers` (seconds at startup) or building its tokenizer object.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any

from biotf.errors import ConfigError
from biotf.tokenizers.base import Tokenizer


@functools.lru_cache(maxsize=8)
def compile_template(template: str):
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None,
               sort_keys: bool = False) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=["jinja2.ext.loopcontrols"])
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = lambda format: datetime.now().strftime(format)
    return environment.from_string(template)


def render_chat(tokenizer: Tokenizer, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                **variables: Any) -> str:
    """The tokenizer's chat template applied to `messages` (dicts with "role" and "content")."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        raise ConfigError("chat", True, reason=f"the {tokenizer.kind} tokenizer has no chat template "
                          "(tokenizer_config.json 'chat_template' or chat_template.jinja)")
    special = {f"{role}_token": token for role, token in getattr(tokenizer, "special_tokens", {}).items()}
    messages = [{key: value for key, value in message.items() if value is not None} for message in messages]
    return compile_template(template).render(messages=messages, tools=None, documents=None,
                                             add_generation_prompt=add_generation_prompt, **{**special, **variables})
