# opt-train test fixture: OpenSeq2Seq example_configs/text2text/en-de/transformer-big.py, transcribed from its facts
# (training keys as OpenSeq2Seq gives them; model and data parameters shortened). Never run.
from open_seq2seq.data.text2text.text2text import ParallelTextDataLayer
from open_seq2seq.decoders import TransformerDecoder
from open_seq2seq.encoders import TransformerEncoder
from open_seq2seq.losses import PaddedCrossEntropyLossWithSmoothing
from open_seq2seq.models import Text2Text
from open_seq2seq.optimizers.lr_policies import transformer_policy
import tensorflow as tf

base_model = Text2Text
d_model = 1024
num_layers = 6
data_root = '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]'

base_params = {
    'use_horovod': True,
    'num_gpus': 1,
    'batch_size_per_gpu': 256,
    'max_steps': 300000,
    'save_summaries_steps': 100,
    'print_loss_steps': 100,
    'print_samples_steps': 100,
    'eval_steps': 4000,
    'save_checkpoint_steps': 299998,
    'logdir': 'Transformer-BIG',
    'dtype': 'mixed',
    'loss_scaling': 'Backoff',
    'optimizer': tf.contrib.opt.LazyAdamOptimizer,
    'optimizer_params': {
        'beta1': 0.9,
        'beta2': 0.997,
        'epsilon': 1e-09,
    },
    'lr_policy': transformer_policy,
    'lr_policy_params': {
        'learning_rate': 2.0,
        'warmup_steps': 8000,
        'd_model': d_model,
    },
    'encoder': TransformerEncoder,
    'encoder_params': {
        'encoder_layers': num_layers,
        'hidden_size': d_model,
        'num_heads': 16,
        'attention_dropout': 0.1,
        'filter_size': 4 * d_model,
        'relu_dropout': 0.3,
        'layer_postprocess_dropout': 0.3,
        'pad_embeddings_2_eight': True,
        'remove_padding': True,
    },
    'decoder': TransformerDecoder,
    'decoder_params': {
        'layer_postprocess_dropout': 0.3,
        'num_hidden_layers': 6,
        'hidden_size': d_model,
        'num_heads': 16,
        'attention_dropout': 0.1,
        'relu_dropout': 0.3,
        'filter_size': 4 * d_model,
        'beam_size': 4,
        'alpha': 0.6,
        'extra_decode_length': 50,
    },
    'loss': PaddedCrossEntropyLossWithSmoothing,
    'loss_params': {
        'label_smoothing': 0.1,
    },
}

train_params = {
    'data_layer': ParallelTextDataLayer,
    'data_layer_params': {
        'pad_vocab_to_eight': True,
        'src_vocab_file': data_root + 'm_common.vocab',
        'tgt_vocab_file': data_root + 'm_common.vocab',
        'source_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]train.clean.en.shuffled.BPE_common.32K.tok',
        'target_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]train.clean.de.shuffled.BPE_common.32K.tok',
        'delimiter': ' ',
        'shuffle': True,
        'shuffle_buffer_size': 25000,
        'repeat': True,
        'map_parallel_calls': 16,
        'max_length': 56,
    },
}

eval_params = {
    'batch_size_per_gpu': 16,
    'data_layer': ParallelTextDataLayer,
    'data_layer_params': {
        'src_vocab_file': data_root + 'm_common.vocab',
        'tgt_vocab_file': data_root + 'm_common.vocab',
        'source_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]wmt13-en-de.src.BPE_common.32K.tok',
        'target_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]wmt13-en-de.ref.BPE_common.32K.tok',
        'delimiter': ' ',
        'shuffle': False,
        'repeat': True,
        'max_length': 256,
    },
}
