"""Zero-shot scoring: sequence (pseudo-)log-likelihoods and variant effects for every tokenizer.

    from biotf.scoring import Scorer, make_variant, parse_code
    scorer = Scorer.of(biotf.Model.load("outputs/protein_mlm/<run>"))
    scorer.sequence_scores(["MKTAYIAK", "MSTNPKPQ"])                     # pll (masked) or causal (decoder)
    variant = make_variant(wild_type, parse_code("A42G:K50R"), "double")   # refused if wild_type[41] != "A"
    scorer.variant_scores(wild_type, [variant], method="masked-marginal")
    score_variants_file("run/", "variants.csv", "wt.fasta", "scores.csv")  # what `biotf score --variants` runs
    score_assays("esm2_t6_8M_UR50D", "DMS_dir/", "DMS_substitutions.csv", "table.csv")  # `biotf score proteingym`
    fitness_metrics(scores, dms_score, dms_score_bin)   # ProteinGym's Spearman, AUC, MCC, NDCG, Top_recall
"""

from biotf.lazy import lazy_exports

# The values `biotf score` offers, here so that the command's parser lists them without torch.
METHODS = ("auto", "causal", "pll", "masked-marginal", "masked-marginal-joint", "wt-marginal")
SEQUENCE_METHODS = ("auto", "causal", "pll")  # the methods that score whole records (the others score variants)

# name -> submodule; each is imported when first used (see biotf/lazy.py), so the command's parser loads no torch.
_EXPORTS = {
    "substitution_score": "baselines",
    "AssaySummary": "assays", "PublishedTable": "assays", "find_assays": "assays", "score_assays": "assays",
    "METRICS": "fitness_metrics", "fitness_metrics": "fitness_metrics",
    "ScoreSummary": "score_job", "ScoreRun": "score_job", "score_file": "score_job", "score_variants_file": "score_job",
    "Mutation": "mutations", "Variant": "mutations", "apply": "mutations", "difference": "mutations",
    "make_variant": "mutations", "parse_code": "mutations", "parse_pos_ref_alt": "mutations",
    "ScoreOptions": "scorer", "Scorer": "scorer", "SequenceScore": "scorer", "VariantScore": "scorer",
    "Reference": "variant_files", "read_reference": "variant_files", "read_variants": "variant_files",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted([*_EXPORTS, "METHODS", "SEQUENCE_METHODS"])
