"""`biotf contacts`: HF's `EsmForMaskedLM.predict_contacts` per protein, in .npz, .tsv and CASP RR, with every
refusal (no contact head, too long, not one token per residue, repeated id) one line before the output is touched."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from biotf.cli import main

PROTEINS = {"P1": "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ", "P2": "MSTNPKPQRKTKRNTNRRPQDVKFPGG", "P3": "MAW"}
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def esm_with_head(tmp_path_factory, random_esm, save_esm):
    """(directory, model): a tiny random ESM-2 whose contact regression is wide enough to matter."""
    model = random_esm(seed=7, query_key_std=0.3)
    with torch.no_grad():
        model.esm.contact_head.regression.weight.normal_(0.0, 2.0)
    return save_esm(model, tmp_path_factory.mktemp("esm-contacts")), model


def write_fasta(path, proteins=PROTEINS):
    path.write_text("".join(f">{name} a description\n{sequence}\n" for name, sequence in proteins.items()))
    return path


def hf_maps(model, directory) -> dict[str, np.ndarray]:
    import transformers

    tokenizer = transformers.EsmTokenizer.from_pretrained(directory)
    encoded = tokenizer(list(PROTEINS.values()), padding=True, return_tensors="pt")
    model.set_attn_implementation("eager")
    with torch.no_grad():
        maps = model.predict_contacts(encoded["input_ids"], encoded["attention_mask"])
    return {name: maps[row, :len(seq), :len(seq)].numpy() for row, (name, seq) in enumerate(PROTEINS.items())}


def contacts(capsys, *arguments) -> tuple[int, str]:
    status = main(["contacts", *map(str, arguments)])
    return status, capsys.readouterr().err


def test_npz_holds_hf_s_map_per_protein_and_the_sequences(esm_with_head, tmp_path, capsys):
    directory, model = esm_with_head
    output = tmp_path / "contacts.npz"
    status, err = contacts(capsys, "--model", directory, "--input", write_fasta(tmp_path / "p.fasta"),
                           "--output", output, "--batch-pairs", 2000)  # several batches
    assert status == 0, err
    assert "3 proteins, 63 residues" in err
    with np.load(output, allow_pickle=False) as saved:
        assert saved["ids"].tolist() == list(PROTEINS) and saved["sequences"].tolist() == list(PROTEINS.values())
        for name, reference in hf_maps(model, directory).items():
            ours = saved[f"contacts/{name}"]
            assert ours.dtype == np.float32 and ours.shape == reference.shape
            assert np.abs(ours - reference).max() <= TOLERANCE


def test_tsv_is_every_pair_i_below_j_numbered_from_one(esm_with_head, tmp_path, capsys):
    directory, model = esm_with_head
    output = tmp_path / "contacts.tsv"
    fasta = write_fasta(tmp_path / "p.fasta")
    status, err = contacts(capsys, "--model", directory, "--input", fasta, "--output", output)
    assert status == 0, err
    lines = output.read_text().splitlines()
    assert lines[0] == "id\ti\tj\tprobability"
    rows = [line.split("\t") for line in lines[1:]]
    assert len(rows) == sum(len(s) * (len(s) - 1) // 2 for s in PROTEINS.values())
    reference = hf_maps(model, directory)
    for name, i, j, probability in rows:
        i, j = int(i), int(j)
        assert 1 <= i < j <= len(PROTEINS[name])
        assert abs(float(probability) - reference[name][i - 1, j - 1]) <= TOLERANCE
    assert [row[:3] for row in rows[:3]] == [["P1", "1", "2"], ["P1", "1", "3"], ["P1", "1", "4"]]


def test_rr_is_one_casp_block_per_protein_most_probable_first(esm_with_head, tmp_path, capsys):
    directory, model = esm_with_head
    output = tmp_path / "contacts.rr"
    fasta = write_fasta(tmp_path / "p.fasta")
    status, err = contacts(capsys, "--model", directory, "--input", fasta, "--output", output)
    assert status == 0, err
    blocks = output.read_text().split("END\n")
    assert blocks[-1] == "" and len(blocks) == len(PROTEINS) + 1
    reference = hf_maps(model, directory)
    for block, (name, sequence) in zip(blocks, PROTEINS.items()):
        lines = block.splitlines()
        assert lines[:2] == ["PFRMAT RR", f"TARGET {name}"] and "MODEL 1" in lines
        body = lines[lines.index("MODEL 1") + 1:]
        assert body[0] == sequence
        contacts_ = [line.split() for line in body[1:]]
        assert len(contacts_) == len(sequence) * (len(sequence) - 1) // 2
        probabilities = [float(p) for *_, p in contacts_]
        assert probabilities == sorted(probabilities, reverse=True)
        for i, j, d1, d2, p in contacts_:
            assert (d1, d2) == ("0", "8") and int(i) < int(j)
            assert abs(float(p) - reference[name][int(i) - 1, int(j) - 1]) <= TOLERANCE


def refused(capsys, tmp_path, model, proteins, pattern, output_name="contacts.npz"):
    output = tmp_path / output_name
    status, err = contacts(capsys, "--model", model, "--input", write_fasta(tmp_path / "p.fasta", proteins),
                           "--output", output)
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert pattern in err, err
    assert not output.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".contacts")]


def test_a_model_without_a_contact_head_is_refused_in_one_line(pretrained, tmp_path, capsys):
    refused(capsys, tmp_path, pretrained / "base", PROTEINS, "this model has no contact head")


def test_a_record_longer_than_the_model_is_refused_naming_it_never_cut(esm_with_head, tmp_path, capsys):
    directory, _ = esm_with_head  # max_seq_len 66: 64 residues + <cls> + <eos>
    refused(capsys, tmp_path, directory, {"short": "MKV" * 21 + "A", "long": "MKV" * 21 + "AK"},
            "record 'long' (record 2) has 65 residues, 67 tokens with special tokens: more than max_length=66")


def test_a_rope_model_reads_past_its_max_seq_len_with_max_length_and_one_warning(esm_with_head, tmp_path, capsys):
    directory, _ = esm_with_head  # RoPE, max_seq_len 66
    fasta = write_fasta(tmp_path / "p.fasta", {"long": "MKV" * 21 + "AK"})
    status, err = contacts(capsys, "--model", directory, "--input", fasta, "--output", tmp_path / "c.npz",
                           "--max-length", "67")
    assert status == 0, err
    assert [line for line in err.splitlines() if "warning" in line] == [
        "biotf contacts: warning: max_length=67 reads past the 66 tokens this model was trained with (its "
        "max_seq_len); pos=rope extends, but accuracy that far is the model's own (ALiBi holds it best)"]
    assert np.load(tmp_path / "c.npz")["contacts/long"].shape == (65, 65)


def test_a_repeated_id_is_refused(esm_with_head, tmp_path, capsys):
    directory, _ = esm_with_head
    fasta = tmp_path / "p.fasta"
    fasta.write_text(">A\nMKV\n>B\nMKW\n>A\nMKY\n")
    status, err = contacts(capsys, "--model", directory, "--input", fasta, "--output", tmp_path / "c.tsv")
    assert status == 2 and "record 'A' (record 3) has the id of record 1" in err
    assert not (tmp_path / "c.tsv").exists()


def test_ids_whose_npz_maps_would_be_one_array_are_refused_naming_both_and_tsv_keeps_them(esm_with_head, tmp_path,
                                                                                          capsys):
    """np.load(path)["contacts/a.npy"] is member contacts/a.npy, record a's map: record a.npy's would be unreachable."""
    directory, model = esm_with_head
    proteins = {"a": PROTEINS["P1"], "a.npy": PROTEINS["P2"]}
    refused(capsys, tmp_path, directory, proteins, "record 'a' (record 1) and record 'a.npy' (record 2) cannot share "
            "one .npz: both would be read as np.load(path)['contacts/a.npy']")
    status, err = contacts(capsys, "--model", directory, "--input", write_fasta(tmp_path / "p.fasta", proteins),
                           "--output", tmp_path / "c.tsv")
    assert status == 0 and {line.split("\t")[0] for line in (tmp_path / "c.tsv").read_text().splitlines()[1:]} == {
        "a", "a.npy"}


def test_residues_that_are_not_one_token_each_are_refused(esm_with_head, tmp_path, capsys):
    """ESM's vocabulary reads `<mask>` as one token: a map numbered by characters would be shifted after it."""
    directory, _ = esm_with_head
    refused(capsys, tmp_path, directory, {"P1": "MKT<mask>AY"},
            "record 'P1' (record 1): its 11 characters are 6 tokens")


