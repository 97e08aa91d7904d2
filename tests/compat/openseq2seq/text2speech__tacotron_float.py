# opt-train test fixture: OpenSeq2Seq example_configs/text2speech/tacotron_float.py, transcribed from its facts
# (training keys as OpenSeq2Seq gives them; model and data parameters shortened). Never run.
from open_seq2seq.data import Text2SpeechDataLayer
from open_seq2seq.decoders import Tacotron2Decoder
from open_seq2seq.encoders import Tacotron2Encoder
from open_seq2seq.losses import Text2SpeechLoss
from open_seq2seq.models import Text2SpeechTacotron
from open_seq2seq.optimizers.lr_policies import exp_decay
import tensorflow as tf

base_model = Text2SpeechTacotron

base_params = {
    'random_seed': 0,
    'use_horovod': False,
    'max_steps': 100000,
    'num_gpus': 1,
    'batch_size_per_gpu': 48,
    'save_summaries_steps': 50,
    'print_loss_steps': 50,
    'print_samples_steps': 500,
    'eval_steps': 500,
    'save_checkpoint_steps': 2500,
    'save_to_tensorboard': {},
    'logdir': 'result/tacotron-LJ-float',
    'max_grad_norm': 1.0,
    'optimizer': 'Adam',
    'optimizer_params': {},
    'lr_policy': exp_decay,
    'lr_policy_params': {
        'learning_rate': 0.001,
        'decay_steps': 20000,
        'decay_rate': 0.1,
        'use_staircase_decay': False,
        'begin_decay_at': 45000,
        'min_lr': 1e-05,
    },
    'dtype': tf.float32,
    'regularizer': tf.contrib.layers.l2_regularizer,
    'regularizer_params': {
        'scale': 1e-06,
    },
    'initializer': tf.contrib.layers.xavier_initializer,
    'summaries': ['learning_rate', 'variables', 'gradients', 'larc_summaries', 'variable_norm', 'gradient_norm', 'global_gradient_norm'],
    'encoder': Tacotron2Encoder,
    'encoder_params': {
        'cnn_dropout_prob': 0.5,
        'rnn_dropout_prob': 0.0,
        'src_emb_size': 512,
        'num_rnn_layers': 1,
        'rnn_cell_dim': 256,
        'rnn_unidirectional': False,
        'use_cudnn_rnn': True,
        'zoneout_prob': 0.0,
        'data_format': 'channels_last',
    },
    'decoder': Tacotron2Decoder,
    'decoder_params': {
        'zoneout_prob': 0.0,
        'dropout_prob': 0.1,
        'attention_type': 'location',
        'attention_layer_size': 128,
        'attention_bias': True,
        'decoder_cell_units': 1024,
        'decoder_layers': 2,
        'enable_prenet': True,
        'prenet_layers': 2,
        'prenet_units': 256,
        'enable_postnet': True,
        'postnet_keep_dropout_prob': 0.5,
        'postnet_data_format': 'channels_last',
        'mask_decoder_sequence': True,
        'parallel_iterations': 32,
    },
    'loss': Text2SpeechLoss,
    'loss_params': {
        'use_mask': True,
    },
    'data_layer': Text2SpeechDataLayer,
    'data_layer_params': {
        'dataset': 'LJ',
        'output_type': 'both',
        'vocab_file': 'open_seq2seq/test_utils/vocab_tts.txt',
        'dataset_location': '/data/speech/LJSpeech',
        'mag_power': 1,
        'pad_EOS': True,
        'feature_normalize': False,
        'feature_normalize_mean': 0.0,
        'feature_normalize_std': 1.0,
        'mel_type': 'htk',
        'trim': False,
        'duration_max': 1024,
        'duration_min': 24,
        'exp_mag': True,
    },
}

train_params = {
    'data_layer_params': {
        'shuffle': True,
    },
}

eval_params = {
    'data_layer_params': {
        'duration_max': 10000,
        'duration_min': 0,
        'shuffle': False,
    },
}
