"""The `opt-train` command group: loads each command's module only when it is used.

Exit codes, in one place:

  0  done
  1  training failed (diverged, too many overflows, a rank died)
  2  bad usage or bad config (one line per problem, no traceback)
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from opt_train import __version__

# name -> "module:attribute"; every module here imports neither TensorFlow nor
# Keras at module level, so `opt-train --help` stays instant.
COMMANDS = {
    "train": "opt_train.cli.train:train",
    "eval": "opt_train.cli.eval:eval_command",
    "validate": "opt_train.cli.validate:validate",
    "list": "opt_train.cli.list:list_command",
    "lr": "opt_train.cli.lr:lr",
    "sweep": "opt_train.cli.sweep:sweep",
    "data": "opt_train.cli.data:data",
}


class LazyGroup(click.Group):
    """A click group whose commands are imported on first use."""

    def list_commands(self, ctx):
        return sorted(name for name in COMMANDS if _find_spec(COMMANDS[name]))

    def get_command(self, ctx, name):
        target = COMMANDS.get(name)
        if target is None or not _find_spec(target):
            return None
        module_name, attribute = target.split(":")
        return getattr(importlib.import_module(module_name), attribute)


def _find_spec(target):
    return importlib.util.find_spec(target.split(":")[0]) is not None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="opt-train")
def cli():
    """Train TensorFlow models from one YAML file.

    \b
    opt-train train --config configs/default.yaml
    opt-train validate --config x.yaml --set iter_size=4
    opt-train list optimizers

    Exit codes: 0 done, 1 training failed, 2 bad usage or bad config.
    """


def main(argv=None):
    """Console-script entry point."""
    # TensorFlow's C++ start-up chatter (oneDNN, CUDA probing) buries the progress
    # lines; the user can still ask for it with TF_CPP_MIN_LOG_LEVEL=0.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # A config names user code as `package.module:function` relative to where the
    # user runs, as `python -m` would find it; a console script's path lacks the cwd.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    cli.main(args=argv, prog_name="opt-train")


if __name__ == "__main__":
    main()
