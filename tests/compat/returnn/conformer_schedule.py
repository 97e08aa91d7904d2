# opt-train test fixture: the training keys of RETURNN's demos/demo-rf-pt-benchmark.py, which
# writes its config as one `config = dict(...)`; its numpy warm-up list is written out short here
# and gradient_clip_global_norm is switched on. Never run.
config = dict(
    task="train",
    backend="torch",
    batch_size=15_000,
    max_seqs=200,
    accum_grad_multiple_step=2,
    gradient_clip_global_norm=1.0,
    optimizer={"class": "nadam", "epsilon": 1e-8},
    learning_rate=0.0005,
    learning_rates=[0.0001, 0.0004, 0.0007, 0.001],
    min_learning_rate=0.001 / 50,
    learning_rate_control="newbob_multi_epoch",
    newbob_multi_update_interval=1,
    num_epochs=1000,
)
