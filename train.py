#!/usr/bin/env python
"""Train a biotf transformer: `python train.py [hydra overrides]` (configs in biotf/conf/, see biotf/conf/config.yaml).

Thin on purpose: compose -> validate -> build -> fit all live in biotf.training (entry, run).
"""

import sys

from biotf.training.entry import main

if __name__ == "__main__":
    sys.exit(main())
