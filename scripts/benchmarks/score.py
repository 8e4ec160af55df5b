"""Zero-shot scoring benchmark (issue 18): pseudo-log-likelihood throughput against the plain transformers loop.

positions/s of `Scorer.sequence_scores(..., "pll")` (every masked copy of a protein packed into batches of
<= 16384 padded tokens, `torch.inference_mode`) against the loop users port from fair-esm to HF: for each
position, mask it, one `EsmForMaskedLM` forward of batch 1 under `torch.no_grad`, log_softmax, read the true
token. Both sides run the same random ESM-2 8M-shaped checkpoint (320 wide, 6 layers, rotary, token dropout):
HF from the object, biotf from the directory `save_pretrained` wrote, loaded by `biotf.Model.load`. The
two PLLs are checked to agree (1e-3 nats) first, which also warms both sides up. Target >= 3x.

Packing (`--packing`, issue 29): real (scored) positions/s of biotf packed against biotf padded, on one thread, over
DeepLoc proteins (`packing.py`'s sample: /work/shared's test set, else the shipped sample) with a random
protein-small model (4 x 128, rotary, 512 positions): PLL over proteins shorter than 150 residues (its cost grows
with the square of the length), causal log-likelihood over the whole length distribution (long ones in windows).
Both sides are checked to agree (1e-4 nats per record) first; the pad share of each side's forwards is printed.

Variants (issue 48): variants/s of ProteinGym's masked marginals (`Scorer.variant_scores(..., "masked-marginal")`)
on the real assay BLAT_ECOLX_Jacquier_2013 (989 single mutants of TEM-1, 286 residues; ../shared, `--quick`: those
at positions <= 80) against the plain loop ProteinGym's `compute_fitness.py` runs, limited to the same work: for each
distinct mutated position, mask it in the wild type, one `EsmForMaskedLM` forward of batch 1 under `torch.no_grad`,
log_softmax; then each variant sums log p(alt) - log p(wt) over its mutations. Same ESM-2 8M-shaped checkpoint on
both sides; the scores are checked to agree (1e-4 nats) first.
"""

from __future__ import annotations

import tempfile

import numpy as np
import torch

RESIDUES = np.array(list("ACDEFGHIKLMNPQRSTVWY"))


def esm_checkpoint(directory: str):
    """A random EsmForMaskedLM of ESM-2 8M's shape with ESM-2's vocabulary, saved as a hub download is."""
    from pathlib import Path

    from transformers import EsmConfig, EsmForMaskedLM, EsmTokenizer
    from transformers.models.esm.configuration_esm import get_default_vocab_list

    torch.manual_seed(0)
    config = EsmConfig(vocab_size=33, hidden_size=320, num_hidden_layers=6, num_attention_heads=20,
                       intermediate_size=1280, max_position_embeddings=1026, position_embedding_type="rotary",
                       pad_token_id=1, mask_token_id=32, token_dropout=True, emb_layer_norm_before=False)
    model = EsmForMaskedLM._from_config(config, attn_implementation="sdpa", dtype=torch.float32).eval()
    model.save_pretrained(directory)
    vocab = Path(directory) / "source-vocab.txt"
    vocab.write_text("\n".join(get_default_vocab_list()) + "\n")
    tokenizer = EsmTokenizer(str(vocab))
    tokenizer.save_pretrained(directory)
    vocab.unlink()
    return model, tokenizer


def hf_pll(model, tokenizer, sequences: list[str]) -> list[float]:
    """The plain loop: one masked copy per forward."""
    totals = []
    with torch.no_grad():
        for sequence in sequences:
            ids = tokenizer(sequence, return_tensors="pt")["input_ids"]
            total = 0.0
            for i in range(1, ids.shape[1] - 1):
                masked = ids.clone()
                masked[0, i] = tokenizer.mask_token_id
                logits = model(input_ids=masked).logits
                total += torch.log_softmax(logits[0, i], -1)[ids[0, i]].item()
            totals.append(total)
    return totals


def hf_masked_marginals(model, tokenizer, wild_type: str, mutants: list[str]) -> list[float]:
    """The plain loop: one masked copy of the wild type per distinct mutated position, batch 1, then label_row."""
    ids = tokenizer(wild_type, return_tensors="pt")["input_ids"]
    positions = sorted({int(part[1:-1]) for mutant in mutants for part in mutant.split(":")})
    table = {}
    with torch.no_grad():
        for position in positions:
            masked = ids.clone()
            masked[0, position] = tokenizer.mask_token_id  # 1-based residue = token index after <cls>
            table[position] = torch.log_softmax(model(input_ids=masked).logits[0, position], -1)
    token = tokenizer.convert_tokens_to_ids
    return [sum((table[int(p[1:-1])][token(p[-1])] - table[int(p[1:-1])][token(p[0])]).item()
                for p in mutant.split(":")) for mutant in mutants]


def blat_assay(quick: bool) -> tuple[str, list[str]]:
    """TEM-1's wild type and the mutants of ProteinGym's BLAT_ECOLX_Jacquier_2013 (../shared)."""
    import gzip
    from pathlib import Path

    folder = Path(__file__).resolve().parents[3] / "shared" / "data" / "proteins" / "proteingym"
    wild_type = "".join((folder / "BLAT_ECOLX_wt.fasta").read_text().splitlines()[1:])
    with gzip.open(folder / "BLAT_ECOLX_Jacquier_2013.csv.gz", "rt") as handle:
        mutants = [line.split(",", 1)[0] for line in handle.read().splitlines()[1:]]
    return wild_type, [m for m in mutants if not quick or int(m[1:-1]) <= 80]


