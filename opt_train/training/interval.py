"""The report interval: the loss and pace of the updates since the last report, carried across stops in checkpoints."""

from __future__ import annotations

import time


class ReportInterval:
    """What the next report prints: the interval's mean loss and the time its samples took.

    The loss is a function of the step alone: the mean over every micro-batch since the
    last multiple of `print_loss_steps`, whatever stops and resumes came between. The part
    run before a checkpoint travels in it (`variable`, the checkpoint item
    `report_interval`: loss sum, micro-batches), so a run resumed inside an interval
    reports the same loss as one never stopped.

    `position` is the train op's data position (micro-batches consumed) as of the last count.
    """

    def __init__(self, tf):
        self.variable = tf.Variable([0.0, 0.0], dtype=tf.float64, trainable=False, name="report_interval")
        self.position = 0
        self._losses = []  # (loss sum, micro-batches) since the last fold
        self._carried = (0.0, 0)  # (loss sum, micro-batches) folded so far
        self._start = None  # perf_counter at the interval's start, moved on by pauses
        self._first = 0  # the data position at the interval's start

    def restored(self, position):
        """After the checkpoint restored (or a fresh start): the carried part and the data position."""
        total, count = self.variable.numpy()
        self._carried = (float(total), int(count))
        self.position = position

    def open(self):
        """Starts timing at the first update this process runs (a later call leaves it running)."""
        if self._start is None:
            self.restart()

    def restart(self):
        self._start, self._first = time.perf_counter(), self.position

    def count(self, loss_sum, position):
        """Adds the loss sum (float64) of the micro-batches run up to data position `position`."""
        self._losses.append((loss_sum, position - self.position))
        self.position = position

    def paused(self, seconds):
        """Evaluation and saving are left out of the interval's time."""
        self._start += seconds

    def carry(self, mean_across):
        """Stores the interval so far in `variable`, before a checkpoint (`mean_across`: over ranks)."""
        total, count = self._fold()
        total = mean_across(total)
        self._carried = (total, count)
        self.variable.assign([total, float(count)])

    def close(self, ends, mean_across):
        """`(mean loss, micro-batches, seconds)` of the interval; `ends`: the next one starts from nothing.

        The caller restarts the timer once its report is written (`restart()`).
        """
        micro_batches = self.position - self._first
        elapsed = time.perf_counter() - self._start
        total, count = self._fold()
        # The global batch's loss: the ranks' equal-sized shares, averaged.
        loss = mean_across(total / count)
        if ends:
            self._carried = (0.0, 0)
        return loss, micro_batches, elapsed

    def _fold(self):
        """The interval's (loss sum, micro-batches) so far, its pending losses added in order."""
        total, count = self._carried
        for loss_sum, micro_batches in self._losses:
            total += float(loss_sum)
            count += micro_batches
        self._carried, self._losses = (total, count), []
        return total, count
