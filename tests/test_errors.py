"""ConfigError words a command-line flag as the user typed it, and a config key as before."""

from __future__ import annotations

import pytest

from biotf.errors import ConfigError


@pytest.mark.parametrize("arguments, message", [
    (("model.pos", "foo", "learned | rope"), "invalid config model.pos='foo' (allowed: learned | rope)"),
    (("seed", None, "an integer"), "invalid config seed=None (allowed: an integer)"),
    (("--limit", -1, "an integer >= 0"), "invalid --limit=-1 (allowed: an integer >= 0)"),
    (("--both-strands", True, None, "it needs --variants"), "invalid --both-strands: it needs --variants"),
    (("--input or --variants", None, "exactly one of them"), "--input or --variants is required (allowed: exactly "
                                                             "one of them)"),
])
def test_flags_and_config_keys_are_worded_apart(arguments, message):
    assert str(ConfigError(*arguments)) == message


def test_a_missing_flag_says_which_flag_needs_it():
    error = ConfigError("--reference", None, "a sequence", "the variants are scored against it",
                        required_with="--variants")
    assert str(error) == ("--reference is required with --variants: the variants are scored against it "
                          "(allowed: a sequence)")
    assert (error.key, error.value) == ("--reference", None)
