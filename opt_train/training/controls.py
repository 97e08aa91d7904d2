"""What acts on each evaluation: lr control (newbob, ReduceLROnPlateau), early stopping, the best checkpoint."""

from __future__ import annotations

import math
import os

import keras
import numpy as np
import tensorflow as tf

from opt_train import registry
from opt_train.data.objective_names import monitor_direction
from opt_train.errors import ParamError


def improved(score, best, min_delta, direction):
    """Keras's `MonitorCallback._is_improvement`: better than `best` by more than `min_delta`, in `direction`."""
    if direction == "max":
        return score - abs(min_delta) > best
    return score + abs(min_delta) < best


def worst(direction):
    """The `best` score before the first evaluation (Keras's None): every score improves on it."""
    return -np.inf if direction == "max" else np.inf


class ScaledSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """`inner(step) * scale`: the lr policy as configured, times the factor the control sets."""

    def __init__(self, inner, scale=1.0):
        self.inner = inner
        # float64: the factor is a product of many decays, each applied on the host.
        self.scale = tf.Variable(float(scale), dtype=tf.float64, trainable=False, name="lr_control_scale")

    def __call__(self, step):
        rate = self.inner(step)
        return rate * tf.cast(self.scale, rate.dtype)

    def get_config(self):
        return {"inner": keras.saving.serialize_keras_object(self.inner), "scale": float(self.scale.numpy())}


class LearningRateControl:
    """Reads each evaluation's `monitor` metric and sets the schedule's factor.

    Its state (factor, best / last score, counters) is a set of variables in the
    run's checkpoint, written after the evaluation at the same step, so a resumed
    run continues the control exactly. Under Horovod and tf workers rank 0 decides (it
    alone evaluates) and the other ranks receive the state; on a mesh across workers each
    worker decides on the chief's figures (`Controls`).
    """

    def __init__(self, params, schedule, backend):
        self.params = dict(params)
        self.mode = self.params.pop("mode")
        # The mode's row names its rule (one of the methods below), called as `rule(self, score, base_rate)`.
        self.rule = registry.table("lr_controls").load(self.mode)
        # newbob reads an error (lower is better, RETURNN's); plateau goes Keras's `mode` way.
        self.direction = monitor_direction(self.params["monitor"], self.params.get("monitor_mode", "min"))
        self.schedule = schedule
        self.backend = backend
        self.state = {
            "last": tf.Variable(np.nan, dtype=tf.float64, trainable=False),
            "best": tf.Variable(worst(self.direction), dtype=tf.float64, trainable=False),
            "wait": tf.Variable(0, dtype=tf.int64, trainable=False),
            "cooldown": tf.Variable(0, dtype=tf.int64, trainable=False),
            "evaluations": tf.Variable(0, dtype=tf.int64, trainable=False),
        }

    def checkpoint_items(self):
        return {"lr_control": {"scale": self.schedule.scale, **self.state}}

    def variables(self):
        return [self.schedule.scale, *self.state.values()]

    def after_evaluation(self, results, step, say=None):
        """Updates the factor from `results[monitor]` (where there are results); returns the learning rate now in force.

        `step` is the optimizer's update count: the policy's rate there is what
        `min_learning_rate` / `min_lr` bound. `say` gets a line when the rate changes.
        """
        base_rate = float(self.schedule.inner(step))
        before = float(self.schedule.scale.numpy())
        if results:
            score = results.get(self.params["monitor"])
            if score is None:
                raise ParamError.at(
                    "lr_control.monitor", "unknown_name",
                    f"is not an eval metric (this run's evaluation reports {', '.join(sorted(results))})",
                    self.params["monitor"],
                )
            self.rule(self, float(score), float(base_rate))
        if self.backend.size > 1:
            self.backend.broadcast_variables(self.variables(), root_rank=0)
        after = float(self.schedule.scale.numpy())
        if say and after != before:
            say(f"lr_control ({self.mode}): learning rate {base_rate * before:.4g} -> {base_rate * after:.4g}")
        return base_rate * after


    # -- the rules -----------------------------------------------------------
    def _scaled(self, decay, base_rate, minimum, grow):
        """RETURNN's calc_learning_rate_decay_or_grow on lr = base_rate * scale."""
        rate = base_rate * float(self.schedule.scale.numpy())
        if decay:
            rate *= self.params["decay"]
            rate = max(rate, minimum)
        elif grow:
            rate *= self.params["growth"]
        if base_rate > 0:
            self.schedule.scale.assign(rate / base_rate)

    def _newbob(self, score, base_rate):
        """NewbobRelative: decay when (new - old) / |new| (or |old|) exceeds the threshold."""
        old = float(self.state["last"].numpy())
        self.state["last"].assign(score)
        if np.isnan(old):
            return
        divisor = abs(old) if self.params["relative_error_div_by_old"] else abs(score)
        relative = (score - old) / divisor
        if self.params["relative_error_relative_lr"]:
            # RETURNN divides by lr / initial lr: a lower rate is expected to improve less.
            scale = float(self.schedule.scale.numpy())
            if scale > 0:
                relative /= scale
        decay = relative > self.params["relative_error_threshold"]
        self._scaled(decay, base_rate, self.params["min_learning_rate"], grow=not decay)

    def _newbob_abs(self, score, base_rate):
        """NewbobAbs: decay when new - old exceeds the threshold."""
        old = float(self.state["last"].numpy())
        self.state["last"].assign(score)
        if np.isnan(old):
            return
        decay = score - old > self.params["error_threshold"]
        self._scaled(decay, base_rate, self.params["min_learning_rate"], grow=not decay)

    def _plateau(self, score, base_rate):
        """Keras' ReduceLROnPlateau (its `mode` is `monitor_mode`), step by step as its on_epoch_end."""
        params, state = self.params, self.state
        if state["cooldown"].numpy() > 0:
            state["cooldown"].assign_sub(1)
            state["wait"].assign(0)
        if improved(score, float(state["best"].numpy()), params["min_delta"], self.direction):
            state["best"].assign(score)
            state["wait"].assign(0)
        elif state["cooldown"].numpy() <= 0:
            state["wait"].assign_add(1)
            if state["wait"].numpy() >= params["patience"]:
                rate = base_rate * float(self.schedule.scale.numpy())
                if rate > np.float32(params["min_lr"]):
                    new_rate = max(rate * params["factor"], params["min_lr"])
                    self.schedule.scale.assign(new_rate / base_rate)
                    state["cooldown"].assign(params["cooldown"])
                    state["wait"].assign(0)
        state["evaluations"].assign_add(1)



