"""The token cache's files pinned: the same input and settings give the same entry name (key), token ids,
split assignment, order, counts, policy stats (in meta.json's order) and checksums as the builds that wrote
existing caches, so those stay valid. The figures in PINNED_RESULTS come from the cache code before issue 29's
faster build (records as columns, bulk split hashing); meta.json's CRC-32 since token ids that fit a byte are stored
as uint8 (its dtype and the tokens file's size and CRC-32 changed with them, nothing else)."""

from __future__ import annotations

import json
import random
import zlib
from pathlib import Path

import numpy as np
import pytest

from biotf.io import fasta
from biotf.data.token_cache import ShardCache, tokenize_to_cache
from biotf.tokenizers.amino_acid import AminoAcidTokenizer


def proteins() -> list[tuple[str, str, str]]:
    """(id, sequence, description) of 400 proteins of 1-300 residues, with what the reader and the tokenizer count:
    lowercase residues, rare residues, a terminal stop, repeated ids and repeated sequences."""
    rng = random.Random(29)
    records = []
    for i in range(400):
        sequence = "".join(rng.choice("ACDEFGHIKLMNPQRSTVWY") for _ in range(rng.randint(1, 300)))
        if i % 7 == 0:
            sequence = sequence.lower()
        if i % 11 == 0:
            sequence += "UOBZ"
        if i % 13 == 0:
            sequence += "*"
        if i % 17 == 0:
            sequence = "MKV"  # the same sequence, so the same split
        records.append((f"p{i % 150}", sequence, f"protein {i}"))  # repeated ids
    return records


def pinned_fasta(path: Path) -> Path:
    """`proteins` as FASTA with a byte-order mark, CRLF lines of 60 residues and a tab in some headers."""
    lines = []
    for i, (identifier, sequence, description) in enumerate(proteins()):
        lines += [f">{identifier}{chr(9) if i % 5 == 0 else ' '}{description}",
                  *(sequence[at:at + 60] for at in range(0, len(sequence), 60))]
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode() + b"\r\n")
    return path


def pinned_csv(path: Path) -> Path:
    """`proteins` as CSV, with whitespace around some fields (stripped and counted as the records are read)."""
    rows = ["id,sequence,description"] + [f"{identifier},{' ' * (i % 3)}{sequence},{description}"
                                          for i, (identifier, sequence, description) in enumerate(proteins())]
    path.write_text("\n".join(rows) + "\n")
    return path


# name: (input, tokenizer options, tokenize_to_cache options)
PINNED = {
    "default": (pinned_fasta, {"stop": "strip_terminal"}, {}),  # some proteins end with a stop codon
    "policies": (pinned_fasta, {"rare_residues": "to_x", "stop": "strip_terminal", "unknown": "to_unk"},
                 {"validation_fraction": 0.3, "seed": 7, "add_special_tokens": False, "chunk_characters": 50}),
    "csv": (pinned_csv, {"stop": "to_unk"}, {"chunk_characters": 3000}),
}


def summary(cache: ShardCache, path: Path) -> dict:
    """What pins an entry: its name's key, its policy counts in the order meta.json lists them, the records and
    tokens of each split, the CRC-32 of its files (offsets, records, counts) and of its token ids as the uint16 that
    entries held before ids that fit a byte were stored as uint8, and of meta.json less the input's path (which
    differs per run)."""
    meta_text = (cache.directory / "meta.json").read_text()
    meta = json.loads(meta_text)

    def crc32(name: str, kind: str, file: dict) -> int:
        if kind != "tokens":
            return file["crc32"]
        ids = np.fromfile(cache.directory / f"{name}.tokens.bin", meta["dtype"])
        assert zlib.crc32(ids.tobytes()) == file["crc32"]
        return zlib.crc32(ids.astype(np.uint16).tobytes())

    return {"key": cache.directory.name.rsplit("-", 1)[1], "policy_stats": list(meta["policy_stats"].items()),
            "splits": {name: (split["records"], split["tokens"],
                              *(crc32(name, kind, file) for kind, file in split["files"].items()))
                       for name, split in meta["splits"].items()},
            "meta_crc32": zlib.crc32(meta_text.replace(json.dumps(str(path)), '"<input>"').encode())}


PINNED_RESULTS = {
    "default": {"key": "36592c1ba86b10275d38f6e1", "meta_crc32": 3783862792,
        "policy_stats": [("byte_order_mark_stripped", 1), ("duplicate_ids", 250), ("stop_stripped", 29),
                         ("lowercase_folded", 9579)],
        "splits": {"train": (382, 56565, 2406987690, 3896253354, 3009633494, 1608616769),
                   "validation": (18, 3110, 1211533851, 2154231691, 2476206214, 2795520115)}},
    "policies": {"key": "f68003b3494da713d2e1f64d", "meta_crc32": 1099391275,
        "policy_stats": [("byte_order_mark_stripped", 1), ("lowercase_folded", 9579), ("rare_to_X", 136),
                         ("stop_stripped", 29), ("duplicate_ids", 250)],
        "splits": {"train": (290, 40522, 3000235094, 873225530, 981982052, 2233356458),
                   "validation": (110, 18353, 3176791932, 2730016073, 447959938, 824483236)}},
    "csv": {"key": "cc3a52b9822f85cf46fe9aea", "meta_crc32": 1421045993,
        "policy_stats": [("whitespace_stripped", 266), ("lowercase_folded", 9579), ("stop_to_unk", 29),
                         ("duplicate_ids", 250)],
        "splits": {"train": (382, 56591, 1517555398, 1235058538, 3009633494, 1540287459),
                   "validation": (18, 3113, 1611953005, 4105410680, 2476206214, 2788708452)}},
}


@pytest.mark.parametrize("block", [64, fasta.BLOCK_CHARACTERS])
@pytest.mark.parametrize("name", PINNED)
def test_the_cache_of_the_same_input_and_settings_is_the_one_existing_caches_hold(tmp_path, monkeypatch, name, block):
    """FASTA read in blocks of 64 characters too: runs of records cut anywhere give the same entry."""
    monkeypatch.setattr(fasta, "BLOCK_CHARACTERS", block)
    make, tokenizer_options, options = PINNED[name]
    path = make(tmp_path / f"pinned.{'csv' if make is pinned_csv else 'fasta'}")
    cache = tokenize_to_cache(path, AminoAcidTokenizer(**tokenizer_options), tmp_path / "cache", **options)
    assert summary(cache, path) == PINNED_RESULTS[name]