def test_option_changes_a_policy_of_the_tokenizer_as_in_every_command(esm_with_head, tmp_path, capsys):
    """`--option` reaches the model's tokenizer (`biotf.Model.load`), in both forms of predict: a residue code
    outside the alphabet, refused by default, is one <unk> token with unknown=to_unk (still one token a residue, so
    the map keeps its numbering); a bad value names the option."""
    directory, _ = esm_with_head
    sequence = PROTEINS["P1"][:10] + "J" + PROTEINS["P1"][10:]
    odd = write_fasta(tmp_path / "odd.fasta", {"P1": sequence})
    status, err = contacts(capsys, "--model", directory, "--input", odd, "--output", tmp_path / "refused.npz")
    assert status == 2 and "not an amino-acid code" in err, err
    for form in ([], ["predict"]):
        output = tmp_path / f"unk{len(form)}.npz"
        status, err = contacts(capsys, *form, "--model", directory, "--input", odd, "--output", output,
                               "--option", "unknown=to_unk")
        assert status == 0, err
        with np.load(output, allow_pickle=False) as saved:
            probabilities = saved["contacts/P1"]
        assert probabilities.shape == (len(sequence), len(sequence))
        assert np.isfinite(probabilities).all() and 0 <= probabilities.min() <= probabilities.max() <= 1
    status, err = contacts(capsys, "--model", directory, "--input", odd, "--output", tmp_path / "bad.npz",
                           "--option", "unknown=sometimes")
    assert status == 2 and "--option unknown" in err, err


