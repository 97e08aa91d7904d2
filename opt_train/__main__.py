"""`python -m opt_train` runs the CLI."""

from opt_train import usercode

# `python -m` puts the current directory first on sys.path; a `yaml.py` there must not
# shadow the real package (user modules are found after the installed ones).
usercode.keep_cwd_behind_packages()

from opt_train.cli.main import main  # noqa: E402

main()
