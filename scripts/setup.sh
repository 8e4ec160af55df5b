#!/usr/bin/env bash
# Create .venv and install biotf with its test extras.
# torch==2.13.0 goes first: on these machines it is a CPU build on local disk, and
# installing it before the project keeps pip from pulling a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e '.[test]'
