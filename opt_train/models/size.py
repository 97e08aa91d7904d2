"""Sizes a built-in model's weights (each variable's path and shape) from its parameters and the data's shapes, TF-free.

A `hidden_units: [1000000]` typo would otherwise end in an allocation failure deep in
TensorFlow, or in the machine swapping; the builder compares this count against the
memory there is and refuses with a line naming `model_params`; `validate` lays the same
variables out on a mesh for its memory plan. Imports no TensorFlow.
"""

from __future__ import annotations

import math
import os

from opt_train.models.layers import image_shape

# What training holds per weight, at the least: the weight, its gradient and two
# optimizer slots (Adam's), in float32.
BYTES_PER_WEIGHT = 4 * 4


def _dense(name, inputs, units):
    return [(f"{name}/kernel", (inputs, units)), (f"{name}/bias", (units,))]


def _norm(name, width):
    return [(f"{name}/gamma", (width,)), (f"{name}/beta", (width,))]


def mlp_variables(task, hidden_units, **_):
    width, found = math.prod(task.input_shape), []
    for index, units in enumerate(hidden_units):
        found += _dense(f"dense_{index}", width, units)
        width = units
    return found + _dense("logits", width, task.output_dim)


def cnn_variables(task, filters, kernel_size, dense_units, **_):
    image = image_shape(task)
    if image is None:
        return None  # not image-like: the builder itself says so
    height, width, channels = image[0], image[1], image[2] if len(image) > 2 else 1
    found = []
    for index, out in enumerate(filters):
        found += [(f"conv_{index}/kernel", (kernel_size, kernel_size, channels, out)), (f"conv_{index}/bias", (out,))]
        channels = out
        if min(height, width) >= 2:
            height, width = height // 2, width // 2
    found += _dense("dense", height * width * channels, dense_units)
    return found + _dense("logits", dense_units, task.output_dim)


def transformer_variables(task, d_model, num_heads, num_layers, ff_dim, **_):
    head = d_model // num_heads
    found = [("token_embedding/embeddings", (task.vocab_size or 0, d_model)),
             ("position_embedding/positions", (task.input_shape[0], d_model))]
    for index in range(num_layers):
        block = f"block_{index}"
        found += _norm(f"{block}_attention_norm", d_model)
        for part in ("query", "key", "value"):
            found += [(f"{block}_attention/{part}/kernel", (d_model, num_heads, head)),
                      (f"{block}_attention/{part}/bias", (num_heads, head))]
        found += [(f"{block}_attention/attention_output/kernel", (num_heads, head, d_model)),
                  (f"{block}_attention/attention_output/bias", (d_model,))]
        found += _norm(f"{block}_ff_norm", d_model)
        found += _dense(f"{block}_ff_in", d_model, ff_dim) + _dense(f"{block}_ff_out", ff_dim, d_model)
    return found + _norm("final_norm", d_model) + _dense("logits", d_model, task.output_dim)


# A model's row names its `variables(task, **params)`: [(Keras `variable.path`, shape)] of
# `model.weights`, in the builder's order (a test holds each against the built Keras model).
# Dropout's seed-generator states (two int64 per layer, named by a process-wide counter) are not
# weights and are left out.


def variable_shapes(name, params, task):
    """`[(path, shape)]` of the weights built-in model `name` has for `task`, or None when it cannot tell."""
    from opt_train.models.registry import MODELS
    from opt_train.registry import load

    if name not in MODELS:
        return None
    return load(MODELS[name].variables)(task, **params)


def weight_count(name, params, task):
    """The number of weights built-in model `name` has for `task`, or None when it cannot tell."""
    shapes = variable_shapes(name, params, task)
    return None if shapes is None else sum(math.prod(shape) for _, shape in shapes)


def available_memory():
    """Bytes of memory available now (Linux's MemAvailable), else the physical total, else None."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def memory_problem(name, params, task):
    """Why built-in model `name` with `params` cannot be trained in this machine's memory, or None."""
    weights = weight_count(name, params, task)
    memory = available_memory()
    if weights is None or memory is None or weights * BYTES_PER_WEIGHT <= memory:
        return None
    return (
        f"the {name} model would have {weights:,} weights, needing at least "
        f"{weights * BYTES_PER_WEIGHT / 2**30:,.1f} GiB to train; {memory / 2**30:,.1f} GiB of memory is available"
    )
