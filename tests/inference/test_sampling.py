"""Drawing N sequences from a causal model: reproducible at any batch size, no special token inside, counted
rejections, and the sample files."""

from __future__ import annotations

import csv

import pytest
import torch

from biotf.errors import ConfigError, InputError
from biotf.inference.generation import Sampling, generate_batch
from biotf.inference.pretrained import GenerationDefaults
from biotf.inference.sampling import Sample, sample_sequences, suppressed_ids, write_samples
from biotf.model import Transformer, TransformerConfig
from biotf.tokenizers import build_tokenizer


@pytest.fixture(scope="module")
def smiles_model():
    """A tiny random causal SMILES model whose output bias favours every special token (eos as well), so that
    a sampler which let them through would emit them often."""
    tokenizer = build_tokenizer({"kind": "smiles"})
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=tokenizer.vocab_size + 3, d_model=16, n_layers=1, n_heads=2,
                                          n_kv_heads=2, d_ff=32, max_seq_len=24, lm_head_bias=True)).eval()
    with torch.no_grad():
        model.lm_head_bias[sorted(tokenizer.special_ids | {tokenizer.unk_id})] = 4.0
        model.lm_head_bias[tokenizer.vocab_size:] = 4.0  # rows past the tokenizer's vocabulary
        model.lm_head_bias[tokenizer.eos_id] = 1.0
    return model, tokenizer, GenerationDefaults.for_run(tokenizer)


def same(first: list[Sample], second: list[Sample]) -> bool:
    """The same samples; log-probabilities up to the float rounding of batched matrix products."""
    def fields(s: Sample):
        return s.index, s.sequence, s.tokens, s.finished
    return [fields(s) for s in first] == [fields(s) for s in second] and \
        [s.log_prob for s in first] == pytest.approx([s.log_prob for s in second], rel=1e-5)


def test_same_seed_same_samples_at_any_batch_size(smiles_model):
    model, tokenizer, defaults = smiles_model
    runs = [sample_sequences(model, tokenizer, defaults, 7, seed=3, batch_size=size) for size in (1, 3, 7, 64)]
    assert all(same(run.samples, runs[0].samples) for run in runs)
    assert len({s.sequence for s in runs[0].samples}) > 1  # really sampled
    assert not same(sample_sequences(model, tokenizer, defaults, 7, seed=4).samples, runs[0].samples)
    fresh = sample_sequences(model, tokenizer, defaults, 3, seed=None)
    assert same(sample_sequences(model, tokenizer, defaults, 3, seed=fresh.seed).samples, fresh.samples)


def test_no_special_token_inside_a_sample_and_each_ends_at_eos_or_the_length(smiles_model):
    model, tokenizer, defaults = smiles_model
    suppress = suppressed_ids(tokenizer, defaults, model.config.vocab_size)
    assert tokenizer.eos_id not in suppress and {tokenizer.cls_id, tokenizer.pad_id, tokenizer.unk_id,
                                                 tokenizer.mask_id, tokenizer.vocab_size} <= suppress
    start = [[tokenizer.eos_id]] * 64
    free = generate_batch(model, start, max_new_tokens=20, sampling=Sampling(temperature=1.0), seed=0).ids
    assert any(set(row) & suppress for row in free)  # the model alone does emit them
    rows = generate_batch(model, start, max_new_tokens=20, sampling=Sampling(temperature=1.0), seed=0,
                          eos_token_ids=[tokenizer.eos_id], suppress_ids=suppress).ids
    for row in rows:
        assert not set(row) & suppress
        assert tokenizer.eos_id not in row[:-1] and (row[-1] == tokenizer.eos_id or len(row) == 20)
    drawn = sample_sequences(model, tokenizer, defaults, 64, seed=0, max_new_tokens=20)
    assert [s.tokens for s in drawn.samples] == [len(row) for row in rows]
    assert drawn.unfinished == sum(row[-1] != tokenizer.eos_id for row in rows) > 0


def test_log_prob_is_the_models_own_probability_of_the_new_tokens(smiles_model):
    model, tokenizer, defaults = smiles_model
    sample = sample_sequences(model, tokenizer, defaults, 1, seed=1, sampling=Sampling(temperature=0.7)).samples[0]
    ids = [tokenizer.eos_id] + tokenizer.encode(sample.sequence, add_special_tokens=False)
    if sample.finished:
        ids.append(tokenizer.eos_id)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
    expected = sum(logits[position - 1, ids[position]].item() for position in range(1, len(ids)))
    assert sample.log_prob == pytest.approx(expected, abs=1e-4)


