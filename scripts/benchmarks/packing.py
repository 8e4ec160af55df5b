"""Packing section: real (non-pad) tokens per second, packed rows against padded batches, on one thread (with
`--device cuda` the models and batches on the GPU, the clock stopped after its queued work).

Two length distributions: DeepLoc's proteins (data/proteins/deeploc_test_set.fasta in /work/shared, else the
DeepLoc sample shipped with biotf) and a UniRef-like log-normal one (median ~250 residues, random residues).
Sides, each over the same records, timed in rotating order so that machine drift hits all alike:
- biotf packed: `PackedBatchSampler` rows of max_length (first-fit decreasing), segment ids;
- biotf padded: `LengthGroupedBatchSampler` batches, as training does without packing;
- biotf packed with the block-diagonal mask: the same rows with their records never attended apart
  (`Transformer.segment_call_cost = None`), what packing cost before they were;
- biotf padded in input order (training only): batches of consecutive records, what a loop without length grouping
  gets (embedding has no such user: `Embedder` always sorts a block's windows by length);
- transformers `EsmForMaskedLM` / `EsmModel` of the same shape (protein-small: rotary, 4 x 128, sdpa), on the same
  length-grouped padded batches as biotf padded.
MLM training: the default run's shape (max_length 256, batch_size 16 rows or records), fused loss + backward +
AdamW step. Embedding: mean pooling, records cut to the model's 512 positions (no chunking on any side), batches of
16,384 padded tokens (biotf's default; HF batches the length-sorted records the same way).
Targets (issue #29): packed >= 1.5x padded biotf and >= 2x transformers. Next to packed vs padded biotf the section
prints what removing padding alone could give: 1/(1 - the padded batches' pad share) if packed rows had no padding,
(1 - packed rows' pad share)/(1 - padded batches') for the rows it packs; more than that must come from attention
(a record attends to itself alone: sum(l^2) scores instead of a padded batch's rows x longest^2).
CLM training, what document masking costs: `PackedBlockDataset` blocks with `document_masking` (`data.packing: true`:
`<eos> record <eos>`, segment ids) against the concatenated blocks (records joined by `<eos>`, attention across
them), the smiles_clm experiment's shape (protein-small made causal, blocks of 128, 16 a batch) on MOSES SMILES, and
blocks of 256 on DeepLoc proteins; tokens/s counts the records' own tokens, the same on both sides, so the extra
`<eos>` per record is part of the cost.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

SHARED_DEEPLOC = Path("/work/shared/data/proteins/deeploc_test_set.fasta")
RESIDUES = np.array(list("ACDEFGHIKLMNPQRSTVWY"))
MAX_LENGTH, BATCH = 256, 16
EMBED_LENGTH, BATCH_TOKENS = 512, 16384


def deeploc_sequences(n: int) -> list[str]:
    from biotf.io.readers import read_records
    from biotf.conventions import SAMPLES_DIR

    path = SHARED_DEEPLOC if SHARED_DEEPLOC.exists() else SAMPLES_DIR / "deeploc_our_val_set.fasta"
    sequences = [record.sequence for record in read_records(path)]
    picked = np.random.default_rng(0).choice(len(sequences), n, replace=False)
    return [sequences[i] for i in picked]


def lognormal_sequences(n: int) -> list[str]:
    rng = np.random.default_rng(1)
    lengths = np.clip(np.round(rng.lognormal(np.log(250), 0.6, n)), 20, 4000).astype(int)
    return ["".join(rng.choice(RESIDUES, length)) for length in lengths]


def on(device: str, batch: dict) -> dict:
    """A collated batch's tensors on `device` (moved before the clock starts)."""
    return {key: value.to(device) for key, value in batch.items()}


