"""An example user data factory: noisy 2-D spirals, one arm per class, as an unbatched `tf.data.Dataset`.

Use it from YAML (run opt-train from the repository root, so that `examples` is
importable, or put this file's package on PYTHONPATH):

```yaml
data: {factory: "examples.my_data:make"}
data_params: {points_per_arm: 400, arms: 3, noise: 0.1, task: classification, num_classes: 3}
```

opt-train calls `make(split="train")` and `make(split="eval")` with every key of
`data_params` but its own (`task`, `num_classes`); it would also pass `rank=`,
`size=` and `seed=` had the function declared them (declare `rank` and `size` only
when the function reads just its own share of the data). It returns single examples
`(x, y)` or `(x, y, sample_weight)`; opt-train shards, shuffles, batches, repeats
and prefetches them.
"""

import numpy as np
import tensorflow as tf


def make(split, points_per_arm=400, arms=3, noise=0.1, eval_every=5, weight_outer=False):
    """The spirals of `split`: every `eval_every`-th point is held out for "eval".

    With `weight_outer`, each example also carries a sample weight, its radius: the
    outer, harder-to-separate points count more in the loss.
    """
    rng = np.random.default_rng(0)  # the same points for both splits, whatever the run's seed
    radius = np.tile(np.linspace(0.1, 1.0, points_per_arm), arms)
    label = np.repeat(np.arange(arms), points_per_arm)
    angle = 3.0 * radius * np.pi + 2.0 * np.pi * label / arms
    points = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    points = (points + noise * rng.normal(size=points.shape)).astype(np.float32)
    held_out = np.arange(len(points)) % eval_every == 0
    keep = held_out if split == "eval" else ~held_out
    columns = (points[keep], label[keep].astype(np.int64))
    if weight_outer:
        columns += (radius[keep].astype(np.float32),)
    return tf.data.Dataset.from_tensor_slices(columns)
