"""`transformer`: a small Transformer encoder that predicts a token at every position (the reversal task).

For a fixed-length task such as reversal, an encoder with full (non-causal)
self-attention is enough: output position i learns to attend to input position
n-1-i. Tokens enter through a `keras.layers.Embedding`, so their gradient is a
sparse `tf.IndexedSlices` — the case the sparse optimizer paths must handle.
"""

from __future__ import annotations

import keras

from opt_train.errors import ParamError

from opt_train.models.layers import output_head, task_input


@keras.saving.register_keras_serializable(package="opt_train")
class PositionEmbedding(keras.layers.Layer):
    """Adds a learned vector per position to a `(batch, length, width)` input."""

    def __init__(self, length, **kwargs):
        super().__init__(**kwargs)
        self.length = length

    def build(self, input_shape):
        self.positions = self.add_weight(
            shape=(self.length, input_shape[-1]),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
            name="positions",
        )

    def call(self, inputs):
        return inputs + keras.ops.cast(self.positions, inputs.dtype)

    def get_config(self):
        return {**super().get_config(), "length": self.length}


def encoder_block(hidden, index, *, d_model, num_heads, ff_dim, dropout, activation, regularizer):
    """One pre-norm block: x + attention(norm(x)), then x + feed_forward(norm(x))."""
    normed = keras.layers.LayerNormalization(epsilon=1e-6, name=f"block_{index}_attention_norm")(hidden)
    attended = keras.layers.MultiHeadAttention(
        num_heads, d_model // num_heads, dropout=dropout,
        kernel_regularizer=regularizer, name=f"block_{index}_attention",
    )(normed, normed)
    if dropout:
        attended = keras.layers.Dropout(dropout, name=f"block_{index}_attention_dropout")(attended)
    hidden = keras.layers.Add(name=f"block_{index}_attention_residual")([hidden, attended])
    normed = keras.layers.LayerNormalization(epsilon=1e-6, name=f"block_{index}_ff_norm")(hidden)
    inner = keras.layers.Dense(
        ff_dim, activation=activation, kernel_regularizer=regularizer, name=f"block_{index}_ff_in"
    )(normed)
    outer = keras.layers.Dense(d_model, kernel_regularizer=regularizer, name=f"block_{index}_ff_out")(inner)
    if dropout:
        outer = keras.layers.Dropout(dropout, name=f"block_{index}_ff_dropout")(outer)
    return keras.layers.Add(name=f"block_{index}_ff_residual")([hidden, outer])


def build_transformer(task, *, d_model, num_heads, num_layers, ff_dim, dropout, activation, regularizer=None):
    """Token + position embeddings -> `num_layers` encoder blocks -> norm -> logits per position.

    Args:
        task: a sequence `Task`: `input_shape = (length,)` int32 tokens, `vocab_size`.
        d_model: width of embeddings and attention; `num_heads` must divide it.
        num_heads: attention heads.
        num_layers: encoder blocks.
        ff_dim: inner width of each feed-forward block.
        dropout: rate on attention weights and on each residual branch.
        activation: feed-forward activation name.
        regularizer: a Keras regularizer for attention and Dense kernels (not the
            embeddings, which keeps their gradient sparse), or None.
    """
    if task.kind != "sequence":
        raise ParamError.at("model", "conflict", f"`transformer` needs a sequence task (data such as reversal). "
                            f"Received: a {task.kind} task")
    inputs = task_input(task)
    hidden = keras.layers.Embedding(task.vocab_size, d_model, name="token_embedding")(inputs)
    hidden = PositionEmbedding(task.input_shape[0], name="position_embedding")(hidden)
    for index in range(num_layers):
        hidden = encoder_block(
            hidden, index, d_model=d_model, num_heads=num_heads, ff_dim=ff_dim,
            dropout=dropout, activation=activation, regularizer=regularizer,
        )
    hidden = keras.layers.LayerNormalization(epsilon=1e-6, name="final_norm")(hidden)
    return keras.Model(inputs, output_head(hidden, task, regularizer), name="transformer")
