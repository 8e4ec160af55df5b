#!/usr/bin/env python
"""Train a biotf transformer: `python train.py [hydra overrides]` (configs in biotf/conf/, see biotf/conf/config.yaml).

Thin on purpose: compose -> validate -> build -> fit live in biotf.entry.train, which runs biotf.training or
biotf.finetune.
"""

import sys

from biotf.entry.train import main

if __name__ == "__main__":
    sys.exit(main())
