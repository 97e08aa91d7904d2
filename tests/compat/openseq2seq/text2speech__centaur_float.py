# opt-train test fixture: OpenSeq2Seq example_configs/text2speech/centaur_float.py, transcribed from its facts
# (training keys as OpenSeq2Seq gives them; model and data parameters shortened). Never run.
from open_seq2seq.data import Text2SpeechDataLayer
from open_seq2seq.decoders import CentaurDecoder
from open_seq2seq.encoders import CentaurEncoder
from open_seq2seq.losses import Text2SpeechLoss
from open_seq2seq.models import Text2SpeechCentaur
from open_seq2seq.optimizers.lr_policies import poly_decay
from open_seq2seq.optimizers.novograd import NovoGrad
import tensorflow as tf

base_model = Text2SpeechCentaur

base_params = {
    'random_seed': 0,
    'use_horovod': True,
    'max_steps': 1000000,
    'bench_start': 0,
    'num_gpus': 8,
    'batch_size_per_gpu': 32,
    'save_summaries_steps': 1000,
    'print_loss_steps': 1000,
    'print_samples_steps': 1000,
    'eval_steps': 5000,
    'save_checkpoint_steps': 5000,
    'save_to_tensorboard': {},
    'logdir': 'result/centaur-float',
    'max_grad_norm': 1.0,
    'optimizer': NovoGrad,
    'optimizer_params': {
        'beta1': 0.95,
        'beta2': 0.98,
        'epsilon': 1e-08,
        'weight_decay': 0.001,
    },
    'lr_policy': poly_decay,
    'lr_policy_params': {
        'learning_rate': 0.02,
        'power': 2.0,
    },
    'dtype': tf.float32,
    'initializer': tf.contrib.layers.xavier_initializer,
    'summaries': ['learning_rate', 'variables', 'gradients', 'larc_summaries', 'variable_norm', 'gradient_norm', 'global_gradient_norm'],
    'encoder': CentaurEncoder,
    'encoder_params': {
        'src_vocab_size': 94,
        'embedding_size': 256,
        'output_size': 256,
        'pad_embeddings_2_eight': True,
        'cnn_dropout_prob': 0.1,
    },
    'decoder': CentaurDecoder,
    'decoder_params': {
        'attention_layers': 4,
        'window_size': 4,
        'back_step_size': 0,
        'hidden_size': 512,
        'reduction_factor': 2,
        'prenet_layers': 2,
        'prenet_hidden_size': 512,
        'prenet_use_inference_dropout': False,
        'cnn_dropout_prob': 0.1,
        'prenet_dropout': 0.5,
        'attention_dropout': 0.1,
        'layer_postprocess_dropout': 0.1,
    },
    'loss': Text2SpeechLoss,
    'loss_params': {
        'use_mask': True,
        'l1_norm': True,
    },
    'data_layer': Text2SpeechDataLayer,
    'data_layer_params': {
        'dataset': 'LJ',
        'use_cache': True,
        'output_type': 'both',
        'vocab_file': 'open_seq2seq/test_utils/vocab_tts.txt',
        'dataset_location': '/data/LJSpeech',
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
        'duration_max': 1000,
        'duration_min': 0,
        'shuffle': False,
    },
}
