"""The settings layer: config.py reads `[tool.harness]`, models.py your own checkpoints in it,
run.py makes one run's `RunSettings` from the CLI or from pytest."""
