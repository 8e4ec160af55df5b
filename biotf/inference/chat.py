"""Chat templates: render a conversation with a tokenizer's Jinja chat template, as `transformers` does.

The same environment as `transformers.utils.chat_template_utils` (sandboxed, `trim_blocks`,
`lstrip_blocks`, loop controls; `tojson` without HTML escaping; `raise_exception`, `strftime_now`)
and the same variables (`messages`, `tools`, `documents`, `add_generation_prompt`, the special tokens
as `bos_token`, `eos_token`, ...), so the string equals `apply_chat_template(..., tokenize=False)`
without importing `transformers` (seconds at startup) or building its tokenizer object.

A template is code shipped with a checkpoint: whatever goes wrong in it is one line, never a traceback.
`raise_exception(message)` (how real templates reject a conversation, e.g. a role they do not support)
is an InputError with that message; a syntax error, a blocked unsafe operation (the sandbox's
SecurityError), any other Jinja error and running out of memory or recursion are CheckpointErrors.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any

from biotf.errors import CheckpointError, ConfigError, InputError
from biotf.tokenizers.base import Tokenizer


class TemplateRefusal(Exception):
    """Raised by the template's `raise_exception(message)`: the template rejects this conversation."""


@functools.lru_cache(maxsize=8)
def compile_template(template: str):
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        raise TemplateRefusal(message)

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
        raise ConfigError("chat", True, reason=f"the {tokenizer.scheme} tokenizer has no chat template "
                          "(tokenizer_config.json 'chat_template' or chat_template.jinja)")
    special = {f"{role}_token": token for role, token in getattr(tokenizer, "special_tokens", {}).items()}
    messages = [{key: value for key, value in message.items() if value is not None} for message in messages]
    import jinja2

    where = f"the chat template of the {tokenizer.scheme} tokenizer"
    try:
        return compile_template(template).render(messages=messages, tools=None, documents=None,
                                                 add_generation_prompt=add_generation_prompt, **{**special, **variables})
    except TemplateRefusal as refusal:
        raise InputError(f"{where} refuses this conversation: {_one_line(refusal)}") from None
    except jinja2.TemplateSyntaxError as error:
        raise CheckpointError(f"{where} has a syntax error at line {error.lineno}: {_one_line(error.message)}") from None
    except jinja2.exceptions.SecurityError as error:
        raise CheckpointError(f"{where} tried an operation the sandbox blocks: {_one_line(error)}") from None
    except jinja2.TemplateError as error:
        raise CheckpointError(f"{where} failed: {type(error).__name__}: {_one_line(error)}") from None
    except (MemoryError, RecursionError) as error:
        raise CheckpointError(f"{where} ran out of {'memory' if isinstance(error, MemoryError) else 'recursion depth'} "
                              "while rendering") from None


def _one_line(text: object) -> str:
    return " ".join(str(text).split()) or "(no message)"
