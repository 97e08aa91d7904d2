"""The names users of OpenSeq2Seq, RETURNN, TF1, Keras and other tools write for opt-train's (TF-free tables).

The compatibility pass (`compat.py`) rewrites what it can read with these; the unknown-key
suggestion (`rules.unknown_key`) names the opt-train key a foreign one means (`synonym`).
"""

from __future__ import annotations

# Module prefixes a Python config writes before a class or function name; in YAML they
# arrive as strings ("tf.float32", "open_seq2seq.optimizers.novograd.NovoGrad").
FOREIGN_PREFIXES = ("tf.", "tensorflow.", "open_seq2seq.", "keras.", "returnn.")

# TF1 regularizer functions. TF1's l2_regularizer is scale * sum(w^2) / 2 (tf.nn.l2_loss),
# which is not opt-train's `l2` (Keras' scale * sum(w^2)); it gets its own name.
REGULARIZER_NAMES = {
    "l2_regularizer": "tf1_l2",
    "l1_regularizer": "l1",
}

# TF1 initializers -> (Keras initializer, TF1 defaults as Keras parameters, TF1 -> Keras
# parameter names). Where TF1 and Keras defaults differ, the TF1 default is written out.
CONTRIB_VARIANCE_SCALING = {"scale": 2.0, "mode": "fan_in", "distribution": "truncated_normal"}
INITIALIZERS = {
    "xavier_initializer": ("variance_scaling", {"scale": 1.0, "mode": "fan_avg", "distribution": "uniform"}),
    "glorot_uniform_initializer": ("glorot_uniform", {}),
    "glorot_normal_initializer": ("glorot_normal", {}),
    "he_normal": ("he_normal", {}),
    "he_uniform": ("he_uniform", {}),
    "variance_scaling_initializer": (
        "variance_scaling", {"scale": 1.0, "mode": "fan_in", "distribution": "truncated_normal"},
    ),
    "random_normal_initializer": ("random_normal", {"mean": 0.0, "stddev": 1.0}),
    "truncated_normal_initializer": ("truncated_normal", {"mean": 0.0, "stddev": 1.0}),
    "random_uniform_initializer": ("random_uniform", {"minval": 0.0, "maxval": 1.0}),
    "orthogonal_initializer": ("orthogonal", {"gain": 1.0}),
    "zeros_initializer": ("zeros", {}),
    "ones_initializer": ("ones", {}),
    "constant_initializer": ("constant", {"value": 0.0}),
}
KERAS_INITIALIZERS = (
    "glorot_uniform", "glorot_normal", "he_normal", "he_uniform", "lecun_normal", "lecun_uniform",
    "variance_scaling", "random_normal", "truncated_normal", "random_uniform", "orthogonal",
    "zeros", "ones", "constant",
)

# A foreign key -> the opt-train key, for the unknown-key suggestion: the names users of
# OpenSeq2Seq, RETURNN, Keras, Lightning and Hugging Face type for the same thing.
SYNONYMS = {
    "batch_size": "batch_size_per_gpu",
    "train_batch_size": "batch_size_per_gpu",
    "per_device_train_batch_size": "batch_size_per_gpu",
    "per_device_eval_batch_size": "eval_batch_size",
    "lr": "optimizer_params.learning_rate",
    "learning_rate": "optimizer_params.learning_rate",
    "base_lr": "optimizer_params.learning_rate",
    "momentum": "optimizer_params.momentum",
    "beta1": "optimizer_params.beta1",
    "beta_1": "optimizer_params.beta_1",
    "beta2": "optimizer_params.beta2",
    "beta_2": "optimizer_params.beta_2",
    "epsilon": "optimizer_params.epsilon",
    "weight_decay": "optimizer_params.weight_decay",
    "optimizer_kwargs": "optimizer_params",
    "optimizer_args": "optimizer_params",
    "gradient_clip_val": "max_grad_norm",
    "gradient_clip": "max_grad_norm",
    "gradient_clip_norm": "max_grad_norm",
    "gradient_clip_global_norm": "max_grad_norm",
    "clipnorm": "max_grad_norm",
    "global_clipnorm": "max_grad_norm",
    "clip_norm": "max_grad_norm",
    "max_norm": "max_grad_norm",
    "clip_gradients": "max_grad_norm",
    "gpus": "num_gpus",
    "num_workers": "num_gpus",
    "devices": "num_gpus",
    "epochs": "num_epochs",
    "max_epochs": "num_epochs",
    "num_train_epochs": "num_epochs",
    "num_steps": "max_steps",
    "train_steps": "max_steps",
    "max_iters": "max_steps",
    "max_iterations": "max_steps",
    "seed": "random_seed",
    "accumulate_grad_batches": "iter_size",
    "gradient_accumulation_steps": "iter_size",
    "accum_grad_multiple_step": "iter_size",
    "model_dir": "logdir",
    "output_dir": "logdir",
    "save_dir": "logdir",
    "checkpoint_dir": "logdir",
    "log_every_n_steps": "print_loss_steps",
    "logging_steps": "print_loss_steps",
    "save_steps": "save_checkpoint_steps",
    "checkpoint_steps": "save_checkpoint_steps",
    "eval_every": "eval_steps",
    "val_check_interval": "eval_steps",
    "eval_frequency": "eval_steps",
    "keep_checkpoint_max": "num_checkpoints",
    "max_to_keep": "num_checkpoints",
    "save_total_limit": "num_checkpoints",
    "precision": "dtype",
    "mixed_precision": "dtype",
    "loss_scale": "loss_scaling",
    "scheduler": "lr_policy",
    "lr_scheduler": "lr_policy",
    "lr_schedule": "lr_policy",
    "learning_rate_schedule": "lr_policy",
    "learning_rate_control": "lr_policy",
    "warmup_steps": "warmup.steps",
    "horovod": "use_horovod",
    "jit": "jit_compile",
    "xla": "jit_compile",
    "dataset": "data",
    "data_layer": "data",
    "data_layer_params": "data_params",
    "encoder": "model",
    "encoder_params": "model_params",
    "network": "model",
}


def synonym(name, known):
    """The opt-train key a user of another tool means by `name`, if it is among `known`.

    `known` are the keys valid where `name` was written: a top-level key's synonym is
    dotted (`lr` -> `optimizer_params.learning_rate`); inside a block its last part
    counts (`lr` in `optimizer_params` -> `learning_rate`).
    """
    target = SYNONYMS.get(str(name).lower())
    if target is None:
        return None
    known = set(map(str, known))
    if target.split(".")[0] in known:
        return target
    leaf = target.split(".")[-1]
    return leaf if leaf in known and leaf != name else None


def strip_prefix(text):
    """`tf.contrib.layers.l2_regularizer` -> `l2_regularizer`; other strings unchanged."""
    if isinstance(text, str) and text.startswith(FOREIGN_PREFIXES):
        return text.rsplit(".", 1)[-1]
    return text
