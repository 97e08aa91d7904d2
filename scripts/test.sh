#!/usr/bin/env bash
# Runs the test suite: installs what the tests need (this checkout with its dev extras,
# unless scripts/installed.py finds it installed already; Horovod built against the
# installed TensorFlow), then pytest. Extra arguments go to pytest,
# e.g. `bash scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=dev,profile,mlflow
python scripts/installed.py "$EXTRAS" || python -m pip install --quiet --disable-pip-version-check -e ".[$EXTRAS]"
bash scripts/install_horovod.sh
bash scripts/install_postgres.sh
bash scripts/install_sshd.sh
bash scripts/install_slurm.sh
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
# Bytecode is written (to the checkout's __pycache__/, ignored by git): where a container sets
# PYTHONDONTWRITEBYTECODE, every one of the suite's few hundred processes would compile opt-train
# from source again, and each xdist worker the tests (~4 s of CPU at collection).
unset PYTHONDONTWRITEBYTECODE
# Three workers on the 2 cores, each handed the next test as it frees: many tests wait (on a
# timeout, a server, SLURM, a signalled process), and with two workers the cores sat idle an
# eighth of the run; three keep them busy (the whole suite 1,103 -> 900 s, 2026-11-28, same tree).
# Four add contention, not work: 692 s with three, 721 s with four, on a later tree.
# The tests of one xdist_group (those sharing a fixture wider than one test, tests/conftest.py)
# all go to one worker, so that the fixture is built once. `-n 0` as an extra argument runs in
# one process.
exec python -m pytest -n 3 --dist loadgroup "$@"
