"""Reads two epochs of a `tfrecord` dataset on one Horovod rank and saves the example ids it saw.

Run on each rank of tests/distributed/test_horovod_backend.py's horovodrun job, before its
collectives (tests/distributed/horovod_worker.py), or alone as
`horovodrun -np 2 -H localhost:2 --gloo python tfrecord_rank_worker.py PARAMS_JSON OUTDIR`.
"""

import json
import sys

from opt_train import quiet


def main(params_path, outdir):
    from opt_train.data import build_data
    from opt_train.distributed import get_backend

    backend = get_backend("horovod")
    with open(params_path) as handle:
        params = json.load(handle)
    data = build_data("tfrecord", params, batch_size=4, seed=11, rank=backend.rank, size=backend.size)
    ids = [int(v) for x, _ in data.train.take(2 * data.steps_per_epoch) for v in x.numpy()[:, 0, 0]]
    with open(f"{outdir}/rank{backend.rank}.json", "w") as handle:
        json.dump({"size": backend.size, "steps_per_epoch": data.steps_per_epoch, "ids": ids}, handle)
    backend.barrier()


if __name__ == "__main__":
    quiet.import_tensorflow()  # as a command imports it: Keras without its optional bridges
    main(*sys.argv[1:])
