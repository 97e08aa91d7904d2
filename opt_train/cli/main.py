"""The `opt-train` command group: loads each command's module only when it is used.

Its help ends with the exit codes, printed from their one home, `opt_train.errors.EXIT_CODES`.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from opt_train import __version__, quiet
from opt_train.errors import FAILED_EXIT_CODE, exit_codes_help

# name -> "module:attribute"; every module here imports neither TensorFlow nor
# Keras at module level, so `opt-train --help` stays instant.
COMMANDS = {
    "train": "opt_train.cli.train:train",
    "eval": "opt_train.cli.eval:eval_command",
    "validate": "opt_train.cli.validate:validate",
    "list": "opt_train.cli.list:list_command",
    "lr": "opt_train.cli.lr:lr",
    "sweep": "opt_train.cli.sweep:sweep",
    "export": "opt_train.cli.export:export",
    "predict": "opt_train.cli.predict:predict",
    "convert": "opt_train.cli.convert:convert",
    "data": "opt_train.cli.data:data",
    "configs": "opt_train.cli.configs:configs",
}

# OpenSeq2Seq run.py's --mode: train_eval (the default) is `opt-train train`.
MODES = ("train", "eval", "train_eval")


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


@click.group(
    cls=LazyGroup,
    invoke_without_command=True,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=exit_codes_help(),
)
@click.version_option(__version__, prog_name="opt-train")
@click.option("--verbose", is_flag=True, is_eager=True, expose_value=False,
              callback=lambda ctx, param, value: quiet.configure(True) if value else None,
              help="Show TensorFlow's and absl's own log lines (silenced by default) and the variables init_from did "
                   "not find, e.g. opt-train --verbose train -c x.yaml.")
@click.option("--config", "-c", "configs", multiple=True, type=click.Path(dir_okay=False),
              help="Without a command: run this config (as OpenSeq2Seq's run.py --config_file).")
@click.option("--set", "-s", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Without a command: override one key (repeatable).")
@click.option("--mode", type=click.Choice(MODES), default=None,
              help="Without a command: train (no evaluation), eval (the latest checkpoint) "
                   "or train_eval (default; = opt-train train).")
@click.pass_context
def cli(ctx, configs, overrides, mode):
    """Train TensorFlow models from one YAML file.

    \b
    opt-train --config configs/default.yaml [--mode train|eval|train_eval]
    opt-train --config_file=x.yaml --mode=train --batch_size_per_gpu=64   (run.py's form)
    opt-train --config x.yaml --enable_logs --set max_steps=5   (both forms mixed)
    opt-train train --config configs/default.yaml
    opt-train validate --config x.yaml --set iter_size=4
    opt-train list optimizers
    opt-train configs copy default .
    """
    given = configs or overrides or mode
    if ctx.invoked_subcommand is not None:
        if given:
            raise click.UsageError(
                f"--config/--set/--mode before a command: give them after it (opt-train "
                f"{ctx.invoked_subcommand} --config ...), or leave the command out"
            )
        return
    if not configs:
        raise click.UsageError("--config is required to run without a command (e.g. opt-train --config x.yaml)")
    from opt_train.cli.run import run_mode

    run_mode(configs, overrides, mode or "train_eval")


def main(argv=None):
    """Console-script entry point."""
    # TensorFlow's and absl's chatter buries the progress and error lines: silenced
    # before anything imports TensorFlow; --verbose (or TF_CPP_MIN_LOG_LEVEL=0) shows it.
    quiet.configure()
    command_line = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    from opt_train.cli import run_py

    # OpenSeq2Seq's `run.py --config_file=x --mode=train ...`, or its flags after `train`: the same
    # run in opt-train's words.
    try:
        translated = run_py.opt_train_words(argv)
    except click.UsageError as error:
        error.show()
        sys.exit(error.exit_code)
    if translated is not None:
        argv, notes = translated
        for note in notes:
            click.echo(f"note: {note}", err=True)
    try:
        cli.main(args=argv, prog_name="opt-train")
    except SystemExit as stop:
        if command_line:  # the command line itself, not a caller in Python that goes on
            _exit_without_teardown(stop.code)
        raise


def _exit_without_teardown(code):
    """Ends the process at once once TensorFlow (or part of it) was imported, its exit hooks run and its output flushed.

    What follows `done:` otherwise is the interpreter's teardown of TensorFlow and Keras
    objects and thread pools: 1-3 s on a loaded 2-core machine (benchmarks/exit_latency.py),
    nothing of which the run needs; its files are closed before the command returns. The
    `atexit` hooks run as at any exit, in well under a millisecond: AutoGraph's remove the
    source files it wrote to the temporary folder (two a run that exports, which piled up in
    `/tmp` while they were skipped), Horovod's shuts Horovod down so that the other ranks see
    this one leave (its teardown took a rank ~15 s on a loaded host), a user's factory may
    have its own.
    """
    # A TensorFlow import cut short by Ctrl-C leaves its submodules (and threads) behind.
    if not any(name.partition(".")[0] == "tensorflow" for name in sys.modules):
        return
    import atexit

    from opt_train import scratch

    if isinstance(code, str):
        sys.stderr.write(code + "\n")
        code = FAILED_EXIT_CODE  # as Python ends on `sys.exit("message")`
    atexit._run_exitfuncs()  # logging's own hook among them: its handlers flushed and closed
    scratch.remove_autograph_bytecode()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code or 0)


if __name__ == "__main__":
    main()
