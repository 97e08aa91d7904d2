"""Whether a model's output is already a probability (its last layer ends in softmax or sigmoid), and which layer says so."""

from __future__ import annotations

PROBABILITY_ACTIVATIONS = ("softmax", "sigmoid")


def _activation_name(layer):
    import keras

    if isinstance(layer, keras.layers.Softmax):
        return "softmax"
    activation = getattr(layer, "activation", None)
    if activation is None:
        return None
    name = getattr(activation, "__name__", None) or str(activation)
    return name if name in PROBABILITY_ACTIVATIONS else None


def probability_output(model):
    """`(layer name, "softmax" | "sigmoid")` when `model`'s single output comes out of such an activation, else None.

    Looks at the last layer, and into it when it is a model itself (a Sequential inside a
    functional model); a model with several outputs, or a subclassed one whose layers are
    not in call order, is taken as it says nothing (logits).
    """
    import keras

    if len(getattr(model, "outputs", None) or []) > 1:
        return None
    layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    if not layers:
        return None
    last = layers[-1]
    if isinstance(last, keras.Model):
        return probability_output(last)
    name = _activation_name(last)
    return None if name is None else (last.name, name)
