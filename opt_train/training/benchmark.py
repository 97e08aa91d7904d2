"""OpenSeq2Seq's --benchmark: the time per update after the warm-up updates, and the samples all ranks read meanwhile."""

from __future__ import annotations

import time


class Benchmark:
    """OpenSeq2Seq's --benchmark: time per update after the warm-up updates, summed over ranks."""

    def __init__(self, run):
        self.run = run
        # OpenSeq2Seq's bench_start when the config gives it.
        bench_start = getattr(run.config, "bench_start", None)
        self.warmup = bench_start if bench_start is not None else min(10, max(1, run.max_steps // 5))
        self.start_time = None
        self.start_step = None
        self.start_position = None
        self.end_time = None
        self.end_step = None
        self.end_position = None

    def tick(self, step, position):
        """At an update boundary: `step` counted updates, `position` micro-batches consumed."""
        if self.start_time is None and step >= self.warmup:
            self.start_time, self.start_step, self.start_position = time.perf_counter(), step, position
        elif self.start_time is not None:
            self.end_time, self.end_step, self.end_position = time.perf_counter(), step, position

    def figures(self):
        if self.end_step is None:
            return {}
        updates = self.end_step - self.start_step
        elapsed = self.end_time - self.start_time
        # Samples read in the timed stretch (skipped updates' included), this process's replicas.
        samples = ((self.end_position - self.start_position) * self.run.config.batch_size_per_gpu
                   * self.run.backend.replicas_per_worker)
        return {
            "benchmark/time_per_step": elapsed / updates,
            "benchmark/samples_per_sec": self.run.backend.allreduce_scalar(samples / elapsed, op="sum"),
            "benchmark/updates_timed": updates,
            # Samples the timed updates took, all ranks together: what samples_per_sec divides.
            "benchmark/samples_timed": self.run.backend.allreduce_scalar(samples, op="sum"),
        }

    def summary(self, figures):
        """The benchmark's line from `figures()`."""
        if not figures:
            return "benchmark: too few updates to time after warm-up"
        return (
            f"benchmark: {figures['benchmark/time_per_step'] * 1000:.2f} ms/step, "
            f"{figures['benchmark/samples_per_sec']:.0f} samples/s over "
            f"{figures['benchmark/updates_timed']} updates (after {self.warmup} warm-up updates)"
        )
