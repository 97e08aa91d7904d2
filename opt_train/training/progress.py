"""Progress for people: a live line on a terminal, plain periodic lines in logs and CI."""

from __future__ import annotations

import sys
import time


class Progress:
    """Reports step, loss, learning rate, samples/s and ETA."""

    def __init__(self, total_steps, enabled=True, stream=None):
        self.total = total_steps
        self.enabled = enabled
        self.stream = stream or sys.stdout
        self.live = enabled and self.stream.isatty()
        self.started = time.perf_counter()
        self.start_step = None

    def update(self, step, figures):
        """Called every `print_loss_steps` updates with the figures of that interval."""
        if not self.enabled:
            return
        if self.start_step is None:
            # The first interval includes tracing and compilation: time from here on.
            self.start_step = step
            self.started = time.perf_counter()
        line = self._line(step, figures)
        if self.live:
            self.stream.write("\r\033[K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def message(self, text, every_worker=False):
        """One line; `every_worker`: also from a process that reports no progress (a worker's own line)."""
        if not (self.enabled or every_worker):
            return
        if self.live:
            self.stream.write("\r\033[K")
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self):
        if self.enabled and self.live:
            self.stream.write("\n")
            self.stream.flush()

    def _line(self, step, figures):
        parts = [f"step {step}/{self.total}"]
        for key in ("loss", "learning_rate"):
            if key in figures:
                parts.append(f"{_short(key)} {figures[key]:.4g}")
        if figures.get("loss_scale", 1.0) != 1.0:
            parts.append(f"scale {figures['loss_scale']:.4g}")
        if figures.get("skipped_steps"):
            parts.append(f"skipped {int(figures['skipped_steps'])}")
        if "samples_per_sec" in figures:
            parts.append(f"{figures['samples_per_sec']:.0f} samples/s")
        parts.append(f"ETA {_eta(self._remaining_seconds(step))}")
        return " | ".join(parts)

    def _remaining_seconds(self, step):
        elapsed = time.perf_counter() - self.started
        done = step - self.start_step
        if done <= 0:
            return None
        return elapsed / done * (self.total - step)


def worker_line(noun, backend, batch_size_per_gpu, iter_size):
    """Which worker this process is, and how workers x replicas make the global batch (a worker's first line).

    `noun`: what the backend calls a worker (`worker`, `rank`).
    """
    workers, replicas = backend.num_workers, backend.replicas_per_worker
    global_batch = backend.size * batch_size_per_gpu * iter_size
    role = " (the chief: reports progress, writes checkpoints and summaries)" if backend.is_chief else ""
    return (f"{noun} {backend.worker_index} of {workers}{role}: global batch {global_batch} = "
            f"{workers} {noun}s x {replicas} {backend.replica_noun}{'s' if replicas != 1 else ''} x batch_size_per_gpu "
            f"{batch_size_per_gpu} x iter_size {iter_size}")


def _short(key):
    return {"learning_rate": "lr"}.get(key, key)


def _eta(seconds):
    if seconds is None:
        return "?"
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"
