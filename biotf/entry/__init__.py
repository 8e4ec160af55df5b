"""The entry points that sit above both training and fine-tuning: `train` (`python train.py`, `biotf train`)."""
