"""`Scorer` against direct reference loops (tests/scoring/reference.py): PLL, causal log-likelihood,
masked- and wt-marginal, k-mer re-tokenization, windows, batching."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import scoring_helpers as reference
from protein_batches import one_mask_per_forward_pll
from scoring_helpers import tiny_model

from biotf.errors import ConfigError, InputError
from biotf.scoring import ScoreOptions, Scorer, make_variant, parse_code, parse_pos_ref_alt
from biotf.tokenizers import reverse_complement


WILD_TYPE = "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ"
PROTEINS = [WILD_TYPE, "MSTNPKPQRKTKRNTNRRPQDVKFPGG", "MA", "HPETLVKVKDAEDQLGARVGYIELDLNSGK"]
TOLERANCE = 1e-5


def test_pll_equals_one_masked_copy_per_forward(protein_mlm):
    model, tokenizer = protein_mlm
    scores = Scorer(model, tokenizer).sequence_scores(PROTEINS, "pll")
    for sequence, score in zip(PROTEINS, scores):
        expected = reference.pseudo_log_likelihood(model, tokenizer, sequence)
        assert abs(score.log_likelihood - expected) <= TOLERANCE
        assert (score.tokens, score.scored_tokens, score.residues, score.windows) == (len(sequence),) * 3 + (1,)
        assert math.isclose(score.perplexity, math.exp(-expected / len(sequence)), rel_tol=1e-6)


def test_pll_of_a_stem_model_is_per_base_and_equals_the_reference_loop():
    """A conv stem pools bases into bins of 4; its logits are per base (the upsampling), so PLL masks and scores
    each base, batched and padded as for any masked model, and equals one unpadded forward per masked copy."""
    from biotf.model import Transformer, TransformerConfig
    from biotf.tokenizers import build_tokenizer

    tokenizer = build_tokenizer({"kind": "dna", "k": 1})
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=tokenizer.vocab_size, max_seq_len=64, causal=False, stem="conv",
                                          stem_widths=[16, 32], stem_kernel=5, stem_pool=[2, 2],
                                          **reference.SHAPE)).eval()
    dna = ["ACGTTGCAAGCTTACG", "GATTACA", "CCGGAATTCCGGAATTACGTA"]
    scores = Scorer(model, tokenizer, ScoreOptions(batch_tokens=64)).sequence_scores(dna, "pll")
    for sequence, score in zip(dna, scores):
        assert score.scored_tokens == len(sequence)
        assert abs(score.log_likelihood - reference.pseudo_log_likelihood(model, tokenizer, sequence)) <= TOLERANCE


def test_causal_log_likelihood_equals_one_forward(protein_clm):
    model, tokenizer = protein_clm
    scores = Scorer(model, tokenizer).sequence_scores(PROTEINS)  # auto: causal for a decoder
    for sequence, score in zip(PROTEINS, scores):
        assert abs(score.log_likelihood - reference.causal_log_likelihood(model, tokenizer, sequence)) <= TOLERANCE
        assert score.scored_tokens == len(sequence)


@pytest.mark.parametrize("fixture", ["protein_mlm", "protein_clm"])
def test_batched_equals_one_at_a_time(fixture, request):
    model, tokenizer = request.getfixturevalue(fixture)
    together = Scorer(model, tokenizer, ScoreOptions(batch_tokens=4096)).sequence_scores(PROTEINS)
    alone = [Scorer(model, tokenizer, ScoreOptions(batch_tokens=1)).sequence_scores([s])[0] for s in PROTEINS]
    for a, b in zip(together, alone):
        assert abs(a.log_likelihood - b.log_likelihood) <= TOLERANCE


def test_windows_score_every_token_once_in_the_window_that_owns_it(protein_mlm):
    """max_length 12 (10 residues a window, overlap 2): the PLL is the sum of per-window masked copies."""
    from biotf.data.windows import plan_windows

    model, tokenizer = protein_mlm
    score = Scorer(model, tokenizer, ScoreOptions(max_length=12, overlap=2)).sequence_scores([WILD_TYPE], "pll")[0]
    expected = 0.0
    windows = plan_windows(len(WILD_TYPE), 10, 2)
    for window in windows:
        ids = tokenizer.encode(WILD_TYPE[window.start:window.end])
        for residue in range(window.own_start, window.own_end):
            at = residue - window.start + 1
            masked = list(ids)
            masked[at] = tokenizer.mask_id
            expected += reference.log_probs(model, masked)[at, ids[at]].item()
    assert score.windows == len(windows) > 1
    assert score.scored_tokens == len(WILD_TYPE)
    assert abs(score.log_likelihood - expected) <= TOLERANCE


VARIANTS = ["A4G", "K2R:I6L", "M1M", "Q33E", "A4G:Y5W:S13T"]


@pytest.mark.parametrize("method", ["masked-marginal", "masked-marginal-joint", "wt-marginal"])
def test_marginals_equal_the_direct_implementation(protein_mlm, method):
    model, tokenizer = protein_mlm
    variants = [make_variant(WILD_TYPE, parse_code(code), code) for code in VARIANTS]
    scores = Scorer(model, tokenizer).variant_scores(WILD_TYPE, variants, method)
    direct = getattr(reference, method.replace("-", "_"))
    for code, score in zip(VARIANTS, scores):
        mutations = [(part[0], int(part[1:-1]) - 1, part[-1]) for part in code.split(":")]
        assert abs(score.score - direct(model, tokenizer, WILD_TYPE, mutations)) <= TOLERANCE, code
    assert scores[2].score == 0.0  # M1M: synonymous


def test_masked_marginal_with_windows_matches_a_short_reference(protein_mlm):
    """A mutation near the end of a chunked reference is scored in its own window: the same as scoring that
    window's residues alone (its first window starts the sequence; its last ends it)."""
    model, tokenizer = protein_mlm
    scorer = Scorer(model, tokenizer, ScoreOptions(max_length=12, overlap=4))
    variant = make_variant(WILD_TYPE, parse_code("E31K"), "E31K")
    score = scorer.variant_scores(WILD_TYPE, [variant], "masked-marginal")[0].score
    last = WILD_TYPE[-10:]
    assert abs(score - reference.masked_marginal(model, tokenizer, last, [("E", 30 - (len(WILD_TYPE) - 10), "K")])) \
        <= TOLERANCE


