"""Zero-shot scoring: sequence (pseudo-)log-likelihoods and variant effects for every tokenizer.

    from biotf.scoring import Scorer, make_variant, parse_code
    scorer = Scorer(*biotf.load_pretrained("outputs/protein_mlm/<run>"))
    scorer.sequence_scores(["MKTAYIAK", "MSTNPKPQ"])                     # pll (masked) or causal (decoder)
    variant = make_variant(wild_type, parse_code("A42G:K50R"), "double")   # refused if wild_type[41] != "A"
    scorer.variant_scores(wild_type, [variant], method="masked-marginal")
    score_variants_file("run/", "variants.csv", "wt.fasta", "scores.csv")  # what `biotf score --variants` runs
"""

from biotf.scoring.baselines import substitution_score
from biotf.scoring.files import FORMATS, ScoreSummary, score_file, score_variants_file, write_table
from biotf.scoring.mutations import Mutation, Variant, apply, difference, make_variant, parse_code, parse_pos_ref_alt
from biotf.scoring.scorer import METHODS, SEQUENCE_METHODS, ScoreOptions, Scorer, SequenceScore, VariantScore
from biotf.scoring.variant_files import read_reference, read_variants

__all__ = [
    "FORMATS", "METHODS", "SEQUENCE_METHODS", "Mutation", "ScoreOptions", "ScoreSummary", "Scorer", "SequenceScore",
    "Variant", "VariantScore", "apply", "difference", "make_variant", "parse_code", "parse_pos_ref_alt",
    "read_reference", "read_variants", "score_file", "score_variants_file", "substitution_score", "write_table",
]
