"""What a run shows and leaves: progress lines, metrics.jsonl records, TensorBoard summaries, the tracker, final_metrics.json.

Only the chief writes; on the other ranks every writer is disabled and only the lines
said with `every_worker` are printed.
"""

from __future__ import annotations

import os

import numpy as np

from opt_train.atomic import read_json
from opt_train.distributed.names import worker_noun

# Stats that are bookkeeping, not figures worth a TensorBoard curve.
_FLAGS = ("update", "applied")


class Outputs:
    """One run's progress lines, records, summaries and tracker, and the figures it last reported.

    `last_figures`: the last report's (`loss`, `samples_per_sec`, the pipeline's scalars);
    `eval_results`: the last evaluation's, by metric name.
    """

    def __init__(self, run, benchmark=False, stream=None):
        from opt_train.tracking import start_tracker
        from opt_train.training.progress import Progress
        from opt_train.training.reporting import Reporter

        self.run = run
        self.config = config = run.config
        self.chief = run.backend.is_chief
        self.progress = Progress(run.max_steps, enabled=self.chief, stream=stream)
        self.tracker = start_tracker(config, self.progress.message, enabled=self.chief and not benchmark)
        self.reporter = Reporter(config.logdir, enabled=self.chief, tracker=self.tracker)
        self.last_figures = {}
        self.eval_results = {}

    def message(self, text, every_worker=False):
        """One line (`every_worker`: printed by every process, not only the chief)."""
        self.progress.message(text, every_worker=every_worker)

    def record(self, record):
        """One record of metrics.jsonl (the chief's)."""
        self.reporter.record(record)

    def started(self, step, resume, benchmark=False):
        """The chief's files once the checkpoint restored whole: config.yaml, data.json, the HParams session."""
        if not self.chief:
            return
        config = self.config
        # Only now that the checkpoint restored whole: config.yaml says what trained the logdir.
        os.makedirs(config.logdir, exist_ok=True)
        config.dump(os.path.join(config.logdir, "config.yaml"))
        from opt_train.data import card  # label vocabulary and input statistics (data.json)

        card.write(config.logdir, self.run.data.task)
        for line in card.describe(self.run.data.task):
            self.message(line)
        if not benchmark:
            from opt_train.board import write_run_hparams

            write_run_hparams(config)  # HParams tab: every run, not only a sweep's trials
        if resume:
            # A killed run's records after the restored step are done again: drop them.
            for note in self.reporter.resume(step):
                self.message(f"note: {note}")

    def summaries(self, step, result, reported):
        """The update's statistics as TensorBoard summaries (`reported`: the step's loss is the report's)."""
        # On a reported step `loss` is the interval's mean, written by `report`: one point per step.
        drop = ("loss",) if reported else ()
        self.reporter.summaries(step, {k: v for k, v in _without_flags(result).items() if k not in drop})

    def report(self, step, result, loss, micro_batches, elapsed):
        """The progress line, record and summaries of a report: `loss` the interval's mean, over `elapsed` seconds."""
        figures = _scalars(result)
        figures["loss"] = loss
        # Samples read, skipped updates' included: what the hardware processed.
        samples = micro_batches * self.config.batch_size_per_gpu * self.run.backend.size
        figures["samples_per_sec"] = samples / max(elapsed, 1e-9)
        self.last_figures = figures
        self.progress.update(step, figures)
        self.reporter.record({"step": step, **figures})
        self.reporter.summaries(step, {"loss": figures["loss"], "samples_per_sec": figures["samples_per_sec"]})

    def evaluated(self, step, results, uses_ema):
        """An evaluation's summaries, record and line."""
        from opt_train.training.evaluation import weights_note

        self.eval_results = results
        self.reporter.eval_summaries(step, results)
        self.reporter.record({"step": step, **{f"eval/{k}": v for k, v in results.items()}})
        shown = ", ".join(f"{k} {v:.4g}" for k, v in results.items())
        self.message(f"eval at step {step}{weights_note(uses_ema)}: {shown}")

    def final_figures(self, step):
        """final_metrics.json's figures at `step`: the last report's training figures and the last evaluation."""
        if "loss" in self.last_figures:  # the last update is always reported
            train_figures = {
                "train/loss": self.last_figures["loss"],
                "skipped_steps": self.last_figures.get("skipped_steps", 0),
            }
        else:
            # A run restarted after it ended trains nothing: its training figures stay those
            # of the run that trained, not a NaN loss over no updates.
            train_figures = self._earlier_train_figures(step)
        return {
            "global_step": step,
            **train_figures,
            **{f"eval/{k}": v for k, v in self.eval_results.items()},
        }

    def done(self, step, final):
        """The chief's final_metrics.json, the tracker's end and the last line; another rank's own last line."""
        config = self.config
        if self.chief:
            from opt_train.training.reporting import write_final_metrics

            write_final_metrics(os.path.join(config.logdir, "final_metrics.json"), final)
            self.tracker.finish(final)
            shown = ", ".join(f"{k} {v:.4g}" for k, v in self.eval_results.items())
            evaluated = f"eval {shown}; " if shown else ""  # --mode train evaluates nothing
            self.message(f"done: step {step}; {evaluated}logdir {config.logdir}")
        else:
            self.message(f"done: step {step} ({self.worker_name()}); {worker_noun(config.distributed)} 0 reports "
                         f"the figures in logdir {config.logdir}", every_worker=True)

    def worker_name(self):
        """This process as its backend names it (`worker 1 of 2`, `rank 1 of 2`)."""
        backend = self.run.backend
        return f"{worker_noun(self.config.distributed)} {backend.worker_index} of {backend.num_workers}"

    def _earlier_train_figures(self, step):
        """What the run that trained to `step` reported: final_metrics.json, else its metrics.jsonl.

        A figure known nowhere is left out, never written as NaN.
        """
        earlier = read_json(os.path.join(self.config.logdir, "final_metrics.json")) or {}
        record = self.reporter.last_record("loss", step) if self.chief else None
        figures = {}
        for key, record_key in (("train/loss", "loss"), ("skipped_steps", "skipped_steps")):
            if key in earlier and earlier[key] not in ("nan", None):
                figures[key] = earlier[key]
            elif record and record_key in record:
                figures[key] = record[record_key]
        return figures

    def close(self):
        self.tracker.close()
        self.progress.close()
        self.reporter.close()


def _without_flags(result):
    return {name: value for name, value in result.items() if name not in _FLAGS}


def _scalars(result):
    """The pipeline's one-element stats as Python floats (per-variable tensors left out)."""
    figures = {}
    for name, value in _without_flags(result).items():
        value = np.asarray(value)
        if value.size == 1:
            # .item(): a one-element variable (a 1-unit layer's bias) is shape (1,), not a scalar.
            figures[name] = float(value.item())
    return figures