def test_offset_numbers_positions_from_the_first_residue(protein_mlm):
    model, tokenizer = protein_mlm
    scorer = Scorer(model, tokenizer)
    one_based = make_variant(WILD_TYPE, parse_code("A4G:K8R"), "v")
    ambler = make_variant(WILD_TYPE, parse_code("A27G:K31R", offset=24), "v", offset=24)
    assert one_based == ambler
    assert ambler.code(24) == "A27G:K31R"
    a, b = scorer.variant_scores(WILD_TYPE, [one_based, ambler])
    assert a.score == b.score
    with pytest.raises(InputError, match="'one-based': mutation A28G does not match the reference, which has 'Y' at "
                                         "position 28 .numbered from offset 24"):
        make_variant(WILD_TYPE, parse_code("A28G", offset=24), "one-based", offset=24)
    with pytest.raises(InputError, match="position 4 is outside the reference .positions 24..56"):
        make_variant(WILD_TYPE, parse_code("A4G", offset=24), "wrong-offset", offset=24)


def test_auto_method(protein_mlm, protein_clm, kmer_mlm):
    substitution = [make_variant(WILD_TYPE, parse_code("A4G"), "v")]
    assert Scorer(*protein_mlm).resolve("auto", substitution, WILD_TYPE) == "masked-marginal"
    assert Scorer(*protein_clm).resolve("auto", substitution, WILD_TYPE) == "causal"
    assert Scorer(*protein_mlm).resolve("auto") == "pll"
    deletion = [make_variant(WILD_TYPE, [parse_pos_ref_alt("4", "AY", "A")], "del")]
    assert Scorer(*protein_mlm).resolve("auto", deletion, WILD_TYPE) == "pll"
    dna = "ACGTTGCAAGGCTTAACGTA"
    assert Scorer(*kmer_mlm).resolve("auto", [make_variant(dna, parse_code("A1C"), "v")], dna) == "pll"


