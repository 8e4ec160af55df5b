"""Generation checked against transformers' generate on tiny random Qwen2 checkpoints with the real Qwen tokenizer."""

from __future__ import annotations

import logging

import pytest
import torch

from biotf.errors import ConfigError, InputError
from biotf.inference import generate
from biotf.inference.chat import render_chat
from biotf.inference.generation import Sampling, TextStreamer, chat_prompt, generate_ids, next_token_scores

transformers = pytest.importorskip("transformers")

PROMPTS = ["The capital of France is", "Hello", "Proteins fold into three-dimensional structures because"]


@pytest.fixture(scope="module", params=["tied", "untied"])
def pair(request, tied_checkpoint, untied_checkpoint, tied, untied):
    """(directory, biotf checkpoint, transformers model) of the same weights."""
    directory = tied_checkpoint if request.param == "tied" else untied_checkpoint
    hf = transformers.AutoModelForCausalLM.from_pretrained(directory, attn_implementation="sdpa").eval()
    return directory, tied if request.param == "tied" else untied, hf


def hf_greedy(hf, ids: list[int], new_tokens: int, **options) -> list[int]:
    input_ids = torch.tensor([ids])
    with torch.no_grad():
        out = hf.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                          max_new_tokens=new_tokens, **options)
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("penalty", [1.0, None], ids=["plain", "checkpoint-defaults"])
def test_greedy_32_tokens_equal_transformers_generate(pair, penalty):
    """None: both sides use generation_config.json as it is (repetition_penalty 1.1, eos [151645, 151643])."""
    directory, (model, tokenizer, defaults), hf = pair
    ours_penalty = defaults.repetition_penalty if penalty is None else penalty
    theirs = {} if penalty is None else {"repetition_penalty": penalty}
    assert model.config.tie_embeddings is (hf.config.tie_word_embeddings is True)
    for prompt in PROMPTS:
        ids = tokenizer.encode(prompt)
        ours = generate_ids(model, [ids], max_new_tokens=32, sampling=Sampling(repetition_penalty=ours_penalty),
                            eos_token_ids=defaults.eos_token_ids, pad_token_id=defaults.pad_token_id)[0]
        assert ours == hf_greedy(hf, ids, 32, **theirs), prompt
        assert len(ours) == 32  # random weights: no eos within 32 tokens, so all 32 positions are compared


def test_batched_left_padded_greedy_equals_one_by_one(pair):
    _, (model, tokenizer, defaults), _ = pair
    ids = [tokenizer.encode(p) for p in PROMPTS]
    assert len({len(i) for i in ids}) == len(ids)  # really padded
    batched = generate_ids(model, ids, max_new_tokens=32, pad_token_id=defaults.pad_token_id)
    assert batched == [generate_ids(model, [one], max_new_tokens=32)[0] for one in ids]


def test_text_api_decodes_the_greedy_ids(tied):
    model, tokenizer, _ = tied
    texts = generate(model, tokenizer, PROMPTS[:2], max_new_tokens=8)
    ids = generate_ids(model, [tokenizer.encode(p) for p in PROMPTS[:2]], max_new_tokens=8,
                       eos_token_ids=[tokenizer.eos_id])
    assert texts == [tokenizer.decode(row) for row in ids]
    assert generate(model, tokenizer, PROMPTS[0], max_new_tokens=8) == texts[:1]  # one string is one prompt


def test_seeded_sampling_is_reproducible(tied):
    model, tokenizer, _ = tied
    options = dict(max_new_tokens=8, temperature=0.9, top_k=50, top_p=0.95)
    first = generate(model, tokenizer, PROMPTS, seed=7, **options)
    assert generate(model, tokenizer, PROMPTS, seed=7, **options) == first
    assert generate(model, tokenizer, PROMPTS, seed=8, **options) != first
    greedy = generate(model, tokenizer, PROMPTS, max_new_tokens=8)
    assert generate(model, tokenizer, PROMPTS, seed=3, max_new_tokens=8, temperature=1.5, top_k=1) == greedy


def test_generation_stops_at_any_eos_and_keeps_it_in_the_ids(tied):
    model, tokenizer, _ = tied
    ids = [tokenizer.encode(p) for p in PROMPTS[:2]]
    free = generate_ids(model, ids, max_new_tokens=12)
    stop = [free[0][3], 151645]  # the 4th token of row 0 acts as an eos; row 1 runs on (unless it meets one)
    stopped = generate_ids(model, ids, max_new_tokens=12, eos_token_ids=stop)
    assert stopped[0] == free[0][:4]
    cut = next((i + 1 for i, t in enumerate(free[1]) if t in stop), 12)
    assert stopped[1] == free[1][:cut]


def test_prefill_once_then_one_token_per_step_through_the_kv_cache(tied, monkeypatch):
    model, tokenizer, _ = tied
    calls = []
    block_inputs = model.block_inputs

    def spy(input_ids, attention_mask=None, past_key_values=None, use_cache=False):
        calls.append((input_ids.shape[1], past_key_values.seq_len))
        return block_inputs(input_ids, attention_mask, past_key_values, use_cache)

    monkeypatch.setattr(model, "block_inputs", spy)
    ids = tokenizer.encode(PROMPTS[0])
    generate_ids(model, [ids], max_new_tokens=5)
    assert calls == [(len(ids), 0)] + [(1, len(ids) + i) for i in range(4)]


