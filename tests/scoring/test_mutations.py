"""Mutation notation: parsing, checking against the reference, applying, and the reverse strand."""

from __future__ import annotations

import pytest

from biotf.errors import InputError
from biotf.scoring import Mutation, apply, difference, make_variant, parse_code, parse_pos_ref_alt
from biotf.scoring.mutations import reverse_strand
from biotf.tokenizers import reverse_complement

DNA = "ACGTTGCAAGGCTTAACG"


def test_codes_are_numbered_from_the_offset():
    assert parse_code("A42G:k50r") == [Mutation(41, "A", "G"), Mutation(49, "K", "R")]
    assert parse_code("H26Y", offset=24) == [Mutation(2, "H", "Y")]
    for bad in ("A42", "42G", "A42G;K50R", "AA42G", ""):
        with pytest.raises(InputError, match="cannot read mutation"):
            parse_code(bad, name="row 3")


def test_alleles_apply_right_to_left():
    """G3A, then G11 C12 deleted, then TTT inserted before A15: later positions refer to the reference."""
    variant = make_variant(DNA, [parse_pos_ref_alt("15", ".", "TTT"), parse_pos_ref_alt("3", "G", "A"),
                                 parse_pos_ref_alt("11", "GC", "-")], "v")
    assert apply(DNA, variant) == "ACATTGCAAG" + "TT" + "TTT" + "AACG"
    assert variant.code() == "G3A:11GC>-:15->TTT"


def test_overlaps_and_out_of_range_are_refused():
    with pytest.raises(InputError, match="mutations overlap at position 4"):
        make_variant(DNA, [parse_pos_ref_alt("3", "GT", "A"), parse_pos_ref_alt("4", "T", "C")], "v")
    with pytest.raises(InputError, match="position 19 is outside the reference .positions 1..18"):
        make_variant(DNA, parse_code("A19C"), "v")
    with pytest.raises(InputError, match="both alleles are empty"):
        parse_pos_ref_alt("3", "-", ".")


def test_difference_of_equal_length_sequences():
    assert difference("MKTA", "MRTG", "x").code() == "K2R:A4G"
    with pytest.raises(InputError, match="give insertions and deletions as 'pos ref alt'"):
        difference("MKTA", "MKT", "x")


@pytest.mark.parametrize("alleles", [("12", "C", "T"), ("11", "GC", "A"), ("5", "-", "GG"), ("1", "AC", "-")])
def test_reverse_strand_variant_is_the_reverse_complement_of_the_variant(alleles):
    variant = make_variant(DNA, [parse_pos_ref_alt(*alleles)], "v")
    flipped = reverse_strand(len(DNA), variant)
    flipped = make_variant(reverse_complement(DNA), flipped.mutations, "v")  # still matches the reverse strand
    assert apply(reverse_complement(DNA), flipped) == reverse_complement(apply(DNA, variant))
