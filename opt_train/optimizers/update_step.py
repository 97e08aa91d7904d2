"""`UpdateStep`: one micro-batch's update of a built gradient pipeline: gradients, the pipeline's stages, apply.

It holds what that update needs: the variables it trains and the pipeline's state.

`TrainOp` (opt_train/optimizers/train_op.py) runs it inside its compiled steps and
counts what it returns. What the step must know of the pipeline it asks the pipeline
for, by the class of a stage's state (`pipeline.handle(state, ScaleState)`), as optax's
`MultiSteps.has_updated` asks the state: the loss scale (the unscale stage's
`ScaleState`, which owns the scaler; the finite check receives it as the extra input
`scale`), the micro-batches an update takes (`accumulate`'s `AccumulateState`), whether
a stop policy fired (the finite check's `FiniteState`), LARC's per-variable rates
(`LarcState`). It keeps no copy of them; the pipeline says what a checkpoint holds of it.

Under tf.distribute (`backend.strategy`), `pipeline.local` runs on every replica
(`strategy.run`) and the rest once per process in cross-replica context; see
opt_train/distributed/tfdist.py.
"""

from __future__ import annotations

import tensorflow as tf

from opt_train.errors import ParamError
from opt_train.optimizers.accumulation import AccumulateState
from opt_train.optimizers.compiled_steps import whole_step_xla
from opt_train.optimizers.finite import FiniteState
from opt_train.optimizers.freezing import check_left_to_train, split_frozen
from opt_train.optimizers.larc import LarcState
from opt_train.optimizers.loss_scaling import ScaleState
from opt_train.optimizers.optimizer_groups import OptimizerGroups
from opt_train.optimizers.transform import report


