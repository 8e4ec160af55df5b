#!/usr/bin/env bash
# biotf's GPU path against the same computation on the CPU: a PASS / FAIL / SKIP table, exit status 1 on any failure.
#
#   scripts/gpu_check.sh                          # every check (scripts/gpu_check.py says which and their tolerances)
#   scripts/gpu_check.sh training sdpa            # some checks
#   scripts/gpu_check.sh --json gpu-check.json    # also the results and the machine as JSON
#   PYTHON=.venv/bin/python scripts/gpu_check.sh  # another interpreter (default: python)
#
# Where torch sees no CUDA device, nothing of the GPU path can be checked: the script says so, runs the same
# comparisons on the CPU at tiny sizes instead (the test suite's run: the checking code itself works), and exits
# with status 3, never 0.
set -u
cd "$(dirname "$0")/.." || exit 1
PYTHON=${PYTHON:-python}

if "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    exec "$PYTHON" scripts/gpu_check.py --device cuda --reference cpu "$@"
fi

skipped="gpu_check: torch sees no CUDA device: every CUDA check was SKIPPED (nothing about the GPU path is checked)"
echo "$skipped"
if [ $# -eq 0 ]; then
    set -- training ddp commands sdpa  # the bench on the CPU is `scripts/bench.py packing`'s own run
fi
echo "gpu_check: running the same comparisons on the CPU at tiny sizes instead: $*"
"$PYTHON" scripts/gpu_check.py --device cpu --reference cpu --size tiny "$@"
status=$?
echo "$skipped"
if [ "$status" -ne 0 ]; then
    exit "$status"
fi
exit 3