def test_a_validity_filter_keeps_drawing_and_counts_what_it_rejects(smiles_model):
    model, tokenizer, defaults = smiles_model

    def valid(text: str) -> bool:
        return len(text) % 2 == 0

    drawn = sample_sequences(model, tokenizer, defaults, 5, seed=2, batch_size=4, valid=valid, max_draws=200)
    assert len(drawn.samples) == 5 and all(valid(s.sequence) and s.finished for s in drawn.samples)
    assert drawn.rejected and all(not valid(s.sequence) or not s.finished for s in drawn.rejected)
    assert drawn.draws == len(drawn.samples) + len(drawn.rejected)
    # the kept ones are the first 5 that pass in stream order: the same at another batch size
    assert same(sample_sequences(model, tokenizer, defaults, 5, seed=2, batch_size=64, valid=valid,
                                 max_draws=200).samples, drawn.samples)
    capped = sample_sequences(model, tokenizer, defaults, 5, seed=2, valid=lambda text: False, max_draws=9)
    assert (len(capped.samples), len(capped.rejected), capped.draws) == (0, 9, 9)


def test_refusals(smiles_model):
    model, tokenizer, defaults = smiles_model
    for options, message in [(dict(max_draws=10), "only a validity filter"),
                             (dict(max_draws=2, valid=bool), "allowed: at least num_samples"),
                             (dict(batch_size=0), "batch_size=0")]:
        with pytest.raises(ConfigError, match=message):
            sample_sequences(model, tokenizer, defaults, 3, **options)
    with pytest.raises(InputError, match="maximum length of 24"):
        sample_sequences(model, tokenizer, defaults, 1, prompt="C" * 30)


def test_sample_files_by_extension(tmp_path):
    samples = [Sample(0, "CCO", 4, -3.5, True), Sample(4, "c1ccccc1", 9, -7.25, False)]
    write_samples(tmp_path / "s.fasta", samples)
    assert (tmp_path / "s.fasta").read_text() == ">sample_1\nCCO\n>sample_2\nc1ccccc1\n"
    write_samples(tmp_path / "s.txt", samples)
    assert (tmp_path / "s.txt").read_text() == "CCO\nc1ccccc1\n"
    write_samples(tmp_path / "s.csv", samples)
    rows = list(csv.DictReader((tmp_path / "s.csv").open()))
    assert rows == [{"id": "sample_1", "sequence": "CCO", "tokens": "4", "log_prob": "-3.5", "finished": "true"},
                    {"id": "sample_2", "sequence": "c1ccccc1", "tokens": "9", "log_prob": "-7.25",
                     "finished": "false"}]
    with pytest.raises(InputError, match=r"unsupported extension '\.json' \(allowed: \.fasta, \.csv, \.txt\)"):
        write_samples(tmp_path / "s.json", samples)
    with pytest.raises(InputError, match="sample_1 holds a line break"):
        write_samples(tmp_path / "t.txt", [Sample(0, "to be\nor not", 5, -1.0, True)])
    write_samples(tmp_path / "t.csv", [Sample(0, "to be\nor not", 5, -1.0, True)])  # CSV quotes it
    assert next(csv.DictReader((tmp_path / "t.csv").open()))["sequence"] == "to be\nor not"


def test_a_hugging_face_checkpoint_starts_from_its_bos_and_never_draws_its_added_specials(tied):
    model, tokenizer, defaults = tied
    assert defaults.encode_prompt(tokenizer, None) == [151643]  # generation_config.json's bos, <|endoftext|>
    suppress = suppressed_ids(tokenizer, defaults, model.config.vocab_size)
    assert tokenizer.get_vocab()["<|im_start|>"] in suppress and model.config.vocab_size - 1 in suppress
    assert not set(defaults.eos_token_ids) & suppress
    drawn = sample_sequences(model, tokenizer, defaults, 4, seed=0, max_new_tokens=6, batch_size=3)
    assert len(drawn.samples) == 4 and all(0 < s.tokens <= 6 for s in drawn.samples)
