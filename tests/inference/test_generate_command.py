"""`biotf generate`: streaming, chat, prompt files, checkpoint defaults and one-line errors."""

from __future__ import annotations

import json
import re

import pytest

from biotf.api import Model
from biotf.cli import main
from biotf.inference.generation import Sampling, chat_prompt, generate_ids

HF_SOURCE = "Hugging Face directory (Qwen2, ESM)"


@pytest.fixture
def loaded(monkeypatch, tied):
    """Skip reloading the checkpoint for every command (loading has its own tests and one here)."""
    def load(source, device="cpu", dtype="float32", tokenizer_options=None, for_generation=False):
        return Model(tied.model, tied.tokenizer, str(source), HF_SOURCE, generation=tied.defaults)

    monkeypatch.setattr(Model, "load", load)
    return tied


def test_streams_the_greedy_text_of_the_checkpoint_defaults(tied_checkpoint, tied, capsys):
    model, tokenizer, defaults = tied
    assert main(["generate", "--model", str(tied_checkpoint), "--prompt", "The capital of France is",
                 "--max-new-tokens", "12"]) == 0
    out, err = capsys.readouterr()
    # defaults of generation_config.json: greedy with repetition penalty 1.1, stop at eos 151645 / 151643
    ids = generate_ids(model, [tokenizer.encode("The capital of France is")], max_new_tokens=12,
                       sampling=Sampling(repetition_penalty=1.1), eos_token_ids=defaults.eos_token_ids)[0]
    assert out == tokenizer.decode(ids) + "\n"
    assert "1 prompt(s)" in err and "greedy" in err


def test_chat_system_and_sampling_options(loaded, capsys):
    model, tokenizer, defaults = loaded
    args = ["generate", "--model", "x", "--prompt", "Hi", "--chat", "--system", "Be brief.", "--max-new-tokens", "6",
            "--temperature", "0.8", "--top-k", "30", "--top-p", "0.9", "--seed", "5"]
    assert main(args) == 0
    first = capsys.readouterr()
    assert main(args) == 0
    assert capsys.readouterr().out == first.out  # same seed, same text
    ids = generate_ids(model, [tokenizer.encode(chat_prompt(tokenizer, "Hi", "Be brief."), add_special_tokens=False)],
                       max_new_tokens=6, sampling=Sampling(0.8, 30, 0.9, 1.1),
                       eos_token_ids=defaults.eos_token_ids, pad_token_id=151643, seed=5)[0]
    assert first.out == tokenizer.decode(ids) + "\n"
    assert "sampling (temperature 0.8, top-k 30, top-p 0.9)" in first.err


