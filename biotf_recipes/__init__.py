"""Applications built on biotf, beside the library: each imports `biotf` as any user's code would, and nothing in
`biotf` imports them (tests/test_architecture.py holds it).

- `experiments`: research experiments that train grids of runs and write their reports (`biotf experiment`), and
  the table and curves of any runs (`biotf compare`);
- `moses`: the MOSES benchmark of generated molecules (`biotf generate evaluate`);
- `tokens` (with the amino-acid scales of `scales`): what a model's token embeddings learnt (`biotf tokens`).

Their commands live in `biotf_recipes.commands`; `biotf` finds them through the entry-point group `biotf.commands`
that pyproject.toml declares (`biotf.added_commands`).
"""
