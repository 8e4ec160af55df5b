"""Training: structured configs, the LightningModule and DataModule, callbacks; the only place Lightning lives.

Entry points: `python train.py` / `biotf train` (`biotf.entry.train.main`, above this package and `biotf.finetune`),
or in Python `biotf.training.run.train(biotf.training.train_config.validate(cfg), run_dir)` with a composed config.
"""