def test_prompt_file_is_one_left_padded_batch_printed_as_json_lines(loaded, tmp_path, capsys):
    model, tokenizer, defaults = loaded
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Hello\n\nProteins fold because\nA\n")
    assert main(["generate", "--model", "x", "--prompt-file", str(prompts), "--max-new-tokens", "5",
                 "--temperature", "0", "--repetition-penalty", "1"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["prompt"] for line in lines] == ["Hello", "Proteins fold because", "A"]
    for line in lines:
        ids = generate_ids(model, [tokenizer.encode(line["prompt"])], max_new_tokens=5,
                           eos_token_ids=defaults.eos_token_ids)[0]
        assert line["completion"] == tokenizer.decode(ids)


@pytest.mark.parametrize("args, message", [
    (["--prompt", "word " * 200, "--max-new-tokens", "4"],
     "exceeds the model's maximum length of 128.*--truncate-prompt"),
    (["--prompt", "Hi", "--system", "S"], "needs --chat"),
    (["--prompt", "Hi", "--top-p", "0"], "--top-p=0.0"),
    (["--prompt", "Hi", "--temperature", "-1"], "--temperature=-1.0"),
    # Non-finite or absurd sampling values, named by their flag with the range (issue #39: temperature inf sampled
    # one repeated token while log_prob reported a uniform distribution).
    (["--prompt", "Hi", "--temperature", "inf"], r"invalid --temperature=inf \(allowed: 0 \(greedy\) or a number in "
                                                 r"\[0.001, 1000\]\)"),
    (["--prompt", "Hi", "--temperature", "nan"], "--temperature=nan"),
    (["--prompt", "Hi", "--temperature", "1e-9"], "--temperature=1e-09"),
    (["--prompt", "Hi", "--top-p", "nan"], r"--top-p=nan \(allowed: a number in \(0, 1\]\)"),
    (["--prompt", "Hi", "--top-p", "inf"], "--top-p=inf"),
    (["--prompt", "Hi", "--top-k", "-1"], "--top-k=-1"),
    (["--prompt", "Hi", "--repetition-penalty", "inf"], r"--repetition-penalty=inf \(allowed: a number in \[0.001, "),
    (["--prompt", "Hi", "--repetition-penalty", "nan"], "--repetition-penalty=nan"),
    (["--prompt", "Hi", "--repetition-penalty", "0"], "--repetition-penalty=0.0"),
    (["--prompt", "Hi", "--max-new-tokens", "0"], r"--max-new-tokens=0 \(allowed: an integer >= 1\)"),
    (["--prompt", "Hi", "--max-new-tokens", "-5"], "--max-new-tokens=-5"),
])
def test_errors_are_one_line_with_status_2(loaded, capsys, args, message):
    assert main(["generate", "--model", "x", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("biotf generate: error:")
    assert re.search(message, err)


def test_a_bad_sampling_value_of_the_checkpoint_names_it_and_the_flag_that_overrides_it(tied, monkeypatch, capsys):
    from dataclasses import replace

    model, tokenizer, defaults = tied
    edited = Model(model, tokenizer, "x", HF_SOURCE, generation=replace(defaults, top_p=float("nan")))
    # generation_config.json's "top_p": NaN
    monkeypatch.setattr(Model, "load", lambda source, **options: edited)
    assert main(["generate", "--model", "x", "--prompt", "Hi", "--max-new-tokens", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the generation settings of x set top_p=nan" in err and "--top-p" in err, err
    assert main(["generate", "--model", "x", "--prompt", "Hi", "--max-new-tokens", "2", "--top-p", "0.9"]) == 0


@pytest.mark.parametrize("template, message", [
    ("{% if messages %}{{ messages[0]['content'] }}", "has a syntax error at line 1: Unexpected end of template"),
    ("{% if messages[0]['role'] != 'system' %}{{ raise_exception('Conversations must start with a system "
     "message.') }}{% endif %}", "refuses this conversation: Conversations must start with a system message."),
    ("{{ messages.append(messages[0]) }}", "the sandbox blocks: access to attribute 'append'"),
    ("{{ messages[0]['content'] * 10 ** 18 }}", "ran out of memory"),
    ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "ran out of recursion depth"),
    ("{{ undefined_thing.name }}", "UndefinedError: 'undefined_thing' is undefined"),
], ids=["syntax", "raise_exception", "sandbox", "memory", "recursion", "undefined"])
def test_a_broken_or_refusing_chat_template_is_one_line(loaded, capsys, monkeypatch, template, message):
    _, tokenizer, _ = loaded
    monkeypatch.setattr(tokenizer, "chat_template", template)
    assert main(["generate", "--model", "x", "--prompt", "Hi", "--chat", "--max-new-tokens", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("biotf generate: error: the chat template of the byte-level BPE tokenizer"), err
    assert message in err, err


def test_truncate_prompt_warns_and_generates(loaded, capsys):
    assert main(["generate", "--model", "x", "--prompt", "word " * 200, "--max-new-tokens", "4",
                 "--truncate-prompt"]) == 0
    out, err = capsys.readouterr()
    assert out.endswith("\n")
    assert "biotf generate: warning: prompt 0 has 201 tokens: keeping its last 124" in err
    assert "1 prompt(s), 124 prompt tokens, 4 new tokens" in err


def test_another_architecture_is_refused_by_name(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    assert main(["generate", "--model", str(tmp_path), "--prompt", "Hi"]) == 2
    assert "model_type 'bert'" in capsys.readouterr().err


# A tiny random model of each causal family of #26, sized for the tokenizer written beside it.
CAUSAL_FAMILIES = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(n_embd=32, n_layer=2, n_head=4, n_positions=128)),
    "bloom": ("BloomConfig", "BloomForCausalLM", dict(hidden_size=48, n_layer=2, n_head=6)),
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                      num_attention_heads=4, num_key_value_heads=2,
                                                      max_position_embeddings=128)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                            num_attention_heads=4, num_key_value_heads=2,
                                                            max_position_embeddings=128, sliding_window=4)),
}


@pytest.mark.parametrize("kind", list(CAUSAL_FAMILIES))
def test_a_directory_of_each_causal_family_generates_the_text_of_transformers(kind, tmp_path, shared_data, capsys):
    """End to end on a directory as `save_pretrained` writes it, with the family's tokenizer files: a prompt file is
    one left-padded batch whose greedy completions are those of `transformers`' tokenizer + `generate` (eos
    included: a row stops where HF's does)."""
    transformers = pytest.importorskip("transformers")
    import torch
    from hf_tokenizer_dirs import write_tokenizer

    texts = (shared_data / "text/tinyshakespeare_input.txt").read_text(encoding="utf-8").split("\n\n")[:200]
    write_tokenizer(kind, tmp_path, texts)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    config_class, model_class, settings = CAUSAL_FAMILIES[kind]
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(
        vocab_size=len(tokenizer), initializer_range=0.5, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **settings)
    hf = getattr(transformers, model_class)._from_config(config).eval()
    hf.save_pretrained(tmp_path)  # its config.json replaces the tokenizer's stub
    prompts = ["To be, or not to be", "My lord, the king is come to Westminster", "Romeo"]
    (tmp_path / "prompts.txt").write_text("\n".join(prompts) + "\n")
    assert main(["generate", "--model", str(tmp_path), "--prompt-file", str(tmp_path / "prompts.txt"),
                 "--max-new-tokens", "8", "--temperature", "0"]) == 0
    completions = [json.loads(line)["completion"] for line in capsys.readouterr().out.splitlines()]

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    tokenizer.padding_side, tokenizer.pad_token_id = "left", pad
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        ids = hf.generate(**batch, max_new_tokens=8, do_sample=False, pad_token_id=pad,
                          eos_token_id=tokenizer.eos_token_id)[:, batch["input_ids"].shape[1]:]
    assert completions == [tokenizer.decode(row, skip_special_tokens=True) for row in ids]
    assert any(completions)


@pytest.mark.parametrize("mode", ["fixed", "measure"])
def test_verbose_says_which_decoding_plan_this_machine_takes(loaded, capsys, monkeypatch, mode):
    monkeypatch.setenv("BIOTF_DECODE_PLAN", mode)
    assert main(["generate", "--model", "x", "--prompt", "Hi", "--max-new-tokens", "2", "--verbose"]) == 0
    line = capsys.readouterr().err.splitlines()[0]
    assert line.startswith("decoding plan (float32, ") and "matrices " in line
    assert ("; fixed)" in line) is (mode == "fixed") and ("us]" in line) is (mode == "measure")
