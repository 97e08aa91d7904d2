"""A user module that fails while being imported."""

raise RuntimeError("cannot open /data/corpus")
