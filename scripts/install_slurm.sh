#!/usr/bin/env bash
# Installs Debian's SLURM daemons and commands (slurmctld, slurmd, srun/sbatch/squeue/sacct) and
# MUNGE where they are absent: the SLURM tests start a throwaway single-node cluster from them
# (tests/slurm/conftest.py). Nothing is started here.
set -euo pipefail
here="$(dirname "$0")"
bash "$here/apt_install.sh" munge /usr/sbin/munged "the SLURM tests"
bash "$here/apt_install.sh" slurmctld /usr/sbin/slurmctld "the SLURM tests"
bash "$here/apt_install.sh" slurmd /usr/sbin/slurmd "the SLURM tests"
bash "$here/apt_install.sh" slurm-client /usr/bin/sbatch "the SLURM tests"