def test_causal_variant_score_is_the_log_likelihood_ratio(protein_clm):
    model, tokenizer = protein_clm
    variants = [make_variant(WILD_TYPE, parse_code("A4G:K8R"), "sub"),
                make_variant(WILD_TYPE, [parse_pos_ref_alt("10", "R", "RWW")], "ins")]
    scores = Scorer(model, tokenizer).variant_scores(WILD_TYPE, variants)
    wild = reference.causal_log_likelihood(model, tokenizer, WILD_TYPE)
    for sequence, score in zip(["MKTGYIARQRQISFVKSHFSRQLEERLGLIEVQ", "MKTAYIAKQRWWQISFVKSHFSRQLEERLGLIEVQ"], scores):
        assert abs(score.score - (reference.causal_log_likelihood(model, tokenizer, sequence) - wild)) <= TOLERANCE


def test_kmer_variants_are_scored_by_retokenized_pseudo_likelihoods(kmer_mlm):
    """An SNV changes the three overlapping 3-mers that cover it and a deletion shifts the rest: the score is
    PLL(variant) - PLL(reference), each tokenized afresh; both strands average it with the reverse complement's."""
    model, tokenizer = kmer_mlm
    dna = "ACGTTGCAAGGCTTAACGTAGGCATTACG"
    snv = make_variant(dna, [parse_pos_ref_alt("12", "C", "T")], "snv")
    deletion = make_variant(dna, [parse_pos_ref_alt("20", "AG", "A")], "del")
    mutated = ["ACGTTGCAAGGTTTAACGTAGGCATTACG", "ACGTTGCAAGGCTTAACGTAGCATTACG"]
    before, after = tokenizer.tokenize(dna), tokenizer.tokenize(mutated[0])
    assert sum(a != b for a, b in zip(before, after)) == 3
    scorer = Scorer(model, tokenizer)
    with pytest.raises(ConfigError, match="one token per residue"):
        scorer.variant_scores(dna, [snv], "masked-marginal")
    forward = scorer.variant_scores(dna, [snv, deletion])
    both = scorer.variant_scores(dna, [snv, deletion], both_strands=True)
    pll = lambda sequence: reference.pseudo_log_likelihood(model, tokenizer, sequence)  # noqa: E731
    for sequence, one, two in zip(mutated, forward, both):
        expected = pll(sequence) - pll(dna)
        reverse = pll(reverse_complement(sequence)) - pll(reverse_complement(dna))
        assert abs(one.score - expected) <= TOLERANCE
        assert abs(two.strands[1] - reverse) <= TOLERANCE and abs(two.score - (expected + reverse) / 2) <= TOLERANCE


def test_marginal_of_a_reverse_strand_snv(kmer_mlm):
    """Per-base tokenizer (k = 1): the reverse-strand masked marginal masks the mirrored position with the
    complementary bases."""
    from biotf.tokenizers import KmerTokenizer

    tokenizer = KmerTokenizer(k=1)
    model = tiny_model(tokenizer.vocab_size, causal=False, seed=3)
    dna = "ACGTTGCAAGGCTTAACG"
    variant = make_variant(dna, parse_code("C12T"), "snv")
    score = Scorer(model, tokenizer).variant_scores(dna, [variant], "masked-marginal", both_strands=True)[0]
    assert abs(score.strands[0] - reference.masked_marginal(model, tokenizer, dna, [("C", 11, "T")])) <= TOLERANCE
    reverse = reference.masked_marginal(model, tokenizer, reverse_complement(dna), [("G", len(dna) - 12, "A")])
    assert abs(score.strands[1] - reverse) <= TOLERANCE


def test_methods_the_model_cannot_do_are_refused(protein_mlm, protein_clm):
    variants = [make_variant(WILD_TYPE, parse_code("A4G"), "v")]
    with pytest.raises(ConfigError, match="masked .*allowed: pll, masked-marginal, masked-marginal-joint, wt-marginal"):
        Scorer(*protein_mlm).variant_scores(WILD_TYPE, variants, "causal")
    with pytest.raises(ConfigError, match="causal .*allowed: causal"):
        Scorer(*protein_clm).variant_scores(WILD_TYPE, variants, "masked-marginal")
    with pytest.raises(ConfigError, match="allowed: auto, causal, pll"):
        Scorer(*protein_mlm).sequence_scores(["MK"], "wt-marginal")
    insertion = [make_variant(WILD_TYPE, [parse_pos_ref_alt("4", "A", "AG")], "ins")]
    with pytest.raises(InputError, match="'ins' .* not a substitution"):
        Scorer(*protein_mlm).variant_scores(WILD_TYPE, insertion, "wt-marginal")


