# opt-train test fixture: OpenSeq2Seq example_configs/speech2text/w2l_large_8gpus_mp.py, transcribed from its facts
# (training keys as OpenSeq2Seq gives them; model and data parameters shortened). Never run.
from open_seq2seq.data import Speech2TextDataLayer
from open_seq2seq.decoders import FullyConnectedCTCDecoder
from open_seq2seq.encoders import TDNNEncoder
from open_seq2seq.losses import CTCLoss
from open_seq2seq.models import Speech2Text
from open_seq2seq.optimizers.lr_policies import poly_decay
import tensorflow as tf

base_model = Speech2Text

base_params = {
    'random_seed': 0,
    'use_horovod': True,
    'num_epochs': 200,
    'num_gpus': 8,
    'batch_size_per_gpu': 64,
    'iter_size': 1,
    'save_summaries_steps': 100,
    'print_loss_steps': 10,
    'print_samples_steps': 2200,
    'eval_steps': 2200,
    'save_checkpoint_steps': 1100,
    'logdir': 'w2l_log_folder',
    'optimizer': 'Momentum',
    'optimizer_params': {
        'momentum': 0.9,
    },
    'lr_policy': poly_decay,
    'lr_policy_params': {
        'learning_rate': 0.05,
        'power': 2.0,
    },
    'larc_params': {
        'larc_eta': 0.001,
    },
    'regularizer': tf.contrib.layers.l2_regularizer,
    'regularizer_params': {
        'scale': 0.001,
    },
    'dtype': 'mixed',
    'loss_scaling': 'Backoff',
    'summaries': ['learning_rate', 'variables', 'gradients', 'larc_summaries', 'variable_norm', 'gradient_norm', 'global_gradient_norm'],
    'encoder': TDNNEncoder,
    'decoder': FullyConnectedCTCDecoder,
    'decoder_params': {
        'use_language_model': False,
        'beam_width': 512,
        'alpha': 2.0,
        'beta': 1.5,
        'decoder_library_path': 'ctc_decoder_with_lm/libctc_decoder_with_kenlm.so',
        'lm_path': 'language_model/4-gram.binary',
        'trie_path': 'language_model/trie.binary',
        'alphabet_config_path': 'open_seq2seq/test_utils/toy_speech_data/vocab.txt',
    },
    'loss': CTCLoss,
    'loss_params': {},
}

train_params = {
    'data_layer': Speech2TextDataLayer,
    'data_layer_params': {
        'num_audio_features': 64,
        'input_type': 'logfbank',
        'vocab_file': 'open_seq2seq/test_utils/toy_speech_data/vocab.txt',
        'max_duration': 16.7,
        'shuffle': True,
    },
}

eval_params = {
    'data_layer': Speech2TextDataLayer,
    'data_layer_params': {
        'num_audio_features': 64,
        'input_type': 'logfbank',
        'vocab_file': 'open_seq2seq/test_utils/toy_speech_data/vocab.txt',
        'shuffle': False,
    },
}
