"""Counts a built-in model's weights from its parameters and the data's shapes, before anything is allocated.

A `hidden_units: [1000000]` typo would otherwise end in an allocation failure deep in
TensorFlow, or in the machine swapping; the builder compares this count against the
memory there is and refuses with a line naming `model_params`. Imports no TensorFlow.
"""

from __future__ import annotations

import math
import os

from opt_train.models.layers import image_shape

# What training holds per weight, at the least: the weight, its gradient and two
# optimizer slots (Adam's), in float32.
BYTES_PER_WEIGHT = 4 * 4


def dense(inputs, units):
    return inputs * units + units


def mlp_weights(task, hidden_units, **_):
    width, total = math.prod(task.input_shape), 0
    for units in hidden_units:
        total += dense(width, units)
        width = units
    return total + dense(width, task.output_dim)


def cnn_weights(task, filters, kernel_size, dense_units, **_):
    image = image_shape(task)
    if image is None:
        return None  # not image-like: the builder itself says so
    height, width, channels = image[0], image[1], image[2] if len(image) > 2 else 1
    total = 0
    for out in filters:
        total += kernel_size * kernel_size * channels * out + out
        channels = out
        if min(height, width) >= 2:
            height, width = height // 2, width // 2
    total += dense(height * width * channels, dense_units)
    return total + dense(dense_units, task.output_dim)


def transformer_weights(task, d_model, num_layers, ff_dim, **_):
    length = task.input_shape[0]
    attention = 4 * (d_model * d_model + d_model)
    block = attention + dense(d_model, ff_dim) + dense(ff_dim, d_model) + 2 * 2 * d_model
    return (
        (task.vocab_size or 0) * d_model + length * d_model + num_layers * block + 2 * d_model
        + dense(d_model, task.output_dim)
    )


WEIGHT_COUNTS = {"mlp": mlp_weights, "cnn": cnn_weights, "transformer": transformer_weights}


def weight_count(name, params, task):
    """The number of weights built-in model `name` has for `task`, or None when it cannot tell."""
    count = WEIGHT_COUNTS.get(name)
    return None if count is None else count(task, **params)


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
