# opt-train test fixture: OpenSeq2Seq example_configs/speech2text/quartznet15x5_LibriSpeech.py, transcribed from its facts
# (training keys as OpenSeq2Seq gives them; model and data parameters shortened). Never run.
from open_seq2seq.data.speech2text.speech2text import Speech2TextDataLayer
from open_seq2seq.decoders import FullyConnectedCTCDecoder
from open_seq2seq.encoders import TDNNEncoder
from open_seq2seq.losses import CTCLoss
from open_seq2seq.models import Speech2Text
from open_seq2seq.optimizers.lr_policies import cosine_decay
from open_seq2seq.optimizers.novograd import NovoGrad
import tensorflow as tf

base_model = Speech2Text

base_params = {
    'random_seed': 0,
    'use_horovod': True,
    'num_epochs': 400,
    'num_gpus': 8,
    'batch_size_per_gpu': 32,
    'iter_size': 1,
    'save_summaries_steps': 100,
    'print_loss_steps': 10,
    'print_samples_steps': 2200,
    'eval_steps': 2200,
    'save_checkpoint_steps': 1100,
    'logdir': 'jasper_log_folder',
    'num_checkpoints': 2,
    'optimizer': NovoGrad,
    'optimizer_params': {
        'beta1': 0.95,
        'beta2': 0.5,
        'epsilon': 1e-08,
        'weight_decay': 0.001,
        'grad_averaging': False,
    },
    'lr_policy': cosine_decay,
    'lr_policy_params': {
        'learning_rate': 0.01,
        'min_lr': 0.0,
        'warmup_steps': 1000,
    },
    'dtype': tf.float32,
    'summaries': ['learning_rate', 'variables', 'gradients', 'larc_summaries', 'variable_norm', 'gradient_norm', 'global_gradient_norm'],
    'encoder': TDNNEncoder,
    'encoder_params': {
        'dropout_keep_prob': 1.0,
        'normalization': 'batch_norm',
        'data_format': 'channels_last',
        'use_conv_mask': True,
    },
    'decoder': FullyConnectedCTCDecoder,
    'decoder_params': {
        'use_language_model': False,
        'infer_logits_to_pickle': False,
    },
    'loss': CTCLoss,
    'loss_params': {},
    'data_layer': Speech2TextDataLayer,
    'data_layer_params': {
        'num_audio_features': 64,
        'input_type': 'logfbank',
        'vocab_file': 'open_seq2seq/test_utils/toy_speech_data/vocab.txt',
        'norm_per_feature': True,
        'window': 'hanning',
        'precompute_mel_basis': True,
        'sample_freq': 16000,
        'pad_to': 16,
        'dither': 1e-05,
        'backend': 'librosa',
    },
}

train_params = {
    'data_layer': Speech2TextDataLayer,
    'data_layer_params': {
        'max_duration': 16.7,
        'shuffle': True,
    },
}

eval_params = {
    'data_layer': Speech2TextDataLayer,
    'data_layer_params': {
        'shuffle': False,
    },
}
