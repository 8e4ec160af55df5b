"""The data layer with the real tokenizers on the real shared files (issue 4's experiments' data)."""

from __future__ import annotations

import numpy as np
import pytest
from torch.utils.data import DataLoader

from biotf.data import LengthGroupedBatchSampler, MLMCollator, prepare_dataset
from biotf.io.readers import ReaderOptions
from biotf.errors import TokenizationError
from biotf.model.loss import IGNORE_INDEX
from biotf.tokenizers import AminoAcidTokenizer, BPETokenizer, KmerTokenizer, SmilesTokenizer
from biotf.tokenizers.smiles import REGEX_TOKENS


def test_protein_mlm_on_deeploc(shared_data, tmp_path):
    tokenizer = AminoAcidTokenizer()
    path = shared_data / "proteins/deeploc_our_val_set.fasta"  # holds the 13,100-residue protein
    prepared = prepare_dataset(path, tokenizer, tmp_path, validation_fraction=0.1, max_length=512)
    assert len(prepared.shards["train"]) + len(prepared.shards["validation"]) == 1678
    longest = max(shard.lengths.max() for shard in prepared.shards.values())
    assert longest == 13_102  # <cls> + 13,100 residues + <eos>, stored whole; cropping happens per item
    assert sum(s.cropped for s in prepared.long_sequences.values()) > 100
    loader = DataLoader(prepared.train, collate_fn=MLMCollator(tokenizer),
                        batch_sampler=LengthGroupedBatchSampler(prepared.train.lengths, 32, seed=0))
    batch = next(iter(loader))
    selected = batch["labels"] != IGNORE_INDEX
    assert not (batch["labels"][selected] == tokenizer.mask_id).any()
    assert 2.8 < prepared.unigram_baseline() < 3.0  # residue entropy is just under log(20) = 3.0


def test_overlapping_kmer_spans_with_the_real_tokenizer(shared_data, tmp_path):
    tokenizer = KmerTokenizer(k=6, stride=1)
    options = ReaderOptions(column="sequence", id_column="instance_name")
    prepared = prepare_dataset(shared_data / "dna/uci_splice.csv", tokenizer, tmp_path, reader_options=options,
                               max_length=64)
    batch = MLMCollator(tokenizer)([prepared.train[i] for i in range(64)])
    selected = (batch["labels"] != IGNORE_INDEX).numpy()
    runs = np.diff(np.concatenate([np.zeros((64, 1)), selected, np.zeros((64, 1))], axis=1).astype(int), axis=1)
    lengths = np.flatnonzero(runs == -1) - np.flatnonzero(runs == 1)
    assert np.median(lengths) >= 6  # whole 6-token spans: no masked k-mer has an unmasked overlapping neighbour
    assert prepared.policy_stats["iupac_to_N"] == 4  # D x2, R, S become N, counted


def test_smiles_error_names_file_record_and_position(shared_data, tmp_path):
    tokenizer = SmilesTokenizer(vocab=REGEX_TOKENS)  # the regex's pieces alone: no '[nH]'
    with pytest.raises(TokenizationError, match=r"molnet_esol\.csv, record '\w+', position \d+"):
        prepare_dataset(shared_data / "smiles/molnet_esol.csv", tokenizer, tmp_path,
                        reader_options=ReaderOptions(column="smiles"))
    assert [p.name for p in tmp_path.iterdir()] == []  # nothing half-written is left


def test_text_clm_with_bpe(shared_data, tmp_path):
    corpus = tmp_path / "shakespeare.txt"
    corpus.write_text("\n".join((shared_data / "text/tinyshakespeare_input.txt").read_text().splitlines()[:2000]))
    tokenizer = BPETokenizer.train([str(corpus)], vocab_size=400, special_tokens=["<pad>", "<eos>", "<unk>"])
    prepared = prepare_dataset(corpus, tokenizer, tmp_path / "cache", max_length=128, objective="clm")
    block = prepared.train[0]
    assert block["input_ids"].shape == (128,)
    stream = block["input_ids"].tolist()
    first_line = next(line for line in corpus.read_text().splitlines() if line.strip())
    assert tokenizer.decode(stream[:stream.index(tokenizer.eos_id)]) == first_line
    assert prepared.policy_stats["blank_lines_skipped"] > 0
