"""The values `biotf score` offers, importable without torch (the command's parser lists them)."""

METHODS = ("auto", "causal", "pll", "masked-marginal", "wt-marginal")
SEQUENCE_METHODS = ("auto", "causal", "pll")  # the methods that score whole records (the others score variants)
SCORE_FORMATS = (".csv", ".tsv", ".parquet")  # output tables, by extension