def run_variants(bench, quick: bool, hf, hf_tokenizer, scorer) -> None:
    from biotf.scoring import make_variant, parse_code

    wild_type, mutants = blat_assay(quick)
    variants = [make_variant(wild_type, parse_code(code), code) for code in mutants]
    ours = [s.score for s in scorer.variant_scores(wild_type, variants, "masked-marginal")]
    theirs = hf_masked_marginals(hf, hf_tokenizer, wild_type, mutants)
    assert np.allclose(ours, theirs, atol=1e-4), max(abs(a - b) for a, b in zip(ours, theirs))
    positions = len({v.mutations[0].start for v in variants})
    bench.compare(f"masked marginals of {len(variants)} BLAT_ECOLX_Jacquier_2013 variants ({positions} positions, "
                  f"{len(wild_type)} aa), ESM-2 8M shape",
                  lambda: scorer.variant_scores(wild_type, variants, "masked-marginal"),
                  lambda: hf_masked_marginals(hf, hf_tokenizer, wild_type, mutants),
                  anchor_name="HF EsmForMaskedLM loop (one masked position per forward, ProteinGym's)",
                  unit="variants", work=len(variants), repeats=3, warmup=0)


def pad_share(scorer, sequences: list[str], method: str) -> float:
    """The share of pad tokens in the forwards of one `sequence_scores` call."""
    seen = {"tokens": 0, "real": 0}

    def count(module, args, kwargs):
        ids = args[0]
        mask = kwargs.get("segment_ids", kwargs.get("attention_mask"))
        seen["tokens"] += ids.numel()
        seen["real"] += ids.numel() if mask is None else int((mask != 0).sum())

    handle = scorer.model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        scorer.sequence_scores(sequences, method)
    finally:
        handle.remove()
    return 1 - seen["real"] / seen["tokens"]


def run_packing(bench, quick: bool) -> None:
    from biotf.model import Transformer, TransformerConfig
    from biotf.scoring import ScoreOptions, Scorer
    from biotf.tokenizers import build_tokenizer

    tokenizer = build_tokenizer({"kind": "protein"})
    deeploc = bench.section("packing").deeploc_sequences(1024)  # one DeepLoc sample for every section
    cases = (("pll", False, [s for s in deeploc if len(s) < 150][:8 if quick else 32]),
             ("causal", True, deeploc[:48 if quick else 256]))
    for method, causal, sequences in cases:
        config = TransformerConfig.preset("protein-small").for_tokenizer(tokenizer.vocab_size, tokenizer.mask_id)
        torch.manual_seed(0)
        model = Transformer(config.replace(causal=causal)).eval()
        packed, padded = (Scorer(model, tokenizer, ScoreOptions(packing=packing)) for packing in (True, False))
        ours = [s.log_likelihood for s in packed.sequence_scores(sequences, method)]
        theirs = [s.log_likelihood for s in padded.sequence_scores(sequences, method)]
        assert np.allclose(ours, theirs, rtol=0, atol=1e-4), max(abs(a - b) for a, b in zip(ours, theirs))
        positions = sum(len(s) for s in sequences)
        lengths = sorted(len(s) for s in sequences)
        bench.record(f"{method} pad share, packed / padded", pad_share(packed, sequences, method), "fraction",
                     note=f"padded: {pad_share(padded, sequences, method):.4f}")
        bench.compare(f"{method} of {len(sequences)} DeepLoc proteins ({lengths[0]}-{lengths[-1]} aa, median "
                      f"{lengths[len(lengths) // 2]}), protein-small, one thread: packed rows",
                      lambda: packed.sequence_scores(sequences, method),
                      lambda: padded.sequence_scores(sequences, method), anchor_name="biotf padded (length-sorted)",
                      unit="positions", work=positions, repeats=3, warmup=0)


def run(bench, quick: bool) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_packing(bench, quick)
    finally:
        torch.set_num_threads(threads)
    from biotf import Model
    from biotf.scoring import Scorer

    rng = np.random.default_rng(0)
    lengths = [60] if quick else [80, 160]
    sequences = ["".join(rng.choice(RESIDUES, n)) for n in lengths]
    with tempfile.TemporaryDirectory(prefix="biotf-bench-score-") as directory:
        hf, hf_tokenizer = esm_checkpoint(directory)
        scorer = Scorer.of(Model.load(directory))
    ours = [s.log_likelihood for s in scorer.sequence_scores(sequences, "pll")]  # also the warm-up of both sides
    theirs = hf_pll(hf, hf_tokenizer, sequences)
    assert np.allclose(ours, theirs, atol=1e-3), (ours, theirs)
    bench.compare(f"PLL of {len(sequences)} random proteins ({', '.join(map(str, lengths))} aa), ESM-2 8M shape",
                  lambda: scorer.sequence_scores(sequences, "pll"), lambda: hf_pll(hf, hf_tokenizer, sequences),
                  anchor_name="HF EsmForMaskedLM loop (one masked position per forward)", unit="positions",
                  work=sum(lengths), repeats=3, warmup=0, target=3.0)
    run_variants(bench, quick, hf, hf_tokenizer, scorer)
