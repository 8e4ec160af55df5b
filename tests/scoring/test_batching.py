"""`ScoreOptions(packing=True)`: several rows (masked copies, windows) share one row of the model, each alone in its
segment; every method gives the unpacked scores (1e-5 nats per record), in the same order, from fewer pad tokens."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from scoring_helpers import SHAPE

from biotf.errors import ConfigError
from biotf.model import Transformer, TransformerConfig
from biotf.scoring import ScoreOptions, Scorer, make_variant, parse_code
from biotf.scoring.batching import Row, row_log_probs
from biotf.tokenizers import AminoAcidTokenizer

TOLERANCE = 1e-5
LETTERS = np.array(list("ACDEFGHIKLMNPQRSTVWY"))
# Mixed lengths, short ones (where packing pays) and two longer than the tiny models' 64 positions (windows).
LENGTHS = [3, 9, 1, 17, 40, 5, 70, 12, 130, 2]
WILD_TYPE = "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ"
VARIANTS = ["A4G", "K2R:I6L", "Q33E", "A4G:Y5W:S13T", "E31K", "R10W"]


def proteins() -> list[str]:
    rng = np.random.default_rng(3)
    return ["".join(rng.choice(LETTERS, n)) for n in LENGTHS]


class Forwards:
    """The model rows of every trunk pass (`encode`, which `forward` calls too): (rows, width, records in the most
    packed row; 0 without segment ids)."""

    def __init__(self, model: Transformer):
        self.calls: list[tuple[int, int, int]] = []
        self.model = model

    def __enter__(self) -> Forwards:
        encode = self.model.encode

        def counted(input_ids, *args, segment_ids=None, **kwargs):
            rows, width = input_ids.shape
            self.calls.append((rows, width, 0 if segment_ids is None else int(segment_ids.max())))
            return encode(input_ids, *args, segment_ids=segment_ids, **kwargs)

        self.model.encode = counted
        return self

    def __exit__(self, *exc) -> None:
        del self.model.encode

    @property
    def padded_tokens(self) -> int:
        return sum(rows * width for rows, width, _ in self.calls)


def both(model, tokenizer, score, **options):
    """`score(scorer)` without and with packing, with the forwards each made."""
    results = []
    for packing in (False, True):
        with Forwards(model) as forwards:
            results.append((score(Scorer(model, tokenizer, ScoreOptions(packing=packing, **options))), forwards))
    return results


@pytest.mark.parametrize("token_dropout", [False, True])
def test_packed_pll_equals_unpacked_per_record(token_dropout):
    """ESM token dropout rescales by each record's own mask ratio: one mask per masked copy, packed or not."""
    tokenizer = AminoAcidTokenizer()
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=tokenizer.vocab_size, max_seq_len=64, causal=False,
                                          token_dropout=token_dropout, mask_token_id=tokenizer.mask_id,
                                          **SHAPE)).eval()
    sequences = proteins()
    (plain, padded), (packed, packing) = both(model, tokenizer, lambda s: s.sequence_scores(sequences, "pll"),
                                              batch_tokens=512)
    for one, other in zip(packed, plain):
        assert abs(one.log_likelihood - other.log_likelihood) <= TOLERANCE
        assert (one.tokens, one.scored_tokens, one.residues, one.windows) == \
            (other.tokens, other.scored_tokens, other.residues, other.windows)
    assert [s.windows for s in plain] == [1] * 6 + [2, 1, 3, 1]
    assert max(records for _, _, records in packing.calls) > 1
    assert packing.padded_tokens < padded.padded_tokens


def test_packed_causal_log_likelihood_equals_unpacked_per_record(protein_clm):
    model, tokenizer = protein_clm
    sequences = proteins()
    (plain, _), (packed, packing) = both(model, tokenizer, lambda s: s.sequence_scores(sequences, "causal"),
                                         batch_tokens=512)
    for one, other in zip(packed, plain):
        assert abs(one.log_likelihood - other.log_likelihood) <= TOLERANCE and one.scored_tokens == other.scored_tokens
    assert max(records for _, _, records in packing.calls) > 1


@pytest.mark.parametrize("method", ["masked-marginal", "wt-marginal", "pll"])
def test_packed_variant_scores_equal_unpacked(protein_mlm, method):
    """Windows of 24 tokens over the 33-residue reference (two windows of 24 and 17 tokens: rows of one segment
    each, since a packed row is as long as the longest; the packed path runs all the same)."""
    model, tokenizer = protein_mlm
    variants = [make_variant(WILD_TYPE, parse_code(code), code) for code in VARIANTS]
    (plain, _), (packed, packing) = both(model, tokenizer, lambda s: s.variant_scores(WILD_TYPE, variants, method),
                                         max_length=24, overlap=4)
    assert len(packed) == len(VARIANTS)
    for code, one, other in zip(VARIANTS, packed, plain):
        assert abs(one.score - other.score) <= TOLERANCE, code
    assert packing.calls and min(records for _, _, records in packing.calls) >= 1


def test_packed_rows_read_whole_distributions_at_any_position(protein_mlm):
    """`row_log_probs` itself: rows of mixed lengths, several positions each, the whole vocabulary read."""
    model, tokenizer = protein_mlm
    rng = np.random.default_rng(0)
    rows = []
    for length in [5, 30, 2, 11, 7, 19, 3]:
        ids = rng.integers(4, tokenizer.vocab_size, length)
        rows.append(Row(ids, rng.choice(length, min(length, 3), replace=False)))
    plain = row_log_probs(model, rows, 64, tokenizer.pad_id)
    packed = row_log_probs(model, rows, 64, tokenizer.pad_id, packing=True)
    for one, other in zip(packed, plain):
        assert one.shape == other.shape == (len(one), tokenizer.vocab_size)
        np.testing.assert_allclose(one, other, rtol=0, atol=TOLERANCE)


def test_a_stem_model_refuses_packing_in_one_line():
    from biotf.tokenizers import build_tokenizer

    tokenizer = build_tokenizer({"kind": "dna", "k": 1})
    model = Transformer(TransformerConfig(vocab_size=tokenizer.vocab_size, max_seq_len=64, causal=False, stem="conv",
                                          stem_widths=[16, 32], stem_kernel=5, stem_pool=[2, 2], **SHAPE))
    with pytest.raises(ConfigError) as caught:
        Scorer(model, tokenizer, ScoreOptions(packing=True))
    assert "packing=True" in str(caught.value) and "convolutional stem" in str(caught.value)
    assert "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match="packing='yes'"):
        ScoreOptions(packing="yes")