def models(device: str = "cpu"):
    import torch
    import transformers

    from biotf.model import Transformer, TransformerConfig
    from biotf.tokenizers import build_tokenizer

    tokenizer = build_tokenizer({"kind": "protein"})
    config = TransformerConfig.preset("protein-small").for_tokenizer(tokenizer.vocab_size, tokenizer.mask_id)
    torch.manual_seed(0)
    ours = Transformer(config)
    hf_config = transformers.EsmConfig(
        vocab_size=config.vocab_size, hidden_size=config.d_model, num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads, intermediate_size=config.d_ff, position_embedding_type="rotary",
        max_position_embeddings=config.max_seq_len + 2, layer_norm_eps=config.norm_eps, pad_token_id=tokenizer.pad_id,
        mask_token_id=tokenizer.mask_id, token_dropout=False, emb_layer_norm_before=False, attn_implementation="sdpa")
    return tokenizer, ours.to(device), transformers.EsmForMaskedLM(hf_config).to(device)


def rotate(bench, name: str, sides: dict, work: float, repeats: int, pad_shares: dict[str, float] | None = None
           ) -> None:
    """Time every side once per round, the order rotating each round; report packed against each other side, and
    against padded biotf the bound of removing padding alone (`pad_shares`: "packed" and "padded", fractions; needed
    where a side is "biotf padded")."""
    seconds = bench.rotated(sides, repeats)
    packed, *others = list(sides)
    targets = {"biotf padded": 1.5, "transformers": 2.0}
    for other in others:
        comparison = bench.add(f"{name}: {packed} vs {other}", "real tokens", work, seconds[packed], seconds[other],
                               anchor_name=other, target=targets.get(other.split(" (")[0]))
        if other == "biotf padded":
            bound = 1 / (1 - pad_shares["padded"])
            bench.record(f"{name}: padding bound of packed vs biotf padded, 1/(1 - padded pad share)", bound, "x",
                         note=f"measured {comparison.ratio:.2f}x; with packed rows' own pad share "
                              f"{pad_shares['packed']:.3f}: {bound * (1 - pad_shares['packed']):.3f}x")


