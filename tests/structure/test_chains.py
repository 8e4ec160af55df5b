"""Reading a real PDB chain: the observed residues as the sequence, gaps kept aligned, and the C-beta contact map."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from biotf.errors import InputError
from biotf.structure.chains import read_chain, read_list, structure_files


@pytest.fixture(scope="module")
def structures(shared_data):
    return shared_data / "structures"


def pdb_lines(structures, name: str) -> list[str]:
    with gzip.open(structures / f"{name}.pdb.gz", "rt") as handle:
        return handle.read().splitlines(keepends=True)


def test_a_shared_chain_reads_as_its_observed_residues_with_a_sane_contact_map(structures):
    """2xdgA: 89 residues with C-alpha (the DSSP line has one character per such residue), numbered 0 then 34-121:
    a renumbering between bonded residues, not 33 missing ones."""
    chain = read_chain(structures / "2xdgA.pdb.gz")
    dssp = (structures / "2xdgA.pdb.dssp").read_text().split()[0]
    assert len(chain.sequence) == len(dssp) == 89 and chain.sequence.startswith("ML")
    assert (chain.missing, chain.renumbered, chain.nonstandard) == (0, 1, 0) and chain.known.all()
    contacts = chain.contacts()
    assert contacts.shape == (89, 89) and np.array_equal(contacts, contacts.T) and contacts.diagonal().all()
    assert contacts[np.arange(88), np.arange(1, 89)].all()  # neighbours in sequence always touch
    far = contacts[np.triu_indices(89, 6)].sum()
    assert 89 <= far <= 3 * 89  # about 1.5 L contacts at separation >= 6 (globular proteins: L to 3 L)


def test_an_mmcif_file_reads_as_its_pdb_file(structures, tmp_path):
    from Bio.PDB import MMCIFIO, PDBParser

    pdb = read_chain(structures / "2xcjA.pdb.gz")
    writer = MMCIFIO()
    with gzip.open(structures / "2xcjA.pdb.gz", "rt") as handle:
        writer.set_structure(PDBParser(QUIET=True).get_structure("2xcjA", handle))
    writer.save(str(tmp_path / "2xcjA.cif"))
    cif = read_chain(tmp_path / "2xcjA.cif")
    assert cif.name == "2xcjA" and cif.sequence == pdb.sequence
    assert np.array_equal(cif.contacts(), pdb.contacts())


def test_a_gap_of_missing_residues_is_filled_with_x_so_positions_stay_aligned(structures, tmp_path):
    """Residues 50-54 of 1eteA removed: the sequence keeps 5 X there, those positions are unknown, and every other
    pair's contact is the one of the complete chain."""
    whole = read_chain(structures / "1eteA.pdb.gz")
    lines = [line for line in pdb_lines(structures, "1eteA")
             if not (line.startswith("ATOM") and 50 <= int(line[22:26]) <= 54)]
    (tmp_path / "gapped.pdb").write_text("".join(lines))
    gapped = read_chain(tmp_path / "gapped.pdb")
    assert gapped.name == "gapped" and (gapped.missing, gapped.renumbered) == (5, 0)
    assert gapped.sequence == whole.sequence[:49] + "XXXXX" + whole.sequence[54:]
    assert np.flatnonzero(~gapped.known).tolist() == [49, 50, 51, 52, 53]
    seen = gapped.known[:, None] & gapped.known[None]
    assert np.array_equal(gapped.contacts()[seen], whole.contacts()[seen])
    assert not gapped.contacts()[~seen].any()