class UpdateStep(tf.Module):
    """`step(batch)`: loss, gradients, the pipeline's stages and the optimizer's apply for one micro-batch.

    Returns `(loss, grads, learning_rate, update, applied, stages)`, the stages' reports
    without `update` and `apply`; counting is the caller's (`TrainOp`).
    """

    def __init__(self, loss, optimizer, pipeline, backend, var_list, *, freeze_variables_regex=None,
                 jit_compile=False):
        super().__init__(name="update_step")
        self.loss_fn = loss
        self.optimizer = optimizer
        self.backend = backend
        self.pipeline = pipeline
        self._var_list = var_list
        self._freeze_regex = freeze_variables_regex
        # Under Horovod a custom-op all-reduce cannot be XLA-compiled: then the parts around it, the
        # forward/backward pass and the optimizer update, are compiled each as one XLA call. Under
        # tf.distribute the forward/backward pass (on each replica) is; the update runs through the
        # strategy's cross-replica `update`, which XLA cannot hold.
        self._strategy = backend.strategy
        self._mesh = backend.mesh
        around_allreduce = jit_compile and not whole_step_xla(jit_compile, backend)
        self._forward_backward = (
            tf.function(self._gradients, jit_compile=True) if around_allreduce else self._gradients
        )
        self._apply_update = (
            tf.function(self._apply, jit_compile=True)
            if around_allreduce and self._strategy is None else self._apply
        )
        self.state = None
        self._has_gradient = ()
        self.scale = None
        self.accumulation = None
        self.stoppers = ()
        self.larc = None
        self.pipeline_items = {}
        self.variables_to_train = None
        self.frozen_variables = None
        self.built = False

    # -- building ------------------------------------------------------------
    def _resolve_variables(self, batch):
        source = self._var_list
        if source is None:
            if batch is None:
                raise ParamError.said(
                    "batch", "missing",
                    "`var_list` is None, so the variables are found by running the loss once: "
                    "call `build(batch)` or pass `var_list`. Received: batch=None",
                )
            with tf.GradientTape() as tape:
                self.loss_fn(batch)
            source = [v for v in tape.watched_variables() if v.trainable]
        elif isinstance(source, (list, tuple)):
            # Checked first: stored on this trackable, a list becomes a ListWrapper,
            # whose own (empty) `trainable_variables` would hide the Keras variables.
            pass
        elif hasattr(source, "trainable_variables"):
            source = source.trainable_variables
        elif callable(source):
            source = source()
        return list(source)

    def build(self, batch=None):
        """Creates every variable (optimizer slots, the pipeline's state), so a checkpoint can restore first."""
        if self.built:
            return
        variables, frozen = split_frozen(self._resolve_variables(batch), self._freeze_regex)
        if not variables and not frozen:
            raise ParamError("var_list", "missing", "holds no trainable variable", text="No variable to train: "
                             "var_list (or, without one, the trainable variables the loss reads) is empty.")
        check_left_to_train(variables, frozen, self._freeze_regex)
        self.variables_to_train = variables
        self.frozen_variables = frozen
        with self.backend.scope():
            # Inside the strategy's scope (tf.distribute): the optimizer's slots become mirrored
            # variables and the accumulators replica-local ones. Building the slots here, eagerly,
            # also avoids keras#23085 (a first update traced under a strategy fails to build them).
            if isinstance(self.optimizer, OptimizerGroups):
                self.optimizer.build(variables, frozen=frozen)  # a group of frozen variables alone is refused
            else:
                self.optimizer.build(variables)
            self.state = self.pipeline.init(variables)
        # What the step asks the pipeline, each a stage's state found by its class: the loss
        # scale, how many micro-batches an update takes, the stop policies (the finite check),
        # LARC's per-variable rates. A pipeline without one of these stages has no handle
        # (None): no loss scaling, one micro-batch an update, no stop policy.
        self.scale = self.pipeline.handle(self.state, ScaleState)
        self.accumulation = self.pipeline.handle(self.state, AccumulateState)
        self.stoppers = tuple(self.pipeline.handles(self.state, FiniteState))
        self.larc = self.pipeline.handle(self.state, LarcState)
        self.pipeline_items = self.pipeline.checkpoint_items(self.state)
        self.built = True

    # -- the step --------------------------------------------------------------
    def _gradients(self, batch):
        with self.backend.forward(), tf.GradientTape() as tape:
            loss = tf.cast(self.loss_fn(batch), tf.float32)
            scaled = loss if self.scale is None else self.scale.scale_loss(loss)
        grads = tape.gradient(scaled, self.variables_to_train)
        if self._mesh is not None:
            # DTensor has no layout for a scatter update: an embedding's rows arrive dense.
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        return loss, grads

    def _apply(self, grads):
        pairs = [(g, v) for g, v in zip(grads, self.variables_to_train) if g is not None]
        self.optimizer.apply([g for g, _ in pairs], [v for _, v in pairs])

    def _local_part(self, batch):
        """Loss, gradients and the pipeline's local stages on one replica's micro-batch."""
        loss, grads = self._forward_backward(batch)
        grads, _ = self.pipeline.local.update(
            grads, self.state["local"], self.variables_to_train,
            learning_rate=tf.cast(self.optimizer.learning_rate, tf.float32),
            loss_is_finite=tf.math.is_finite(loss), scale=self.scale,
        )
        if self._strategy is not None:
            # A replica returns its gradients as per-replica values: None (a variable without
            # a gradient) cannot be one, so only the present ones leave the replica (set while
            # tracing, the same on every replica).
            self._has_gradient = [g is not None for g in grads]
            return loss, [g for g in grads if g is not None]
        return loss, grads

    def _replicated_part(self, batch):
        """`_local_part` on every replica; this process's mean loss and the per-replica gradients, in variable order.

        The loss is averaged over this process's replicas only: across workers it would
        be a collective per micro-batch (on a small model as costly as the gradients'
        own), while the loop reduces the figures it reports and the finite check asks
        every worker (`backend.all_finite`) where a policy reads the loss.
        """
        loss, present = self._strategy.run(self._local_part, args=(self.backend.split_batch(batch),))
        losses = self._strategy.experimental_local_results(loss)
        loss = tf.add_n(list(losses)) / float(len(losses))
        grads, found = [], iter(present)
        for has_gradient in self._has_gradient:
            grads.append(next(found) if has_gradient else None)
        return loss, grads

    def __call__(self, batch):
        """One micro-batch's update, all that every kind of step shares: gradients, pipelines, apply."""
        if self._strategy is None:
            loss, grads = self._local_part(batch)
        else:
            loss, grads = self._replicated_part(batch)
        learning_rate = tf.cast(self.optimizer.learning_rate, tf.float32)
        grads, _ = self.pipeline.shared.update(
            grads, self.state["accumulate"], self.variables_to_train,
            learning_rate=learning_rate, loss_is_finite=tf.math.is_finite(loss), scale=self.scale,
        )
        stages = report(self.state)
        update = stages.pop("update", tf.constant(True))
        applied = tf.logical_and(update, stages.pop("apply", tf.constant(True)))
        tf.cond(applied, lambda: self._apply_update(grads), lambda: None)
        return loss, grads, learning_rate, update, applied, stages

    def stopping(self):
        """True once a stage's stop policy says the run must end (a tensor; no host sync)."""
        if not self.stoppers:
            return tf.constant(False)
        return tf.reduce_any(tf.stack([stopper.stopping() for stopper in self.stoppers]))

    @property
    def stop_reason(self):
        """None, or why the run must stop (the first stage with a stop policy that says so)."""
        for stopper in self.stoppers:
            reason = stopper.stop_reason()
            if reason is not None:
                return reason
        return None
