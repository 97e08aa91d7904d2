"""The performance harness: opt-train's training step against hand-written and `Model.fit` baselines.

Run everything with one command from the repository root:

    python -m benchmarks.run [--quick] [--out FILE]   (default: benchmarks/results/<date>-harness.json)

See benchmarks/README.md for what is measured and the latest figures.
"""
