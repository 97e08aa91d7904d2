# opt-train test fixture: OpenSeq2Seq example_configs/speech2text/jca_large_8gpus.py, transcribed from its facts
# (training keys as OpenSeq2Seq gives them; model and data parameters shortened). Never run.
from open_seq2seq.data import Speech2TextDataLayer
from open_seq2seq.decoders import JointCTCAttentionDecoder
from open_seq2seq.encoders import ListenAttendSpellEncoder
from open_seq2seq.losses import MultiTaskCTCEntropyLoss
from open_seq2seq.models import Speech2Text
from open_seq2seq.optimizers.lr_policies import poly_decay
import tensorflow as tf

base_model = Speech2Text

base_params = {
    'random_seed': 0,
    'use_horovod': True,
    'num_epochs': 50,
    'num_gpus': 8,
    'batch_size_per_gpu': 64,
    'iter_size': 1,
    'save_summaries_steps': 1100,
    'print_loss_steps': 10,
    'print_samples_steps': 200,
    'eval_steps': 1100,
    'save_checkpoint_steps': 1100,
    'logdir': 'jca_log_folder',
    'optimizer': 'Adam',
    'optimizer_params': {},
    'lr_policy': poly_decay,
    'lr_policy_params': {
        'learning_rate': 0.001,
        'power': 2.0,
        'min_lr': 1e-05,
    },
    'max_grad_norm': 1.0,
    'regularizer': tf.contrib.layers.l2_regularizer,
    'regularizer_params': {
        'scale': 0.0001,
    },
    'dtype': tf.float32,
    'summaries': ['learning_rate', 'variables', 'gradients', 'larc_summaries', 'variable_norm', 'gradient_norm', 'global_gradient_norm'],
    'encoder': ListenAttendSpellEncoder,
    'decoder': JointCTCAttentionDecoder,
    'decoder_params': {},
    'loss': MultiTaskCTCEntropyLoss,
    'loss_params': {
        'lambda_value': 0.25,
    },
}

train_params = {
    'data_layer': Speech2TextDataLayer,
    'data_layer_params': {
        'num_audio_features': 64,
        'input_type': 'logfbank',
        'vocab_file': 'open_seq2seq/test_utils/toy_speech_data/vocab.txt',
        'max_duration': 16.7,
        'shuffle': True,
        'autoregressive': True,
    },
}

eval_params = {
    'data_layer': Speech2TextDataLayer,
    'data_layer_params': {
        'num_audio_features': 64,
        'input_type': 'logfbank',
        'vocab_file': 'open_seq2seq/test_utils/toy_speech_data/vocab.txt',
        'shuffle': False,
        'autoregressive': True,
    },
}