def test_an_unknown_extension_and_an_existing_output_are_refused_before_any_work(esm_with_head, tmp_path, capsys):
    directory, _ = esm_with_head
    fasta = write_fasta(tmp_path / "p.fasta")
    status, err = contacts(capsys, "--model", directory, "--input", fasta, "--output", tmp_path / "c.csv")
    assert status == 2 and "unsupported extension '.csv' (allowed: .npz, .tsv, .rr)" in err
    (tmp_path / "c.tsv").write_text("keep me")
    status, err = contacts(capsys, "--model", directory, "--input", fasta, "--output", tmp_path / "c.tsv")
    assert status == 2 and "already exists; pass --overwrite" in err
    assert (tmp_path / "c.tsv").read_text() == "keep me"
    status, err = contacts(capsys, "--model", directory, "--input", fasta, "--output", tmp_path / "c.tsv",
                           "--overwrite")
    assert status == 0, err
    assert (tmp_path / "c.tsv").read_text().startswith("id\ti\tj\tprobability\n")


def test_the_head_survives_export_model(esm_with_head, tmp_path, capsys):
    directory, _ = esm_with_head
    assert main(["export-model", str(directory), str(tmp_path / "exported")]) == 0
    fasta = write_fasta(tmp_path / "p.fasta")
    for source, name in ((directory, "hf.npz"), (tmp_path / "exported", "exported.npz")):
        status, err = contacts(capsys, "--model", source, "--input", fasta, "--output", tmp_path / name)
        assert status == 0, err
    with np.load(tmp_path / "hf.npz") as hf, np.load(tmp_path / "exported.npz") as exported:
        for name in PROTEINS:
            assert np.array_equal(hf[f"contacts/{name}"], exported[f"contacts/{name}"])


def test_plot_draws_one_png_per_protein_beside_the_output(esm_with_head, tmp_path, capsys):
    from biotf.io.outputs import is_png

    directory, _ = esm_with_head
    fasta = write_fasta(tmp_path / "p.fasta", {**PROTEINS, "sp|Q1|X": "MKV"})
    status, err = contacts(capsys, "--model", directory, "--input", fasta, "--output", tmp_path / "c.npz", "--plot",
                           tmp_path / "maps")
    assert status == 0, err
    assert sorted(p.name for p in (tmp_path / "maps").iterdir()) == ["P1.png", "P2.png", "P3.png", "sp_Q1_X.png"]
    assert all(is_png(p) for p in (tmp_path / "maps").iterdir())


def test_plot_follows_the_output_rule_before_the_model_runs(esm_with_head, tmp_path, capsys):
    directory, _ = esm_with_head
    fasta = write_fasta(tmp_path / "p.fasta")
    maps = tmp_path / "maps"
    maps.mkdir()
    (maps / "P2.png").write_bytes(b"\x89PNG\r\n\x1a\nold")
    status, err = contacts(capsys, "--model", directory, "--input", fasta, "--output", tmp_path / "c.npz", "--plot",
                           maps)
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert f"--plot {maps / 'P2.png'} already exists; pass --overwrite" in err
    assert not (tmp_path / "c.npz").exists() and sorted(p.name for p in maps.iterdir()) == ["P2.png"]
    (maps / "P2.png").write_text("not a picture")
    status, err = contacts(capsys, "--model", directory, "--input", fasta, "--output", tmp_path / "c.npz", "--plot",
                           maps, "--overwrite")
    assert status == 2 and "exists and is not a PNG picture" in err and not (tmp_path / "c.npz").exists()
    (maps / "P2.png").unlink()
    clash = write_fasta(tmp_path / "clash.fasta", {"a|b": "MKV", "a_b": "MKW"})
    status, err = contacts(capsys, "--model", directory, "--input", clash, "--output", tmp_path / "c.npz", "--plot",
                           maps)
    assert status == 2 and "'a_b' and 'a|b' would both be drawn as" in err and not any(maps.iterdir())
