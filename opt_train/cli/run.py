"""`opt-train --config x.yaml [--mode train|eval|train_eval]`: OpenSeq2Seq's run.py on opt-train's commands."""

import json

import click

from opt_train.cli.common import import_tensorflow, load, user_errors


def run_mode(configs, overrides, mode):
    """train_eval = `opt-train train`; train = the same without evaluation; eval = `opt-train eval`."""
    config = load(configs, overrides)
    import_tensorflow()
    with user_errors():
        if mode == "eval":
            from opt_train.training import evaluate

            click.echo(json.dumps(evaluate(config, report=lambda line: click.echo(line, err=True)), indent=2, sort_keys=True))
            return
        from opt_train.training import train

        train(config, evaluate=mode == "train_eval")