def test_scores_match_transformers_logits_processors():
    from transformers.generation.logits_process import (RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper,
                                                        TopKLogitsWarper, TopPLogitsWarper)

    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 500, generator=generator) * 3
    tokens = torch.randint(0, 500, (3, 9), generator=generator)
    sampling = Sampling(temperature=0.7, top_k=40, top_p=0.8, repetition_penalty=1.3)
    expected = logits.clone()
    for processor in (RepetitionPenaltyLogitsProcessor(1.3), TemperatureLogitsWarper(0.7), TopKLogitsWarper(40),
                      TopPLogitsWarper(0.8)):
        expected = processor(tokens, expected)
    ours = next_token_scores(logits, tokens, sampling)
    assert torch.equal(torch.isinf(ours), torch.isinf(expected))
    assert torch.allclose(ours[~torch.isinf(ours)], expected[~torch.isinf(expected)])
    assert 1 <= (~torch.isinf(ours)).sum(dim=-1).min() and (~torch.isinf(ours)).sum(dim=-1).max() <= 40


def test_sampling_options_are_validated():
    for bad in (dict(temperature=-1), dict(top_p=0), dict(top_p=1.5), dict(top_k=-2), dict(repetition_penalty=0)):
        with pytest.raises(ConfigError):
            Sampling(**bad)


INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize("bad, field", [
    (dict(temperature=INF), "temperature"), (dict(temperature=NAN), "temperature"),
    (dict(temperature=1e-9), "temperature"), (dict(temperature=1e6), "temperature"), (dict(temperature="0.7"), "temperature"), (dict(top_p=NAN), "top_p"),
    (dict(top_p=INF), "top_p"), (dict(top_k=True), "top_k"), (dict(top_k=2.5), "top_k"),
    (dict(repetition_penalty=INF), "repetition_penalty"), (dict(repetition_penalty=NAN), "repetition_penalty"),
    (dict(repetition_penalty=1e-9), "repetition_penalty"),
])
def test_non_finite_or_absurd_sampling_values_are_refused_naming_the_field_and_range(bad, field):
    with pytest.raises(ConfigError, match=rf"invalid config {field}=.*\(allowed: "):
        Sampling(**bad)


def test_ids_outside_the_vocabulary_are_refused_before_generating(tied):
    model, _, _ = tied
    vocab = model.config.vocab_size
    with pytest.raises(InputError, match=rf"prompt 1 holds token id {vocab}, outside the model's vocabulary "
                                         rf"of {vocab}"):
        generate_ids(model, [[1, 2], [3, vocab]], max_new_tokens=2)
    with pytest.raises(ConfigError, match=rf"pad_token_id={vocab} \(allowed: an integer in \[0, {vocab - 1}\]"):
        generate_ids(model, [[1, 2], [3]], max_new_tokens=2, pad_token_id=vocab)
    with pytest.raises(ConfigError, match="suppress_ids=-1"):
        generate_ids(model, [[1, 2]], max_new_tokens=2, suppress_ids=[-1])
    with pytest.raises(ConfigError, match="first_row=-1"):
        generate_ids(model, [[1, 2]], max_new_tokens=2, first_row=-1)
    # An eos id outside the vocabulary is kept, as transformers keeps it: it is never drawn, so it stops nothing;
    # nor is it the default pad id, which is fed to the model.
    assert generate_ids(model, [[1, 2], [3]], max_new_tokens=3, eos_token_ids=[vocab + 5]) == \
        generate_ids(model, [[1, 2], [3]], max_new_tokens=3, pad_token_id=0)


def test_too_long_prompt_is_refused_or_cut_from_the_left(tied, caplog):
    model, tokenizer, _ = tied  # max_position_embeddings 128
    long = list(range(1000, 1200))
    with pytest.raises(InputError, match="200 tokens.*128 positions.*truncate"):
        generate_ids(model, [long], max_new_tokens=8)
    with caplog.at_level(logging.WARNING, logger="biotf.inference.generation"):
        cut = generate_ids(model, [long], max_new_tokens=8, truncate_prompt=True)
    assert "keeping its last 120" in caplog.text
    assert cut == generate_ids(model, [long[-120:]], max_new_tokens=8)
    with pytest.raises(ConfigError, match="max_new_tokens"):
        generate_ids(model, [[1, 2]], max_new_tokens=128)
    with pytest.raises(InputError, match="empty"):
        generate_ids(model, [[1, 2], []], max_new_tokens=4)


def test_chat_template_strings_equal_transformers_apply_chat_template(tied, tied_checkpoint):
    _, tokenizer, _ = tied
    reference = transformers.AutoTokenizer.from_pretrained(tied_checkpoint)
    conversations = [
        [{"role": "user", "content": "Name three amino acids."}],
        [{"role": "system", "content": "You answer in one word."}, {"role": "user", "content": "Largest organ?"}],
        [{"role": "user", "content": "héllo 🧬"}, {"role": "assistant", "content": "Hi!"},
         {"role": "user", "content": "And DNA?"}],
    ]
    for messages in conversations:
        for add_generation_prompt in (True, False):
            assert render_chat(tokenizer, messages, add_generation_prompt) == reference.apply_chat_template(
                messages, add_generation_prompt=add_generation_prompt, tokenize=False)
    assert chat_prompt(tokenizer, "Hi", system="Be brief.") == reference.apply_chat_template(
        conversations[1][:0] + [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        add_generation_prompt=True, tokenize=False)


def test_streamer_writes_whole_characters_only(tied):
    _, tokenizer, _ = tied
    text = "ACGT 🧬 héllo 蛋白质"
    ids = tokenizer.encode(text)
    assert len(ids) > len(tokenizer.tokenize("ACGT héllo"))  # multi-byte characters span several tokens
    pieces: list[str] = []
    streamer = TextStreamer(tokenizer, pieces.append)
    for token in ids:
        streamer(0, token)
        streamer(1, token)  # other rows are not this streamer's
    assert "".join(pieces) == text
    assert not any("\ufffd" in piece for piece in pieces)
