"""Training: structured configs, the LightningModule and DataModule, callbacks; the only place Lightning lives.

Entry points: `python train.py` / `biotf train` (`biotf.training.entry.main`), or in Python
`biotf.training.run.train(biotf.training.config.validate(cfg), run_dir)` with a composed config.
"""
