"""One module per `biotf` subcommand: parse arguments, call the packages, print results."""
