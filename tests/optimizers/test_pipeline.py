"""The built `Pipeline`: what the train op asks it for by the class of a stage's state, and what a
checkpoint holds of it; against a hand-written SGD step, Keras's LossScaleOptimizer, and the keys the
checkpoints of earlier versions hold."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from opt_train.errors import ParamError
from opt_train.optimizers.accumulation import AccumulateState
from opt_train.optimizers.allreduce import allreduce
from opt_train.optimizers.finite import FiniteState, finite_check
from opt_train.optimizers.larc import LarcState
from opt_train.optimizers.loss_scaling import ScaleState
from opt_train.optimizers.pipeline import Pipeline, optimize_loss
from opt_train.optimizers.train_op import TrainOp
from opt_train.optimizers.transform import identity, named_chain
from opt_train.process_group import SingleProcess

X = tf.constant([[1.0, 2.0], [0.5, -1.0]])
Y = tf.constant([[1.0], [0.0]])
W0 = np.array([[0.3], [-0.2]], np.float32)
LR = 0.1


def _loss(w):
    return lambda batch: tf.reduce_mean(tf.square(tf.matmul(X, w) - Y)) * tf.cast(batch, tf.float32)


def _batches(*values):
    return iter(tf.data.Dataset.from_tensor_slices(tf.constant(values, tf.float32)).repeat())


def _built(**settings):
    w = tf.Variable(W0, name="w")
    op = optimize_loss(_loss(w), "SGD", {"learning_rate": LR}, var_list=[w], **settings)
    return w, op.build()


def test_without_a_backend_one_process_trains_and_on_horovod_asks_for_the_horovod_one():
    # The backend is the caller's to choose (the distributed layer is above this one); None is one process.
    w = tf.Variable(W0, name="w")
    assert isinstance(optimize_loss(_loss(w), "SGD", {"learning_rate": LR}, var_list=[w]).backend, SingleProcess)
    with pytest.raises(ParamError, match=r'on_horovod=True` needs the Horovod backend passed in: '
                                         r'`distributed=opt_train.distributed.get_backend\("horovod"\)`') as raised:
        optimize_loss(_loss(w), "SGD", {"learning_rate": LR}, var_list=[w], on_horovod=True)
    assert raised.value.code == "missing"


def test_each_handle_is_the_one_stage_state_of_its_class():
    _, op = _built(loss_scaling="Backoff", iter_size=2, larc_params={"larc_eta": 0.01}, on_nonfinite="stop")
    state, pipeline = op.update_step.state, op.update_step.pipeline
    scale = pipeline.handle(state, ScaleState)
    assert scale is state["local"]["unscale"] and op.loss_scaler is scale.loss_scaler
    accumulation = pipeline.handle(state, AccumulateState)
    assert accumulation is state["accumulate"] and op.micro_batches_per_update == 2
    assert pipeline.handles(state, FiniteState) == [state["accumulate"].inner["finite"]]
    assert pipeline.handle(state, LarcState) is state["accumulate"].inner["post"]
    with pytest.raises(ValueError, match="One stage may keep a FiniteState. Received: 2 stages keep one"):
        pipeline.handle({"a": state, "b": state}, FiniteState)


def test_the_finite_check_moves_the_scale_the_unscale_stage_owns():
    # Two updates of two micro-batches, the second with an infinite loss factor: the scale that
    # multiplies the loss is the one the verdict moved, as Keras's LossScaleOptimizer moves its own.
    _, op = _built(loss_scaling="Dynamic", loss_scaling_params={"initial_scale": 64.0, "dynamic_growth_steps": 1},
                   iter_size=2, count_skipped_updates=True)
    reference = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.0), initial_scale=64.0,
                                                    dynamic_growth_steps=1)
    kept = keras.Variable(np.zeros(1, np.float32))
    reference.build([kept])
    batches = _batches(1.0, 1.0, 1.0, np.inf)
    for overflow in (False, True, False):
        result = op.update(batches)
        reference.apply([tf.constant([np.inf if overflow else 1.0])], [kept])
        assert float(result["loss_scale"]) == float(reference.dynamic_scale.numpy())
        assert float(op.loss_scaler.loss_scale) == float(reference.dynamic_scale.numpy())
    assert int(result["skipped_steps"]) == 1


def test_a_pipeline_without_unscale_or_accumulate_stage_trains_unscaled_one_micro_batch_an_update():
    # No ScaleState and no AccumulateState: the loss is not scaled, an update is one micro-batch,
    # no `loss_scale` is reported and no scaler is checkpointed. The weights are plain SGD's.
    backend = SingleProcess()
    pipeline = Pipeline(local=identity(), shared=named_chain(("allreduce", allreduce(backend)),
                                                             ("finite", finite_check(backend))))
    w = tf.Variable(W0, name="w")
    op = TrainOp(_loss(w), keras.optimizers.SGD(LR), pipeline, backend, [w], count_skipped_updates=False).build()
    assert op.loss_scaler is None and op.micro_batches_per_update == 1 and op.stop_reason is None
    assert "loss_scaler" not in op.checkpoint_items() and "stop_code" in op.checkpoint_items()
    batches = _batches(1.0, 2.0)
    expected = W0.copy()
    for factor in (1.0, 2.0):
        result = op.update(batches)
        gradient = factor * 2.0 * X.numpy().T @ (X.numpy() @ expected - Y.numpy()) / 2.0
        expected = expected - LR * gradient
        np.testing.assert_allclose(w.numpy(), expected, rtol=1e-6)
        assert "loss_scale" not in result and bool(result["applied"])
    op(tf.constant(np.inf))  # a non-finite loss skips the update: the check judges without a scale
    np.testing.assert_allclose(w.numpy(), expected, rtol=1e-6)
    assert int(op.update_step.state["accumulate"]["finite"].skipped_steps.numpy()) == 1


# What a checkpoint of this run holds, as written by opt-train before the loss scaler moved into
# the unscale stage's state (tf.train.list_variables of a checkpoint written at commit 882de8c):
# the keys stay, so every earlier checkpoint restores.
EARLIER_KEYS = {
    "global_step/.ATTRIBUTES/VARIABLE_VALUE": [],
    "loss_scaler/scaler/state/.ATTRIBUTES/VARIABLE_VALUE": [2],
    "micro_batches/.ATTRIBUTES/VARIABLE_VALUE": [],
    "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE": [],
    "optimizer/_learning_rate/.ATTRIBUTES/VARIABLE_VALUE": [],
    "optimizer/_trainable_variables/0/.ATTRIBUTES/VARIABLE_VALUE": [2, 1],
    **{f"pipeline/state/{i}/.ATTRIBUTES/VARIABLE_VALUE": [] for i in (0, 1, 3, 4, 5, 6, 8, 9, 10)},
    "pipeline/state/2/.ATTRIBUTES/VARIABLE_VALUE": [2, 1],  # the accumulator; 7 is stop_code's
    "stop_code/.ATTRIBUTES/VARIABLE_VALUE": [],
}


def test_a_checkpoint_keeps_the_keys_earlier_checkpoints_have_and_restores_whole(tmp_path):
    settings = dict(loss_scaling="Backoff", iter_size=2, clip_gradients=1.0, on_nonfinite="stop")
    w, op = _built(**settings)
    batches = _batches(1.0, np.inf, 1.0, 1.0, 1.0)
    op.update(batches)  # skipped: the Backoff scale halves
    op.update(batches)
    op(tf.constant(1.0))  # half an update: the accumulator holds a micro-batch
    path = tf.train.Checkpoint(**op.checkpoint_items()).write(os.path.join(tmp_path, "ckpt"))
    saved = {name: shape for name, shape in tf.train.list_variables(path)
             if not name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH")}
    assert saved == EARLIER_KEYS
    restored_w, restored = _built(**settings)
    tf.train.Checkpoint(**restored.checkpoint_items()).read(path).assert_consumed()
    assert float(restored.loss_scaler.loss_scale) == float(op.loss_scaler.loss_scale) == 2.0**13
    # The restored run goes on as the first: the half-done update, then the next.
    for train_op in (op, restored):
        train_op.update(batches)
    np.testing.assert_array_equal(restored_w.numpy(), w.numpy())
    assert [v.name for v in restored.state_variables()] == [v.name for v in op.state_variables()]
