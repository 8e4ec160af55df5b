"""Each variant method on Hugging Face directories (a tiny random ESM-2, token dropout on; a tiny random BERT with a
one-token-per-residue tokenizer.json) against ProteinGym's formulas written directly on the `transformers` model
(`proteingym/baselines/esm/compute_fitness.py`): one forward per masked copy, batch size 1, the HF tokenizer's ids.

- masked marginals: position i masked alone in the wild type, log p(alt) - log p(wt) at i, summed over mutations
  (`label_row` over the stacked per-position distributions);
- joint masking (biotf's `masked-marginal-joint`): every mutated position masked in one copy, the same sum;
- wt-marginals: the same read off one unmasked forward;
- PLL: sum over the content tokens of log p(token | it alone masked), variant minus wild type (Salazar et al.)."""

from __future__ import annotations

import pytest
import torch

from biotf.scoring import Scorer, make_variant, parse_code

WILD_TYPE = "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEV"
VARIANTS = ["A4G", "K2R:I6L", "M1W", "V32A", "A4G:Y5W:S13T", "K2R:V32A", "Q9E:R10K"]
TOLERANCE = 1e-5
# Query and key weights this wide make attention sharp, as a trained model's: a masked neighbour then changes a
# position's prediction, so the masking conventions differ by more than the tolerance.
SHARP = 1.0


def hf_log_probs(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].double(), dim=-1)


def hf_masked(model, ids: list[int], positions: list[int], mask_id: int) -> torch.Tensor:
    copy = list(ids)
    for position in positions:
        copy[position] = mask_id
    return hf_log_probs(model, copy)


def proteingym(model, tokenizer, method: str, code: str) -> float:
    """The direct formula of `method` for variant `code` (1-based positions) on the wild type."""
    ids = tokenizer(WILD_TYPE)["input_ids"]
    token = tokenizer.convert_tokens_to_ids
    mutations = [(part[0], int(part[1:-1]) - 1, part[-1]) for part in code.split(":")]
    if method == "pll":
        mutant = list(WILD_TYPE)
        for _, position, alt in mutations:
            mutant[position] = alt
        return pll(model, tokenizer, "".join(mutant)) - pll(model, tokenizer, WILD_TYPE)
    total = 0.0
    for wt, position, alt in mutations:
        at = position + 1  # <cls> first
        if method == "masked-marginal":
            table = hf_masked(model, ids, [at], tokenizer.mask_token_id)
        elif method == "masked-marginal-joint":
            table = hf_masked(model, ids, [p + 1 for _, p, _ in mutations], tokenizer.mask_token_id)
        else:
            table = hf_log_probs(model, ids)
        total += (table[at, token(alt)] - table[at, token(wt)]).item()
    return total


def pll(model, tokenizer, sequence: str) -> float:
    ids = tokenizer(sequence)["input_ids"]
    return sum(hf_masked(model, ids, [i], tokenizer.mask_token_id)[i, ids[i]].item() for i in range(1, len(ids) - 1))


@pytest.fixture(scope="module")
def bert_directory(tmp_path_factory, random_encoder):
    """A BertForMaskedLM over a word-level tokenizer.json that splits proteins into residues ([CLS] ... [SEP])."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                                 *"ACDEFGHIKLMNPQRSTVWY"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                           special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]",
                                        cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    directory = tmp_path_factory.mktemp("bert-residues")
    model = random_encoder("bert", seed=3, max_positions=64, vocab_size=len(vocab), pad_token_id=0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(("query.weight", "key.weight")):
                parameter.normal_(0.0, SHARP)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory, model, tokenizer


@pytest.fixture(scope="module")
def esm_directory(tmp_path_factory, random_esm, save_esm):
    from transformers import EsmTokenizer

    model = random_esm(seed=7, hidden_size=64, query_key_std=SHARP)
    directory = save_esm(model, tmp_path_factory.mktemp("esm2-sharp"))
    return directory, model, EsmTokenizer.from_pretrained(directory)


@pytest.mark.parametrize("checkpoint", ["esm_directory", "bert_directory"])
@pytest.mark.parametrize("method", ["masked-marginal", "masked-marginal-joint", "wt-marginal", "pll"])
def test_each_method_equals_proteingym_formula_per_variant(checkpoint, method, request):
    from biotf.api import Model

    directory, hf, tokenizer = request.getfixturevalue(checkpoint)
    variants = [make_variant(WILD_TYPE, parse_code(code), code) for code in VARIANTS]
    scores = Scorer.of(Model.load(directory)).variant_scores(WILD_TYPE, variants, method)
    for code, score in zip(VARIANTS, scores):
        assert abs(score.score - proteingym(hf, tokenizer, method, code)) <= TOLERANCE, (method, code)


@pytest.mark.parametrize("checkpoint", ["esm_directory", "bert_directory"])
def test_independent_and_joint_masking_differ_on_multi_mutants_only(checkpoint, request):
    """The two conventions agree on single mutants and differ on multi-mutants by several times the tolerance of
    the test above, which therefore tells them apart."""
    from biotf.api import Model

    directory, _, _ = request.getfixturevalue(checkpoint)
    variants = [make_variant(WILD_TYPE, parse_code(code), code) for code in VARIANTS]
    scorer = Scorer.of(Model.load(directory))
    independent, joint = (scorer.variant_scores(WILD_TYPE, variants, method)
                          for method in ("masked-marginal", "masked-marginal-joint"))
    gaps = [abs(a.score - b.score) for a, b in zip(independent, joint)]
    singles = [gap for code, gap in zip(VARIANTS, gaps) if ":" not in code]
    multiples = [gap for code, gap in zip(VARIANTS, gaps) if ":" in code]
    assert max(singles) <= 1e-9 and max(multiples) > 4 * TOLERANCE, multiples
