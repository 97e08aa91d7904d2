"""The measured setups: models as `--set` overrides of configs/default.yaml, and the pipeline features.

Every setup is built through `opt_train.config.load_config`, so the opt-train
pipeline measured here is exactly what `opt-train train --config configs/default.yaml
--set ...` runs.
"""

from __future__ import annotations

import dataclasses
import os

DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "default.yaml")

# Overrides every measured run shares: nothing on disk outside a temporary logdir,
# no evaluation or checkpoints inside the timed steps.
_QUIET = ("eval_steps=null", "save_checkpoint_steps=null", "print_loss_steps=100")


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One model + data + batch size, as overrides of the default config.

    `layer_sizes` (input, hidden..., output) lets the harness count the MLP's FLOPs.
    """

    name: str
    overrides: tuple
    layer_sizes: tuple
    batch_size: int
    steps: int  # timed updates per measurement
    warmup: int  # untimed updates before each measurement
    repeats: int  # interleaved measurements per pipeline; the median is reported


def _mlp_on_synthetic(name, *, features, hidden, classes, batch, steps, warmup, repeats, examples, extra=()):
    overrides = (
        "data=synthetic_classification",
        f"data_params={{num_features: {features}, num_classes: {classes}, num_examples: {examples}}}",
        f"model_params.hidden_units=[{', '.join(str(units) for units in hidden)}]",
        f"batch_size_per_gpu={batch}",
        *extra,
    )
    return Scenario(name, overrides, (features, *hidden, classes), batch, steps, warmup, repeats)


def scenarios(quick=False):
    """The models measured: the default config, a larger MLP, a matmul-bound MLP."""
    if quick:
        # As in a full run, each timed window holds one reported and summarized update: the
        # pipelines' every compiled variant is traced after a few updates, not after 100.
        def every(steps):
            return (f"print_loss_steps={steps}", f"save_summaries_steps={steps}")

        return {
            "default": Scenario("default", ("batch_size_per_gpu=16", *every(4)), (64, 128, 10), 16, 4, 2, 2),
            "large_mlp": _mlp_on_synthetic(
                "large_mlp", features=32, hidden=(32, 32), classes=4, batch=16, steps=4, warmup=2, repeats=2,
                examples=200, extra=every(4),
            ),
            "matmul_mlp": _mlp_on_synthetic(
                "matmul_mlp", features=32, hidden=(64, 64), classes=4, batch=32, steps=2, warmup=1, repeats=2,
                examples=200, extra=every(2),
            ),
        }
    return {
        # configs/default.yaml as shipped: 64-128-10 on digits, batch 64, Adam.
        # Steps of well under a millisecond: many short repeats, so a burst of load
        # from another process moves the median little.
        "default": Scenario("default", (), (64, 128, 10), 64, 400, 20, 7),
        # The XLA example: 784-1024-1024-10, batch 256, Adam. A window of 100
        # updates holds one reported and one summarized update, as every 100 in a run.
        "large_mlp": _mlp_on_synthetic(
            "large_mlp", features=784, hidden=(1024, 1024), classes=10, batch=256, steps=100, warmup=5,
            repeats=5, examples=2048,
        ),
        # Wide layers and a large batch, so matmuls dominate the step. Steps of ~0.1 s:
        # reported and summarized every 10, so a 10-update window holds one of each.
        "matmul_mlp": _mlp_on_synthetic(
            "matmul_mlp", features=1024, hidden=(2048, 2048), classes=16, batch=1024, steps=10, warmup=2,
            repeats=5, examples=4096, extra=("print_loss_steps=10", "save_summaries_steps=10"),
        ),
    }


# Each pipeline feature as overrides on top of a scenario; "plain" is the reference.
FEATURES = {
    "plain": (),
    "loss_scaling": ("loss_scaling=Backoff",),
    "iter_size_4": ("iter_size=4",),
    "clipping": ("max_grad_norm=1.0",),
    "larc": ("larc_params={larc_eta: 0.002, larc_mode: clip}",),
    "summaries_every_step": (
        "summaries=[learning_rate, gradients, gradient_norm, global_gradient_norm, variables, variable_norm]",
        "save_summaries_steps=1",
    ),
    "summaries_every_100": (
        "summaries=[learning_rate, gradients, gradient_norm, global_gradient_norm, variables, variable_norm]",
        "save_summaries_steps=100",
    ),
}


def load(scenario, logdir, extra=()):
    """The validated `TrainConfig` of `scenario` with `extra` overrides, logging to `logdir`."""
    from opt_train.config import load_config

    overrides = [*_QUIET, *scenario.overrides, *extra, f"logdir={logdir}"]
    return load_config([DEFAULT_CONFIG], overrides)


def set_flags(scenario, extra=()):
    """The same setup as `opt-train train` command-line arguments (for the README and JSON)."""
    return " ".join(f"--set '{item}'" for item in (*scenario.overrides, *extra))