def test_a_nonstandard_residue_is_x_and_counted_and_a_ligand_is_no_residue(structures, tmp_path):
    lines = pdb_lines(structures, "1eteA")
    first_met = next(int(line[22:26]) for line in lines if line.startswith("ATOM") and line[17:20] == "MET")
    edited = [("HETATM" + line[6:17] + "MSE" + line[20:]) if line.startswith("ATOM") and
              int(line[22:26]) == first_met else line for line in lines]
    edited.insert(-1, "HETATM 9999 ZN    ZN A 900      10.000  10.000  10.000  1.00 20.00          ZN\n")
    (tmp_path / "mse.pdb").write_text("".join(edited))
    whole, chain = read_chain(structures / "1eteA.pdb.gz"), read_chain(tmp_path / "mse.pdb")
    at = next(i for i, letter in enumerate(whole.sequence) if letter == "M")
    assert chain.sequence == whole.sequence[:at] + "X" + whole.sequence[at + 1:] and chain.nonstandard == 1


def test_a_file_of_several_chains_needs_one_named(structures, tmp_path):
    atoms = [line for line in pdb_lines(structures, "2xcjA") if line.startswith("ATOM")]
    other = [line[:21] + "B" + line[22:] for line in atoms]
    (tmp_path / "two.pdb").write_text("".join(atoms) + "TER\n" + "".join(other) + "END\n")
    with pytest.raises(InputError, match=r"two.pdb: 2 chains with residues \(A, B\); name one"):
        read_chain(tmp_path / "two.pdb")
    assert read_chain(tmp_path / "two.pdb", "B").sequence == read_chain(structures / "2xcjA.pdb.gz").sequence
    (tmp_path / "junk.pdb").write_text("not a structure\n")
    with pytest.raises(InputError, match=r"junk.pdb: no model \(no atoms\)"):
        read_chain(tmp_path / "junk.pdb")


def test_a_list_names_structures_by_file_or_stem_and_refuses_unknown_or_repeated_ones(structures, tmp_path):
    assert len(structure_files(structures)) == 34
    listed = tmp_path / "list.txt"
    listed.write_text("# train\n2xcjA\n\n1eteA.pdb.gz\n")
    assert [p.name for p in structure_files(structures, read_list(listed), listed)] == ["2xcjA.pdb.gz",
                                                                                         "1eteA.pdb.gz"]
    with pytest.raises(InputError, match=r"list.txt: entry 2: no structure '9zzzA'"):
        structure_files(structures, ["2xcjA", "9zzzA"], listed)
    with pytest.raises(InputError, match="entry 2: '2xcjA.pdb.gz' is listed twice"):
        structure_files(structures, ["2xcjA", "2xcjA.pdb.gz"], listed)


def test_an_absurd_jump_in_the_numbering_is_refused_without_filling_it(structures, tmp_path):
    """mmCIF residue numbers are unbounded: a gap of 2e9 after 1eteA's residue 49 is refused in one line, before
    2e9 X (and NaN positions) are built; the same file with a normal gap still reads."""
    from Bio.PDB import MMCIFIO, PDBParser

    with gzip.open(structures / "1eteA.pdb.gz", "rt") as handle:
        structure = PDBParser(QUIET=True).get_structure("1eteA", handle)
    chain = next(structure[0].get_chains())
    for residue in list(chain):
        if 50 <= residue.id[1] <= 54:
            chain.detach_child(residue.id)
    writer = MMCIFIO()
    writer.set_structure(structure)
    writer.save(str(tmp_path / "gapped.cif"))
    assert read_chain(tmp_path / "gapped.cif").missing == 5
    for residue in sorted(chain, key=lambda r: -r.id[1]):  # from the end: no two residues share a number
        if residue.id[1] >= 55:
            residue.id = (residue.id[0], residue.id[1] + 2_000_000_000, residue.id[2])
    writer.set_structure(structure)
    writer.save(str(tmp_path / "jump.cif"))
    with pytest.raises(InputError, match=r"jump\.cif: chain 'A': residue numbers jump from 49 to 2000000055 between "
                                         r"residues that are not bonded; the 2,000,000,005 missing residues would "
                                         r"make the chain longer than 100,000"):
        read_chain(tmp_path / "jump.cif")