class EarlyStopping:
    """Keras' EarlyStopping: stop when `monitor` has not improved by `min_delta` for `patience` evaluations.

    `mode` (auto, min, max) says which way it improves, as Keras's; auto by Keras's rule.
    """

    def __init__(self, params):
        self.params = params
        self.direction = monitor_direction(params["monitor"], params.get("mode", "auto"))
        self.state = {
            "best": tf.Variable(worst(self.direction), dtype=tf.float64, trainable=False),
            "wait": tf.Variable(0, dtype=tf.int64, trainable=False),
            "evaluations": tf.Variable(0, dtype=tf.int64, trainable=False),
            "stopped": tf.Variable(False, trainable=False),
        }

    def after_evaluation(self, score):
        """True when training must stop (Keras' on_epoch_end, evaluation by evaluation)."""
        state = self.state
        epoch = int(state["evaluations"].numpy())
        state["evaluations"].assign_add(1)
        state["wait"].assign_add(1)
        if improved(score, float(state["best"].numpy()), self.params["min_delta"], self.direction):
            state["best"].assign(score)
            state["wait"].assign(0)
            return False
        if state["wait"].numpy() >= self.params["patience"] and epoch > 0:
            state["stopped"].assign(True)
        return bool(state["stopped"].numpy())


class Controls:
    """The run's controls that act after each evaluation, all restored exactly on resume.

    `lr_control` (a factor on the lr policy), `early_stopping`, and
    `restore_best_checkpoint` (the model with the best eval score kept in
    `logdir/best/`, which `opt-train eval` then reads: early stopping's monitor and
    direction when it is set, else the eval loss). Under Horovod and tf workers rank 0
    evaluates and decides; the other ranks receive the state. On a mesh across workers the
    chief evaluates on plain copies and its state cannot be broadcast as variables there
    (the lr factor is a DVariable): every worker receives the chief's figures instead
    (`shared_figures`) and decides the same, and every worker writes its shards of the
    best checkpoint (a DTensor save is collective).
    """

    def __init__(self, run):
        config = run.config
        self.backend = run.backend
        self.lr = None
        if config.lr_control is not None and isinstance(run.schedule, ScaledSchedule):
            self.lr = LearningRateControl(config.lr_control, run.schedule, run.backend)
        self.early = EarlyStopping(config.early_stopping) if getattr(config, "early_stopping", None) else None
        self.best_dir = os.path.join(config.logdir, "best") if getattr(config, "restore_best_checkpoint", False) else None
        self.best_monitor, self.best_direction = best_monitor(config)
        self.best = tf.Variable(worst(self.best_direction), dtype=tf.float64, trainable=False)
        self.manager = None
        self.alongside = None  # a non-writer's checkpoint, written into the writer's best one (`saves_together`)
        backend = run.backend
        self.shares_figures = backend.mesh is not None and backend.num_workers > 1

    def checkpoint_items(self):
        items = {}
        if self.lr:
            items.update(self.lr.checkpoint_items())
        if self.early:
            items["early_stopping"] = dict(self.early.state)
        if self.best_dir:
            items["best_eval_loss"] = self.best  # the name older checkpoints hold it under; any monitor now
        return items

    def attach(self, checkpoint, writer):
        """The run's `tf.train.Checkpoint`, for the copy kept as the best one (rank 0 writes it; with
        `Backend.saves_together` every worker writes its part into it)."""
        if self.best_dir and writer:
            self.manager = tf.train.CheckpointManager(checkpoint, self.best_dir, max_to_keep=1)
        elif self.best_dir and self.backend.saves_together:
            self.alongside = checkpoint

    def stopped(self):
        """True when early stopping ended the run (a restart trains nothing more)."""
        return bool(self.early and self.early.state["stopped"].numpy())

    def after_evaluation(self, results, step, updates, say):
        """Acts on `results` (rank 0's; empty elsewhere). Returns True when training must stop.

        Every rank calls it at the same step: on a mesh across workers it runs collectives.
        """
        if self.shares_figures and self.monitors():
            results = shared_figures(self.backend, results, self.monitors())
        if self.lr:
            self.lr.after_evaluation(results, updates, say)
        if self.best_dir and results and (self.manager or self.alongside):
            score = float(results[self.best_monitor])
            if improved(score, float(self.best.numpy()), 0.0, self.best_direction):
                self.best.assign(score)
                if self.manager:
                    self.manager.save(checkpoint_number=step)
                else:
                    from opt_train.training.checkpoints import write_alongside

                    write_alongside(self.alongside, self.best_dir, step)
                say(f"best eval {self.best_monitor} so far ({best_reason(self.best_direction, self.early)}) "
                    f"at step {step}: kept in {self.best_dir}")
        stop = False
        if self.early:
            if results:
                monitor = self.early.params["monitor"]
                if monitor not in results:
                    raise ParamError.at(
                        "early_stopping.monitor", "unknown_name",
                        f"is not an eval metric (this run's evaluation reports {', '.join(sorted(results))})", monitor,
                    )
                self.early.after_evaluation(float(results[monitor]))
            if self.backend.size > 1:
                self.backend.broadcast_variables(list(self.early.state.values()), root_rank=0)
            stop = self.stopped()
            if stop:
                say(f"early stopping at step {step}: eval {self.early.params['monitor']} has not improved "
                    f"for {self.early.params['patience']} evaluations")
        return stop

    def monitors(self):
        """The eval metrics the controls read, each once, in a fixed order (the same on every worker)."""
        names = [self.lr.params["monitor"] if self.lr else None, self.early.params["monitor"] if self.early else None,
                 self.best_monitor if self.best_dir else None]
        return list(dict.fromkeys(name for name in names if name is not None))