def sorted_batches(encoded: list) -> list[list]:
    """Length-sorted token id lists cut as `Embedder` cuts its windows without packing: each batch as many rows of
    its longest as fit BATCH_TOKENS (one at least)."""
    batches, start = [], 0
    while start < len(encoded):
        rows = max(1, BATCH_TOKENS // len(encoded[start]))
        batches.append(encoded[start:start + rows])
        start += rows
    return batches


def with_mask(model, fn):
    """`fn` with packed rows' records never attended apart: attention through the block-diagonal mask."""
    def run():
        cost, model.segment_call_cost = model.segment_call_cost, None
        try:
            return fn()
        finally:
            model.segment_call_cost = cost
    return run


def padding_fraction(batches: list[dict], key: str) -> float:
    real = sum(int((batch[key] != 0).sum()) for batch in batches)
    return 1 - real / sum(batch["input_ids"].numel() for batch in batches)


def training(bench, label: str, sequences: list[str], repeats: int) -> None:
    import torch

    from biotf.data.collators import MLMCollator
    from biotf.data.datasets import LengthGroupedBatchSampler
    from biotf.data.packing import PackedBatchSampler
    from biotf.model.loss import language_model_loss

    tokenizer, ours, theirs = models(bench.device)
    encoded = [ids[:MAX_LENGTH] for ids in tokenizer.encode_batch(sequences)]  # crop, as long_policy crop does
    items = [{"input_ids": np.asarray(ids, np.int64), "seed": (0, 0, i)} for i, ids in enumerate(encoded)]
    lengths = np.array([len(ids) for ids in encoded])
    padded_collate = MLMCollator(tokenizer)
    packed_collate = MLMCollator(tokenizer, pack_length=MAX_LENGTH)
    padded = [on(bench.device, padded_collate([items[i] for i in batch]))
              for batch in LengthGroupedBatchSampler(lengths, BATCH)]
    packed = [on(bench.device, packed_collate([items[i] for i in batch]))
              for batch in PackedBatchSampler(lengths, BATCH, MAX_LENGTH)]
    in_order = [on(bench.device, padded_collate(items[i:i + BATCH])) for i in range(0, len(items), BATCH)]
    pad_shares = {"packed": padding_fraction(packed, "segment_ids"),
                  "padded": padding_fraction(padded, "attention_mask")}
    bench.record(f"{label} training: pad share, packed rows | length-grouped batches | batches in input order",
                 pad_shares["packed"], "fraction",
                 note=f"length-grouped {pad_shares['padded']:.3f}, input order "
                      f"{padding_fraction(in_order, 'attention_mask'):.3f}; {len(packed)} packed vs "
                      f"{len(padded)} padded steps for {len(items)} records")
    optimizers = {id(m): torch.optim.AdamW(m.parameters(), lr=1e-4) for m in (ours, theirs)}

    def step(model, loss):
        loss.backward()
        optimizers[id(model)].step()
        optimizers[id(model)].zero_grad(set_to_none=True)

    def biotf(batches):
        for batch in batches:
            step(ours, language_model_loss(ours, batch["input_ids"], batch["labels"], batch.get("attention_mask"),
                                           fused=True, segment_ids=batch.get("segment_ids")).loss)

    def hf():
        for batch in padded:
            step(theirs, theirs(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                labels=batch["labels"]).loss)

    rotate(bench, f"{label} MLM training step (protein-small, max_length {MAX_LENGTH}, {BATCH} rows)",
           {"biotf packed": lambda: biotf(packed), "biotf padded": lambda: biotf(padded),
            "biotf packed with the block-diagonal mask": with_mask(ours, lambda: biotf(packed)),
            "biotf padded in input order": lambda: biotf(in_order),
            "transformers (EsmForMaskedLM sdpa, padded)": hf}, float(lengths.sum()), repeats, pad_shares)


def embedding(bench, label: str, sequences: list[str], repeats: int) -> None:
    import torch

    from biotf.data.packing import first_fit_decreasing
    from biotf.io.readers import Record
    from biotf.export import Embedder, EmbedOptions

    tokenizer, ours, theirs = models(bench.device)
    trunk = theirs.esm.eval()
    sequences = [s[:EMBED_LENGTH - 2] for s in sequences]
    records = [Record(f"p{i}", s, {}, i) for i, s in enumerate(sequences)]
    encoded = sorted(tokenizer.encode_batch(sequences), key=len, reverse=True)
    packed = Embedder(ours, tokenizer, EmbedOptions(packing=True, batch_tokens=BATCH_TOKENS))
    padded = Embedder(ours, tokenizer, EmbedOptions(batch_tokens=BATCH_TOKENS))

    def hf():
        with torch.inference_mode():
            for batch in sorted_batches(encoded):
                ids = torch.full((len(batch), len(batch[0])), tokenizer.pad_id, dtype=torch.long)
                mask = torch.zeros_like(ids)
                for row, sequence in enumerate(batch):
                    ids[row, :len(sequence)], mask[row, :len(sequence)] = torch.from_numpy(np.asarray(sequence)), 1
                ids, mask = ids.to(bench.device), mask.to(bench.device)
                hidden = trunk(input_ids=ids, attention_mask=mask).last_hidden_state
                (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)

    real = float(sum(len(ids) for ids in encoded))
    padded_tokens = sum(len(batch) * len(batch[0]) for batch in sorted_batches(encoded))
    rows = first_fit_decreasing(np.array([len(ids) for ids in encoded]), len(encoded[0]))
    widths = [sum(len(encoded[i]) for i in row) for row in rows]  # a batch is as wide as its fullest row
    per_batch = max(1, BATCH_TOKENS // len(encoded[0]))
    packed_tokens = sum(len(widths[i:i + per_batch]) * max(widths[i:i + per_batch])
                        for i in range(0, len(widths), per_batch))
    pad_shares = {"packed": 1 - real / packed_tokens, "padded": 1 - real / padded_tokens}
    rotate(bench, f"{label} embedding (protein-small, mean pool, {BATCH_TOKENS} tokens a batch)",
           {"biotf packed": lambda: list(packed.embed(records)), "biotf padded": lambda: list(padded.embed(records)),
            "biotf packed with the block-diagonal mask": with_mask(ours, lambda: list(packed.embed(records))),
            "transformers (EsmModel sdpa, padded)": hf}, real, repeats, pad_shares)


def causal_training(bench, label: str, sequences: list[str], tokenizer, block: int, repeats: int) -> None:
    import torch

    from biotf.data.token_cache import TokenShard
    from biotf.data.datasets import PackedBlockDataset
    from biotf.model import Transformer, TransformerConfig
    from biotf.model.loss import language_model_loss

    encoded = tokenizer.encode_batch(sequences, add_special_tokens=False)  # as prepare_dataset does for CLM
    tokens = np.concatenate([np.asarray(ids, np.int64) for ids in encoded])
    offsets = np.concatenate([[0], np.cumsum([len(ids) for ids in encoded])])
    shard = TokenShard(tokens, offsets, np.arange(len(encoded)), np.bincount(tokens))
    config = TransformerConfig.preset("protein-small", causal=True, max_seq_len=block).for_tokenizer(
        tokenizer.vocab_size, tokenizer.mask_id)
    torch.manual_seed(0)
    model = Transformer(config).to(bench.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def batches(document_masking: bool) -> list[dict]:
        dataset = PackedBlockDataset(shard, block, tokenizer.eos_id, tokenizer.pad_id, document_masking)
        items = [dataset[i] for i in range(len(dataset))]
        return [on(bench.device, {key: torch.stack([item[key] for item in items[i:i + BATCH]]) for key in items[0]})
                for i in range(0, len(items), BATCH)]

    def train(blocks: list[dict]) -> None:
        for batch in blocks:
            language_model_loss(model, batch["input_ids"], batch["labels"], batch.get("attention_mask"), fused=True,
                                segment_ids=batch.get("segment_ids")).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    masked, concatenated = batches(True), batches(False)
    rows = sum(len(batch["input_ids"]) for batch in masked), sum(len(batch["input_ids"]) for batch in concatenated)
    bench.record(f"{label} CLM blocks of {block}: document-masked / concatenated", rows[0] / rows[1], "ratio",
                 note=f"{rows[0]} vs {rows[1]} blocks for {len(encoded)} records of {len(tokens)} tokens "
                      f"(mean {len(tokens) / len(encoded):.1f})")
    rotate(bench, f"{label} CLM training step (protein-small causal, blocks of {block}, {BATCH} a batch)",
           {"document-masked blocks": lambda: train(masked), "concatenated blocks": lambda: train(concatenated)},
           float(len(tokens)), repeats)


def smiles_sequences(n: int) -> list[str]:
    from biotf.io.readers import ReaderOptions, read_records
    from biotf.conventions import SAMPLES_DIR

    records = read_records(SAMPLES_DIR / "moses_train_head20k.csv.gz", ReaderOptions(column="SMILES"))
    return [record.sequence for record, _ in zip(records, range(n))]


def run(bench, quick: bool) -> None:
    import torch

    from biotf.tokenizers import build_tokenizer

    torch.set_num_threads(1)
    bench.record("load average at start (1 min)", os.getloadavg()[0], "", note=f"{os.cpu_count()} CPUs, one thread")
    n_train, n_embed, repeats = (96, 192, 2) if quick else (384, 768, 5)
    for label, source in (("DeepLoc", deeploc_sequences), ("log-normal", lognormal_sequences)):
        training(bench, label, source(n_train), repeats)
        embedding(bench, label, source(n_embed), repeats)
    smiles = smiles_sequences(n_embed * 4)
    causal_training(bench, "MOSES SMILES", smiles, build_tokenizer({"kind": "smiles"}, texts=smiles), 128, repeats)
    causal_training(bench, "DeepLoc", deeploc_sequences(n_train), build_tokenizer({"kind": "protein"}), MAX_LENGTH,
                    repeats)
    bench.record("load average at end (1 min)", os.getloadavg()[0], "")
