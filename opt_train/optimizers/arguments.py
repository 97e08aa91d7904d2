"""The Keras base arguments opt-train's gradient pipeline replaces, and the check that refuses them."""

from __future__ import annotations

# Keras base arguments that duplicate the gradient pipeline -> the config key to use instead.
# A leaf module (no TensorFlow, no other opt-train import): the registry, the optimizer
# base class and the Keras family all read it, so none of them imports another for it.
PIPELINE_ARGUMENTS = {
    "gradient_accumulation_steps": "iter_size",
    "loss_scale_factor": "loss_scaling",
}


def reject_pipeline_arguments(params):
    """Raises a ValueError for a Keras argument the opt-train gradient pipeline replaces."""
    for name, replacement in PIPELINE_ARGUMENTS.items():
        if params.get(name) is not None:
            raise ValueError(
                f"`{name}` is not offered: opt-train's gradient pipeline does this; set "
                f"`{replacement}` in the config instead. Received: {name}={params[name]!r}"
            )
