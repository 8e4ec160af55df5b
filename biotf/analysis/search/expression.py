"""Vector expressions of ids, the embedding arithmetic of word2vec (Mikolov et al. 2013: king - man + woman):

    parse_expression("idA - idB + idC")  # [(1, "idA"), (-1, "idB"), (1, "idC")]

Grammar, read strictly: terms joined by `+` or `-`, each operator a word of its own (spaces around it), so ids
may hold `-` and `+` themselves (`sp|P1-2|X`); an optional leading sign; quotes (shell style) around an id that
holds spaces. Anything else (two ids in a row, two operators in a row, a trailing operator, an empty
expression, unbalanced quotes) is one line naming the expression and the place. With cosine, terms are added as
unit vectors (3CosAdd, as gensim's `most_similar`); the ids of the expression are left out of its neighbours.
An expression whose terms cancel (`A - B + B - A`) is refused, every metric: its vector is then rounding error, not
zero, and would return arbitrary neighbours. "Cancel" means a norm below CANCELLED (1e-6) x the sum of the terms'
norms (float64 sums leave about 1e-16 of it), measured before the float32 cast.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

import numpy as np

from biotf.errors import InputError

OPERATORS = {"+": 1, "-": -1}
CANCELLED = 1e-6  # an expression's norm, relative to the sum of its terms' norms, below which it is refused


def parse_expression(text: str) -> list[tuple[int, str]]:
    """(sign, id) per term, in order."""
    def refuse(reason: str) -> InputError:
        return InputError(f"expression {text!r}: {reason} (write ids joined by ' + ' and ' - ', e.g. 'A - B + C')")

    try:
        lexer = shlex.shlex(text, posix=True)
        lexer.whitespace_split, lexer.commenters = True, ""
        words = list(lexer)
    except ValueError as error:  # "No closing quotation"
        raise refuse(str(error).lower()) from None
    if not words:
        raise refuse("empty")
    sign, terms, expect_term, first = 1, [], True, 1
    if words[0] in OPERATORS:
        sign, words, first = OPERATORS[words[0]], words[1:], 2
        if not words:
            raise refuse("an operator with no id")
    for position, word in enumerate(words, first):
        if expect_term:
            if word in OPERATORS:
                raise refuse(f"two operators in a row at word {position}")
            terms.append((sign, word))
        elif word in OPERATORS:
            sign = OPERATORS[word]
        else:
            raise refuse(f"{word!r} follows an id without an operator")
        expect_term = not expect_term
    if expect_term:
        raise refuse("ends with an operator")
    return terms


def expression_vector(text: str, row_of: Callable[[str], int | None], vectors: np.ndarray,
                      unit: bool) -> tuple[np.ndarray, list[int]]:
    """The expression's vector (terms as unit vectors when `unit`) and the rows of its ids; an id `row_of` does
    not know is refused naming it."""
    total = np.zeros(vectors.shape[1], np.float64)
    rows, norms = [], 0.0
    for sign, name in parse_expression(text):
        row = row_of(name)
        if row is None:
            raise InputError(f"expression {text!r}: unknown id {name!r} (not in the index)")
        vector = np.asarray(vectors[row], np.float64)
        norm = float(np.linalg.norm(vector))
        total += sign * (vector / norm if unit else vector)
        norms += 1.0 if unit else norm
        rows.append(row)
    if not float(np.linalg.norm(total)) >= CANCELLED * norms:
        raise InputError(f"expression {text!r}: its terms cancel (norm {np.linalg.norm(total):.3g}, below {CANCELLED:g} "
                         f"x {norms:.3g}, the sum of its terms' norms), so its direction would be rounding error; leave "
                         "out the terms that cancel")
    return total.astype(np.float32), rows
