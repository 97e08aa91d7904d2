"""`StepFigures`: what a train step reports: its statistics, and with `summarize` the per-variable summaries asked for."""

from __future__ import annotations

import tensorflow as tf

from opt_train.optimizers.finite import l2_norm
from opt_train.optimizers.freezing import variable_path


class StepFigures:
    """`figures(...)`: a step's result dict, from its update's outputs (`UpdateStep`) and `global_step`."""

    def __init__(self, summaries, backend, update_step):
        self.summaries = summaries
        self._backend = backend
        self._update_step = update_step

    def __call__(self, loss, grads, learning_rate, update, applied, stages, global_step, summarize):
        larc = {name: stages.pop(name) for name in ("larc_ratio", "larc_clip_on") if name in stages}
        result = {
            "loss": loss,
            "global_step": global_step.read_value(),
            "update": update,
            "applied": applied,
            "learning_rate": learning_rate,
            **stages,  # loss_scale first: the unscale stage's
        }
        if summarize:
            entries = self._summary_entries(grads, larc, learning_rate)
            if self._backend.mesh is not None:  # whole on every device: the reporter reads them as NumPy
                entries = {name: self._backend.whole(value) for name, value in entries.items()}
            result.update(entries)
        return result

    def _summary_entries(self, grads, larc, learning_rate):
        entries = {}
        wanted = set(self.summaries)
        larc_state = self._update_step.larc
        # Each variable's rate over the reported one: its optimizer group's lr_multiplier, as LARC holds it.
        rate_scale = larc_state.rate_scale if larc_state is not None and larc_state.rate_scale else (1.0,) * len(grads)
        for i, (g, v) in enumerate(zip(grads, self._update_step.variables_to_train)):
            name = variable_path(v).replace(":", "_")
            if g is not None and "gradients" in wanted:
                entries[f"gradients/{name}"] = tf.convert_to_tensor(g)
            if g is not None and "gradient_norm" in wanted:
                entries[f"gradient_norm/{name}"] = l2_norm(tf.convert_to_tensor(g))
            if "variables" in wanted:
                entries[f"variables/{name}"] = tf.convert_to_tensor(v)
            if "variable_norm" in wanted:
                entries[f"variable_norm/{name}"] = l2_norm(v)
            if larc and "larc_summaries" in wanted:
                ratio = larc["larc_ratio"][i]
                entries[f"larc/grad_update/{name}"] = ratio
                entries[f"larc/clip_on/{name}"] = tf.cast(larc["larc_clip_on"][i], tf.int32)
                entries[f"larc/final_lr/{name}"] = learning_rate * rate_scale[i] * ratio
        return entries
