"""Example counts without TensorFlow: the eval split's size, a built-in dataset's train examples, batches and
updates per epoch.

`validate` counts with these what `train` counts when it builds the data, so both
give the same `steps_per_epoch` (updates) and refuse the same batch size.
"""

from __future__ import annotations

from opt_train.errors import ParamError

# scikit-learn's digits: 1,797 8x8 images (sources.load_digits_source reads them).
DIGITS_EXAMPLES = 1797


def eval_count(num_examples, eval_fraction):
    """Examples held out for evaluation: `eval_fraction` of them, rounded, at least 1 and leaving 1 to train."""
    return min(max(int(round(num_examples * eval_fraction)), 1), num_examples - 1)


def train_examples(name, params):
    """Train examples of built-in dataset `name` (canonical) with its checked `params`, where they say
    how many: digits, and every dataset a seeded generator makes (`num_examples` among its parameters).
    None for files (counted when read); not for the user's pipelines, whose parameters are their own."""
    if name == "digits":
        total = DIGITS_EXAMPLES
    elif "num_examples" in params:
        total = params["num_examples"]
    else:
        return None
    return total - eval_count(total, params["eval_fraction"])


def steps_per_epoch(per_rank, batch_size, what="examples", replicas=1):
    """Full batches per epoch on one rank; a `ParamError` at `batch_size_per_gpu` when not one fits.

    `batch_size` is the rank's, its `replicas` replicas' batches together: the error names
    one replica's share, the number a config gives as `batch_size_per_gpu`. The Python
    wording keeps the data layer's `batch_size`.
    """
    steps = per_rank // batch_size
    if steps < 1:
        limit = f"the train {what} per rank ({per_rank})"
        if replicas > 1:
            limit += f" shared by its {replicas} replicas ({per_rank // replicas} each)"
        raise ParamError("batch_size", "out_of_range", f"must be at most {limit}", batch_size // replicas,
                         key="batch_size_per_gpu")
    return steps


def updates_per_epoch(batches, iter_size):
    """Optimizer updates in an epoch of `batches` micro-batches: `iter_size` of them make one update (at least one).

    What `steps_per_epoch` means wherever a run reports or schedules by it (OpenSeq2Seq's
    steps are updates): `train`'s epochs, the lr policies' `steps_per_epoch`, `validate`.
    """
    return max(1, batches // iter_size)
