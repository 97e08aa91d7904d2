"""An example user gradient transform: clip each gradient element to [-max_value, max_value].

This is RETURNN's `gradient_clip` (TF's `tf.clip_by_value` on every gradient),
written the way you write your own transform for opt-train's pipeline: a
factory that takes the YAML `params` and returns a
`GradientTransform(init, update)` in Optax's shape.

```yaml
gradient_transforms:
  - {factory: "examples.my_grads:clip_by_value", params: {max_value: 0.5}, after: allreduce}
```

Run opt-train from the repository root so that `examples` is importable, or
put your own package on PYTHONPATH.

- `init(variables) -> state`: create any `tf.Variable`s the transform keeps
  (here none: `init_empty`). State variables are checkpointed with the run.
- `update(grads, state, variables=None, **extra) -> (grads, state)`: runs
  inside the compiled train step once per call of the stage it follows
  (once per update after `accumulate` or later, once per micro-batch after
  `unscale`). `grads` is a list aligned with `variables`; entries may be
  None or `tf.IndexedSlices`. Change state only with `assign*`.
- Check the parameters in the factory and raise `opt_train.errors.ParamError`
  naming the parameter: opt-train reports it at
  `gradient_transforms[i].params.max_value` with the file and line (a plain
  `ValueError` is reported at `gradient_transforms[i].params`).
"""

from __future__ import annotations

import tensorflow as tf

from opt_train.errors import ParamError
from opt_train.optimizers.transform import GradientTransform, init_empty, map_values


def clip_by_value(max_value):
    """Clips every gradient element to `[-max_value, max_value]` (sparse gradients stay sparse)."""
    if isinstance(max_value, bool) or not isinstance(max_value, (int, float)) or not max_value > 0:
        raise ParamError("max_value", "out_of_range", "must be > 0", max_value)
    limit = float(max_value)

    def update(grads, state, variables=None, **extra):
        del variables, extra
        clipped = [map_values(lambda v: tf.clip_by_value(v, -limit, limit), g) for g in grads]
        return clipped, state

    return GradientTransform(init_empty, update)
