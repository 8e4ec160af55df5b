"""`Scorer`: sequence log-likelihoods and variant effects from any biotf model and tokenizer.

Sequence methods (every record of a file):
- "causal" (decoder models, exact): sum over content tokens t of log p(x_t | x_<t); the tokens before
  the content (<cls>/<bos>) condition the first one, the end token (<eos>) is not scored. A tokenizer that
  puts nothing before the content leaves the first token unscored (counted: `scored_tokens`).
- "pll" (masked models): the pseudo-log-likelihood of Salazar et al. 2020, sum over content tokens t of
  log p(x_t | x with t alone masked). Masked copies are batched many per forward (`batching.py`).
  ESM models with token dropout see one mask per copy and rescale for it, as HF's `EsmEmbeddings` does.

Variant methods (a reference and its variants; a score of 0 means "as likely as the reference"):
- "masked-marginal" (ProteinGym's masked marginals, `compute_fitness.py`; Meier et al. 2021): sum over mutated
  positions i of log p(alt_i | x with i alone masked) - log p(wt_i | the same). One forward per distinct mutated
  position of the reference, shared by every variant that mutates it. For single mutants this is fair-esm's
  `predict.py` score exactly; for multi-mutants it is ProteinGym's (each mutation read off its own masked copy).
- "masked-marginal-joint": every mutated position of a variant masked together in one copy, then the same sum
  (one forward per distinct set of mutated positions). Equal to "masked-marginal" on single mutants.
- "wt-marginal": the same differences read off one forward of the unmasked reference (ProteinGym's wt-marginals).
- "causal" / "pll": the difference of the whole-sequence (pseudo-)log-likelihoods of variant and reference,
  each re-tokenized. The only exact choice for multi-token schemes (k-mers, BPE), where one base change
  re-tokenizes its neighbourhood and a residue has no token of its own; also the only one for indels.
"auto" picks causal for decoders, masked-marginal for masked models whose tokenizer makes one token per
residue when every variant is a substitution, and pll otherwise. `both_strands` (DNA) averages each score
with the same variant scored on the reverse complement of the reference.

Long inputs are cut into the overlapping windows of `biotf embed` (`biotf.data.windows`): every token is
scored once, in the window that owns it, with that window as its context.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from biotf.checkpoint.loading import LoadedModel, inference_precision
from biotf.errors import ConfigError, InputError
from biotf.data.packing import check_packable
from biotf.data.windows import Window, plan_windows
from biotf.model import Transformer
from biotf.model.positions import reading_length
from biotf.scoring.batching import Row, row_log_probs
from biotf.scoring import METHODS, SEQUENCE_METHODS
from biotf.scoring.mutations import Mutation, Variant, apply, reverse_strand
from biotf.tokenizers.base import PolicyStats, Tokenizer
from biotf.naming import given, parameter

MARGINAL_METHODS = ("masked-marginal", "masked-marginal-joint", "wt-marginal")
WINDOWS = ("owned", "centred")
# Tokenizer kinds whose alphabet is not nucleotides: a reverse strand means nothing to their models.
NOT_DNA_TOKENIZERS = ("protein", "smiles")


@dataclass(frozen=True)
class ScoreOptions:
    """`batch_tokens`: padded tokens per forward. `max_length`: tokens per window, special tokens included
    (default the model's max_seq_len). `overlap`: tokens shared by consecutive windows (default a quarter).
    `packing`: several rows (masked copies, windows) share one row of the model, each alone in its segment, as
    `EmbedOptions.packing` (`biotf.scoring.batching`): the same scores, fewer pad tokens. `window`: how masked-marginal
    reads a reference longer than `max_length`: "owned" (the windows above, each position in the one that owns it)
    or "centred" (ProteinGym's `get_optimal_window`: the `max_length` tokens of the framed reference centred on the
    masked token, clamped at the ends, special tokens only where the slice reaches them); other methods use "owned"."""

    batch_tokens: int = 16384
    max_length: int | None = None
    overlap: int | None = None
    packing: bool = False
    window: str = "owned"

    def __post_init__(self) -> None:
        for key in ("batch_tokens", "max_length"):
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(key, value, allowed="an integer >= 1")
        if self.overlap is not None and (isinstance(self.overlap, bool) or not isinstance(self.overlap, int)
                                         or self.overlap < 0):
            raise ConfigError("overlap", self.overlap, allowed="an integer >= 0")
        if self.window not in WINDOWS:
            raise ConfigError("window", self.window, allowed=", ".join(WINDOWS))
        check_packable(self.packing)


@dataclass
class SequenceScore:
    """One sequence's (pseudo-)log-likelihood in nats; means are NaN when nothing was scored."""

    log_likelihood: float
    tokens: int
    scored_tokens: int
    residues: int
    windows: int

    @property
    def mean_per_token(self) -> float:
        return self.log_likelihood / self.scored_tokens if self.scored_tokens else math.nan

    @property
    def mean_per_residue(self) -> float:
        return self.log_likelihood / self.residues if self.residues else math.nan

    @property
    def perplexity(self) -> float:
        return math.exp(-self.mean_per_token) if self.scored_tokens else math.nan


@dataclass
class VariantScore:
    """`score` (nats, > 0: more likely than the reference); `strands` = (forward, reverse) with both strands."""

    score: float
    strands: tuple[float, ...]


class Scorer:
    """Scores sequences and variants with one model; see the module docstring."""

    @classmethod
    def of(cls, loaded: LoadedModel, options: ScoreOptions = ScoreOptions()) -> Scorer:
        """A scorer of a loaded model (a `biotf.Model` too), knowing the precision it was loaded in."""
        return cls(loaded.network, loaded.tokenizer, options, inference_precision(loaded)["precision"])

    def __init__(self, model: Transformer, tokenizer: Tokenizer, options: ScoreOptions = ScoreOptions(),
                 precision: str = "fp32"):
        """`precision`: what `model` computes in (`biotf.checkpoint.loading.inference_precision`), written into every
        table row beside the method, since the scores depend on it."""
        self.model, self.tokenizer, self.options, self.precision = model.eval(), tokenizer, options, precision
        check_packable(options.packing, model.config)
        self.max_length = reading_length(model.config, options.max_length)
        self.pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else 0  # padding is masked anyway
        self.policies = PolicyStats()
        self._prefix: np.ndarray | None = None
        self._suffix: np.ndarray | None = None

    # --- methods ------------------------------------------------------------------------------------
    def resolve(self, method: str, variants: Sequence[Variant] | None = None, reference: str | None = None) -> str:
        """The concrete method `method` means for this model (and these variants); refuses what cannot work."""
        allowed = METHODS if variants is not None else SEQUENCE_METHODS
        if method not in allowed:
            raise ConfigError("method", method, allowed=", ".join(allowed))
        if not self.model.config.lm_head:  # before the tokenizer's lack of a mask, which would follow from it
            raise ConfigError("method", method, reason="the model has no language-model head (an encoder read without "
                              "one: T5's, EsmModel, AlbertModel, a classifier's): it embeds, it does not score")
        causal = self.model.config.causal
        if method == "auto":
            if causal:
                return "causal"
            if (variants is not None and all(v.is_substitution for v in variants)
                    and self._per_residue(reference or "")):
                return "masked-marginal"
            method = "pll"
        if causal != (method == "causal"):
            kind = "a causal (decoder)" if causal else "a masked (bidirectional)"
            fits = "causal" if causal else ", ".join(m for m in allowed if m not in ("auto", "causal"))
            raise ConfigError("method", method, reason=f"the model is {kind} language model", allowed=fits)
        if method != "causal" and method != "wt-marginal" and self.tokenizer.mask_id is None:
            raise ConfigError("method", method, reason=f"the {self.tokenizer.scheme} tokenizer has no <mask> token")
        if method in MARGINAL_METHODS:
            for variant in variants or ():
                if not variant.is_substitution:
                    raise InputError(f"variant {variant.name!r} ({variant.code()}) is not a substitution: "
                                     f"{method} scores residues in place (allowed for indels: "
                                     f"{given('method', 'pll')})")
            if not self._per_residue(reference or ""):
                raise ConfigError("method", method, reason=f"the {self.tokenizer.scheme} tokenizer does not make one "
                                  "token per residue of the reference, so a residue has no token to mask",
                                  allowed="pll (re-tokenizes each variant)")
        return method

    def _per_residue(self, sequence: str) -> bool:
        return len(self.tokenizer.tokenize(sequence)) == len(sequence)

    # --- sequences ------------------------------------------------------------------------------------
    def sequence_scores(self, sequences: Sequence[str], method: str = "auto", names: Sequence[str] | None = None,
                        progress=None) -> list[SequenceScore]:
        """The (pseudo-)log-likelihood of each sequence under `method` ("auto", "causal" or "pll")."""
        method = self.resolve(method)
        contents = self.tokenizer.encode_batch(list(sequences), False, records=names, stats=self.policies)
        rows: list[Row] = []
        owners: list[int] = []
        windows = []
        for slot, (sequence, content) in enumerate(zip(sequences, contents)):
            plan = self._windows(sequence, content)
            windows.append(len(plan))
            for window in plan:
                made = self._causal_rows(content, window) if method == "causal" else self._masked_rows(content, window)
                rows.extend(made)
                owners.extend([slot] * len(made))
        totals = np.zeros(len(contents))
        scored = np.zeros(len(contents), np.int64)
        for slot, log_probs in zip(owners, row_log_probs(self.model, rows, self.options.batch_tokens, self.pad_id,
                                                         progress, self.options.packing)):
            totals[slot] += log_probs.sum()
            scored[slot] += log_probs.size
        return [SequenceScore(float(totals[i]), len(contents[i]), int(scored[i]),
                              self.tokenizer.count_residues(sequences[i]), windows[i]) for i in range(len(contents))]

    def _causal_rows(self, content: np.ndarray, window: Window) -> list[Row]:
        """One row per window: the logits at p - 1 predict the token at p."""
        ids = self._framed(content[window.start:window.end])
        at = len(self._prefix) - window.start + np.arange(window.own_start, window.own_end)
        at = at[at >= 1]
        return [Row(ids, at - 1, ids[at][:, None])] if len(at) else []

    def _masked_rows(self, content: np.ndarray, window: Window) -> list[Row]:
        """One masked copy of the window per owned token, predicting it."""
        ids = self._framed(content[window.start:window.end])
        rows = []
        for position in len(self._prefix) - window.start + np.arange(window.own_start, window.own_end):
            copy = ids.copy()
            copy[position] = self.tokenizer.mask_id
            rows.append(Row(copy, np.array([position]), ids[[position]][:, None]))
        return rows

    # --- variants -------------------------------------------------------------------------------------
    def check_reference(self, reference: str, name: str = "reference", both_strands: bool = False) -> None:
        """Refuse, before any scoring, a reference this model cannot read (a TokenizationError naming record
        `name`) and `both_strands` where there is no reverse strand: a tokenizer that reads no DNA, or a
        reference with a letter that has no complement."""
        if both_strands and self.tokenizer.kind in NOT_DNA_TOKENIZERS:
            raise ConfigError(parameter("both_strands"), True,
                              reason=f"the model's {self.tokenizer.scheme} tokenizer reads "
                              "no DNA, so a variant has no reverse strand to score (it is for DNA models)")
        self.tokenizer.encode(reference, add_special_tokens=False, record=name)
        if both_strands:
            from biotf.tokenizers.kmer import reverse_complement

            reverse_complement(reference, name)

    def window_count(self, reference: str) -> int:
        """How many windows `reference` is read in (1 when it fits the model): what a summary says of long targets."""
        return len(self._windows(reference, np.asarray(self.tokenizer.encode(reference, add_special_tokens=False))))

    def variant_scores(self, reference: str, variants: Sequence[Variant], method: str = "auto",
                       both_strands: bool = False, progress=None) -> list[VariantScore]:
        """Each variant's score against `reference` (mutations checked by `make_variant`); see the module docstring."""
        method = self.resolve(method, variants, reference)
        forward = self._variant_scores(reference, variants, method, progress)
        if not both_strands:
            return [VariantScore(score, (score,)) for score in forward]
        from biotf.tokenizers import reverse_complement

        flipped = [reverse_strand(len(reference), variant) for variant in variants]
        reverse = self._variant_scores(reverse_complement(reference, "reference"), flipped, method, progress)
        return [VariantScore((a + b) / 2, (a, b)) for a, b in zip(forward, reverse)]

    def _variant_scores(self, reference: str, variants: Sequence[Variant], method: str, progress) -> list[float]:
        if method in MARGINAL_METHODS:
            return self._marginal_scores(reference, variants, method, progress)
        sequences = {reference: 0}
        for variant in variants:
            sequences.setdefault(apply(reference, variant), len(sequences))
        names = ["reference"] + [""] * (len(sequences) - 1)
        for variant in variants:
            index = sequences[apply(reference, variant)]
            names[index] = names[index] or variant.name
        scores = self.sequence_scores(list(sequences), method, names, progress)
        return [scores[sequences[apply(reference, v)]].log_likelihood - scores[0].log_likelihood for v in variants]

    def _marginal_scores(self, reference: str, variants: Sequence[Variant], method: str, progress) -> list[float]:
        """Masked- or wt-marginal: log p(alt) - log p(wt) summed over each variant's positions, each read off the
        copy of the reference that `_masked_set` names (cached: one row per distinct set, whatever the variants)."""
        content = self.tokenizer.encode_batch([reference], False, records=["reference"], stats=self.policies)[0]
        plan = self._windows(reference, content)
        residue_ids = self._residue_ids({m.alt for v in variants for m in v.mutations} | set(reference.upper()),
                                        variants)
        for residue, token in zip(reference.upper(), content):
            if residue_ids[residue] != token:  # e.g. WordPiece: "K" alone is not the "##K" inside a word
                raise ConfigError("method", method, reason=f"the {self.tokenizer.scheme} tokenizer gives residue "
                                  f"{residue!r} another token inside the reference than alone, so log p(alt) cannot "
                                  "be read at its position", allowed="pll (re-tokenizes each variant)")
        masked = method != "wt-marginal"
        groups = sorted({_masked_set(v, m, method) for v in variants for m in v.mutations} if masked else {()})
        rows: list[Row] = []
        keys: list[tuple[tuple[int, ...], np.ndarray]] = []
        centred = method == "masked-marginal" and self.options.window == "centred" and len(plan) > 1
        for group in groups:
            positions = np.array(group, np.int64)
            if centred:
                rows.append(self._centred_row(content, int(positions[0])))
                keys.append((group, positions))
                continue
            for window in plan:
                if masked:
                    owned = positions[(positions >= window.own_start) & (positions < window.own_end)]
                else:
                    owned = np.arange(window.own_start, window.own_end)
                if not len(owned):
                    continue
                ids = self._framed(content[window.start:window.end])
                shift = len(self._prefix) - window.start
                visible = positions[(positions >= window.start) & (positions < window.end)]
                ids[visible + shift] = self.tokenizer.mask_id  # token index = residue + len(prefix) (<cls>)
                rows.append(Row(ids, owned + shift))
                keys.append((group, owned))
        log_probs: dict[tuple[tuple[int, ...], int], np.ndarray] = {}
        for (group, owned), block in zip(keys, row_log_probs(self.model, rows, self.options.batch_tokens,
                                                             self.pad_id, progress, self.options.packing)):
            log_probs.update({(group, int(p)): vector for p, vector in zip(owned, block)})
        scores = []
        for variant in variants:
            total = 0.0
            for m in variant.mutations:
                vector = log_probs[_masked_set(variant, m, method) if masked else (), m.start]
                total += vector[residue_ids[m.alt]] - vector[residue_ids[m.ref]]
            scores.append(float(total))
        return scores

    def _centred_row(self, content: np.ndarray, position: int) -> Row:
        """The reference framed by its special tokens, `position` masked, cut to the `max_length` tokens centred on
        it as ProteinGym's `get_optimal_window` cuts them (half a window either side, clamped at the ends)."""
        framed = self._framed(content)
        at, half = position + len(self._prefix), self.max_length // 2
        if at < half:
            start, end = 0, self.max_length
        elif at >= len(framed) - half:
            start, end = len(framed) - self.max_length, len(framed)
        else:
            start, end = at - half, at + half
        ids = framed[start:end].copy()
        ids[at - start] = self.tokenizer.mask_id
        return Row(ids, np.array([at - start]))

    def _residue_ids(self, residues: set[str], variants: Sequence[Variant]) -> dict[str, int]:
        """The one token id of each residue letter; a letter the tokenizer splits or refuses names its variant."""
        ids = {}
        for residue in sorted(residues):
            name = next((v.name for v in variants for m in v.mutations if residue in (m.alt, m.ref)), "reference")
            encoded = self.tokenizer.encode(residue, add_special_tokens=False, record=name)
            if len(encoded) != 1:
                raise InputError(f"variant {name!r}: residue {residue!r} is {len(encoded)} tokens for the "
                                 f"{self.tokenizer.scheme} tokenizer, not one")
            ids[residue] = encoded[0]
        return ids

    # --- tokens and windows ---------------------------------------------------------------------------
    def _framed(self, content: np.ndarray) -> np.ndarray:
        return np.concatenate([self._prefix, content, self._suffix]).astype(np.int64)

    def _windows(self, sequence: str, content: np.ndarray) -> list[Window]:
        if not len(content):
            return []  # nothing to score: log-likelihood 0 over 0 tokens
        if self._prefix is None:
            self._learn_specials(sequence, content)
        width = self.max_length - len(self._prefix) - len(self._suffix)
        overlap = self.options.overlap if self.options.overlap is not None else width // 4
        if overlap >= width:
            raise ConfigError("overlap", overlap, allowed=f"0..{width - 1} (below the window of {width} content tokens)")
        return plan_windows(len(content), width, overlap)

    def _learn_specials(self, sequence: str, content: np.ndarray) -> None:
        """The tokens the tokenizer puts around content (<cls> ... <eos>), from one sequence encoded both ways."""
        full = np.asarray(self.tokenizer.encode(sequence, True), np.int64)
        for at in range(len(full) - len(content) + 1):
            if np.array_equal(full[at:at + len(content)], content):
                break
        else:
            raise InputError(f"the {self.tokenizer.scheme} tokenizer's special tokens do not surround the content of "
                             f"{sequence[:30]!r}, so windows cannot be formed")
        self._prefix, self._suffix = full[:at], full[at + len(content):]
        if self.max_length - len(self._prefix) - len(self._suffix) < 1:
            raise ConfigError("max_length", self.max_length,
                              allowed=f"at least {len(self._prefix) + len(self._suffix) + 1} (special tokens + 1)")


def _masked_set(variant: Variant, mutation: Mutation, method: str) -> tuple[int, ...]:
    """The reference positions masked in the copy that `mutation` of `variant` is read off: its own position alone
    ("masked-marginal", ProteinGym's convention), or every position the variant mutates ("masked-marginal-joint")."""
    return (mutation.start,) if method == "masked-marginal" else tuple(m.start for m in variant.mutations)
