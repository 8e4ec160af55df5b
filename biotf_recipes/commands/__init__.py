"""The recipes' `biotf` subcommands, one module each as in `biotf/commands` (parse arguments, call the recipe, print),
added to `biotf` through the entry-point group `biotf.commands` (pyproject.toml)."""
