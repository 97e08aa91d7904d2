# opt-train test fixture: OpenSeq2Seq example_configs/lm/lstm-test-small.py, transcribed from its facts
# (training keys as OpenSeq2Seq gives them; model and data parameters shortened). Never run.
from open_seq2seq.data import WKTDataLayer
from open_seq2seq.decoders import FakeDecoder
from open_seq2seq.encoders import LMEncoder
from open_seq2seq.losses import BasicSequenceLoss
from open_seq2seq.models import LSTMLM
from open_seq2seq.optimizers.lr_policies import fixed_lr
import tensorflow as tf

base_model = LSTMLM

base_params = {
    'restore_best_checkpoint': True,
    'use_horovod': False,
    'num_gpus': 2,
    'batch_size_per_gpu': 160,
    'num_epochs': 1500,
    'save_summaries_steps': 10,
    'print_loss_steps': 10,
    'print_samples_steps': 10,
    'save_checkpoint_steps': 10,
    'processed_data_folder': {},
    'logdir': 'LSTM-FP32-2GPU-SMALL',
    'eval_steps': 20,
    'optimizer': 'Adam',
    'optimizer_params': {},
    'lr_policy': fixed_lr,
    'lr_policy_params': {
        'learning_rate': 0.0009,
    },
    'summaries': ['learning_rate', 'variables', 'gradients', 'variable_norm', 'gradient_norm', 'global_gradient_norm'],
    'dtype': tf.float32,
    'encoder': LMEncoder,
    'encoder_params': {
        'use_cudnn_rnn': False,
        'encoder_layers': 2,
        'encoder_dp_input_keep_prob': 1.0,
        'encoder_dp_output_keep_prob': 0.6,
        'encoder_last_input_keep_prob': 1.0,
        'encoder_last_output_keep_prob': 0.6,
        'recurrent_keep_prob': 0.7,
        'encoder_emb_keep_prob': 0.37,
        'encoder_use_skip_connections': False,
        'emb_size': 64,
        'sampling_prob': 0.0,
        'fc_use_bias': True,
        'weight_tied': True,
        'awd_initializer': False,
    },
    'decoder': FakeDecoder,
    'regularizer': tf.contrib.layers.l2_regularizer,
    'regularizer_params': {
        'scale': 2e-06,
    },
    'loss': BasicSequenceLoss,
    'loss_params': {
        'offset_target_by_one': False,
        'average_across_timestep': True,
        'do_mask': False,
    },
}

train_params = {
    'data_layer': WKTDataLayer,
    'data_layer_params': {
        'data_root': '[REPLACE THIS TO THE PATH WITH YOUR WikiText-2-raw DATA]',
        'processed_data_folder': 'wkt2-processed-data',
        'pad_vocab_to_eight': False,
        'rand_start': True,
        'shuffle': False,
        'shuffle_buffer_size': 25000,
        'repeat': True,
        'map_parallel_calls': 16,
        'prefetch_buffer_size': 8,
        'bptt': 12,
        'small': True,
    },
}

eval_params = {
    'data_layer': WKTDataLayer,
    'data_layer_params': {
        'processed_data_folder': 'wkt2-processed-data',
        'pad_vocab_to_eight': False,
        'shuffle': False,
        'repeat': False,
        'map_parallel_calls': 16,
        'prefetch_buffer_size': 1,
        'bptt': 12,
        'small': True,
    },
}
