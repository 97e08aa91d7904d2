"""Which GPUs a sweep worker may use, and a pool that gives each running trial a block of its own.

Found in order: `--gpus 0,1,2,3`, else `CUDA_VISIBLE_DEVICES`, else `nvidia-smi -L`, else
none. A trial gets its block through `CUDA_VISIBLE_DEVICES`; inside it, the workers of
`--np N` split the block as `opt_train.distributed.placement.worker_gpus` says. A GPU named
in `--gpus` is taken at the user's word: on a machine without it the trial still trains on
the CPU. With no GPUs found, nothing is set. TF-free.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from opt_train.config import ConfigError, ConfigIssue
from opt_train.config import sweep_block
from opt_train.errors import ParamError

VISIBLE_VARIABLE = "CUDA_VISIBLE_DEVICES"
GPUS_OPTION = "--gpus"
# The trial's user attribute in the study naming the GPUs its trainer was given: a worker started after
# its driver died (kill -9) keeps them out of its pool while that driver's trainer still runs.
GPUS_ATTR = "gpus"
_SMI_LINE = re.compile(r"^GPU (\d+):")
SMI_SECONDS = 10


def parse_gpus(text, where=GPUS_OPTION):
    """`"0,1,2,3"` as `("0", "1", "2", "3")` (`sweep_block.gpus`); a `ConfigError` at `where` for an empty, repeated
    or unreadable name."""
    try:
        return sweep_block.gpus(text)
    except ParamError as error:
        raise ConfigError([ConfigIssue(where, 0, "", error.code, error.message, text)]) from None


def _smi_gpus():
    """The indices `nvidia-smi -L` lists, or () when it is absent or fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    try:
        listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=SMI_SECONDS, check=False)
    except (OSError, subprocess.SubprocessError):
        return ()
    if listing.returncode != 0:
        return ()
    return tuple(match.group(1) for match in map(_SMI_LINE.match, listing.stdout.splitlines()) if match)


def find_gpus(option=None, environ=None, where=GPUS_OPTION):
    """`(gpu names, where they came from)`: `--gpus`, else `CUDA_VISIBLE_DEVICES`, else `nvidia-smi -L`, else
    `((), None)`.

    `CUDA_VISIBLE_DEVICES` set empty or to -1 hides every GPU (CUDA's own reading): none.
    """
    if option is not None:
        return parse_gpus(option, where), f"{where} {option}"
    environ = os.environ if environ is None else environ
    visible = environ.get(VISIBLE_VARIABLE)
    if visible is not None:
        names = []
        for part in visible.split(","):
            if not part.strip() or part.strip().startswith("-"):
                break  # CUDA reads up to the first invalid entry (-1, by convention, hides all)
            names.append(part.strip())
        return tuple(names), f"{VISIBLE_VARIABLE}={visible}" if names else None
    names = _smi_gpus()
    return names, "nvidia-smi -L" if names else None


def check_parallel(parallel, per_trial, gpus, source):
    """A `ConfigError` at --parallel when `parallel` trials of `per_trial` GPUs each do not fit in `gpus`."""
    if gpus and parallel * per_trial > len(gpus):
        fits = len(gpus) // per_trial
        each = f" ({per_trial} a trial: num_gpus x --np)" if per_trial > 1 else ""
        message = (f"{parallel} trials at once need {parallel * per_trial} GPUs{each}, but {len(gpus)} are "
                   f"available ({source}); give --parallel {fits} or fewer" if fits else
                   f"one trial needs {per_trial} GPUs (num_gpus x --np), but {len(gpus)} are available ({source})")
        raise ConfigError([ConfigIssue("--parallel", 0, "", "out_of_range", message, parallel)])


class GpuPool:
    """The GPUs of one worker; `take(n)` hands out the first `n` free ones (or None), `give(block)` takes them back.

    `held`: GPUs that are free here but in use by a trainer this pool did not start (one a dead
    driver left running); they are neither counted nor handed out.
    """

    def __init__(self, gpus):
        self.gpus = tuple(gpus)
        self.free = list(self.gpus)

    def take(self, count, held=()):
        usable = [gpu for gpu in self.free if gpu not in held]
        if count > len(usable):
            return None
        block = tuple(usable[:count])
        self.free = [gpu for gpu in self.free if gpu not in block]
        return block

    def give(self, block):
        self.free = [gpu for gpu in self.gpus if gpu in self.free or gpu in block]

    def available(self, held=()):
        return sum(gpu not in held for gpu in self.free)


def environment(block):
    """The trial's `CUDA_VISIBLE_DEVICES` for its `block` (empty for none)."""
    return {VISIBLE_VARIABLE: ",".join(block)} if block else {}