def test_esm_pll_equals_the_transformers_loop(esm2_checkpoint):
    """A Hugging Face ESM-2 (token dropout on) loaded by biotf: the PLL equals HF's own one-mask-per-forward loop,
    token dropout's rescaling for one mask included."""
    transformers = pytest.importorskip("transformers")
    from biotf.api import Model

    directory, hf = esm2_checkpoint
    loaded = Model.load(directory)
    model, tokenizer = loaded.network, loaded.tokenizer
    scores = Scorer(model, tokenizer).sequence_scores(PROTEINS[:3], "pll")
    hf_tokenizer = transformers.EsmTokenizer.from_pretrained(directory)
    for sequence, score in zip(PROTEINS, scores):
        ids = hf_tokenizer(sequence, return_tensors="pt")["input_ids"]
        expected = one_mask_per_forward_pll(hf, ids, hf_tokenizer.mask_token_id)
        assert abs(score.log_likelihood - expected) <= TOLERANCE


def test_empty_and_unscorable(protein_mlm):
    model, tokenizer = protein_mlm
    score = Scorer(model, tokenizer).sequence_scores(["", "MK"], "pll")
    assert score[0].scored_tokens == 0 and np.isnan(score[0].perplexity)
    assert score[1].scored_tokens == 2


def test_reading_past_max_seq_len_scores_one_window_as_the_model_runs_it(protein_clm):
    """A RoPE model of max_seq_len 64 scores a 100-residue protein in one window with max_length 102 (warned): the
    log-likelihood is the model's own over the whole sequence."""
    from biotf.errors import BiotfWarning

    model, tokenizer = protein_clm
    sequence = (WILD_TYPE * 4)[:100]
    with pytest.warns(BiotfWarning, match="reads past the 64 tokens"):
        scorer = Scorer(model, tokenizer, ScoreOptions(max_length=102))
    score = scorer.sequence_scores([sequence], "causal")[0]
    expected = reference.causal_log_likelihood(model, tokenizer, sequence)
    assert score.windows == 1 and abs(score.log_likelihood - expected) <= TOLERANCE


def optimal_window(position: int, length: int, model_window: int) -> tuple[int, int]:
    """ProteinGym's `get_optimal_window` (proteingym/utils/scoring_utils.py), on token indices of the framed
    sequence (<cls> ... <eos>)."""
    half = model_window // 2
    if length <= model_window:
        return 0, length
    if position < half:
        return 0, model_window
    if position >= length - half:
        return length - model_window, length
    return max(0, position - half), min(length, position + half)


@pytest.mark.parametrize("max_length", [12, 13])
def test_centred_windows_are_proteingyms_optimal_windows(protein_mlm, max_length):
    """window="centred": each masked position read in the slice of the framed reference ProteinGym's
    compute_fitness.py takes for a target longer than the model, at the start, the middle and the end."""
    model, tokenizer = protein_mlm
    codes = ["K2R", "Q9E:R10K", "H18Y", "E31K:V32A", "A4G:V32A"]
    variants = [make_variant(WILD_TYPE, parse_code(code), code) for code in codes]
    scorer = Scorer(model, tokenizer, ScoreOptions(max_length=max_length, window="centred"))
    scores = scorer.variant_scores(WILD_TYPE, variants, "masked-marginal")
    framed = tokenizer.encode(WILD_TYPE)
    token = lambda residue: tokenizer.encode(residue, False)[0]  # noqa: E731
    for code, score in zip(codes, scores):
        expected = 0.0
        for part in code.split(":"):
            at = int(part[1:-1])  # 1-based residue = token index after <cls>
            start, end = optimal_window(at, len(framed), max_length)
            ids = framed[start:end]
            ids[at - start] = tokenizer.mask_id
            table = reference.log_probs(model, ids)
            expected += table[at - start, token(part[-1])].item() - table[at - start, token(part[0])].item()
        assert abs(score.score - expected) <= TOLERANCE, code
    owned = Scorer(model, tokenizer, ScoreOptions(max_length=max_length)).variant_scores(WILD_TYPE, variants,
                                                                                      "masked-marginal")
    assert max(abs(a.score - b.score) for a, b in zip(scores, owned)) > 10 * TOLERANCE  # the two plans differ