def shared_figures(backend, results, names):
    """The chief's `results[name]` of each of `names`, on every worker ({} when the chief did not evaluate).

    One sum over the workers per figure, the others adding 0 (exact, NaN and infinities
    included), so every worker holds the very numbers the chief decides on and each then
    decides the same; every worker must call it at the same step. A name the chief's
    results lack comes as NaN (the chief itself then refuses the monitor).
    """
    chief = backend.is_chief
    if not backend.allreduce_scalar(int(chief and bool(results)), op="sum"):
        return {}
    shared = {name: backend.allreduce_scalar(float(results.get(name, math.nan)) if chief else 0.0, op="sum")
              for name in names}
    return {**results, **shared} if chief else shared


def best_monitor(config):
    """`(monitor, "min" | "max")` that `restore_best_checkpoint` keeps the best of: early stopping's, else eval loss."""
    early = getattr(config, "early_stopping", None)
    if early:
        return early["monitor"], monitor_direction(early["monitor"], early.get("mode", "auto"))
    return "loss", "min"


def best_reason(direction, early):
    """Why that figure, in the best-checkpoint line."""
    which = "highest" if direction == "max" else "lowest"
    return f"{which}; early_stopping's monitor" if early else f"{which}; no early_stopping monitor"


def best_checkpoint(logdir):
    """The checkpoint `restore_best_checkpoint` kept in `logdir/best`, or None."""
    return tf.train.latest_checkpoint(os.path.join(logdir, "best"))
