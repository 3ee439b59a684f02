"""Step functions that put the layers together, as Levanter's `levanter.main`: `train_lm` builds
the Trainer of training/ and registers the evaluation hooks of evaluation/ on it.

Import a step function from its module: `from marin_lab.main.train_lm import train_lm`.
"""
