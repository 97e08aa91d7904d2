# opt-train test fixture: OpenSeq2Seq example_configs/text2text/toy-reversal/nmt-reversal-TT.py, transcribed from its facts
# (training keys as OpenSeq2Seq gives them; model and data parameters shortened). Never run.
from open_seq2seq.data.text2text.text2text import ParallelTextDataLayer
from open_seq2seq.decoders import TransformerDecoder
from open_seq2seq.encoders import TransformerEncoder
from open_seq2seq.losses import PaddedCrossEntropyLossWithSmoothing
from open_seq2seq.models import Text2Text
from open_seq2seq.optimizers.lr_policies import transformer_policy
import tensorflow as tf

base_model = Text2Text

base_params = {
    'use_horovod': False,
    'num_gpus': 1,
    'batch_size_per_gpu': 64,
    'max_steps': 800,
    'save_summaries_steps': 50,
    'print_loss_steps': 50,
    'print_samples_steps': 50,
    'eval_steps': 50,
    'save_checkpoint_steps': 300,
    'logdir': 'ReversalTask-Transformer-Transformer',
    'dtype': tf.float32,
    'optimizer': tf.contrib.opt.LazyAdamOptimizer,
    'optimizer_params': {
        'beta1': 0.9,
        'beta2': 0.997,
        'epsilon': 1e-09,
    },
    'lr_policy': transformer_policy,
    'lr_policy_params': {
        'learning_rate': 1.0,
        'warmup_steps': 200,
        'd_model': 128,
    },
    'encoder': TransformerEncoder,
    'encoder_params': {
        'encoder_layers': 2,
        'hidden_size': 128,
        'num_heads': 8,
        'attention_dropout': 0.1,
        'filter_size': 512,
        'relu_dropout': 0.1,
        'layer_postprocess_dropout': 0.1,
        'remove_padding': True,
    },
    'decoder': TransformerDecoder,
    'decoder_params': {
        'layer_postprocess_dropout': 0.1,
        'num_hidden_layers': 2,
        'hidden_size': 128,
        'num_heads': 8,
        'attention_dropout': 0.1,
        'relu_dropout': 0.1,
        'filter_size': 512,
        'beam_size': 5,
        'alpha': 1.0,
        'extra_decode_length': 2,
    },
    'loss': PaddedCrossEntropyLossWithSmoothing,
    'loss_params': {},
}

train_params = {
    'data_layer': ParallelTextDataLayer,
    'data_layer_params': {
        'src_vocab_file': 'toy_text_data/vocab/source.txt',
        'tgt_vocab_file': 'toy_text_data/vocab/target.txt',
        'source_file': 'toy_text_data/train/source.txt',
        'target_file': 'toy_text_data/train/target.txt',
        'shuffle': True,
        'repeat': True,
        'max_length': 56,
        'delimiter': ' ',
        'special_tokens_already_in_vocab': False,
        'use_start_token': False,
    },
}

eval_params = {
    'data_layer': ParallelTextDataLayer,
    'data_layer_params': {
        'src_vocab_file': 'toy_text_data/vocab/source.txt',
        'tgt_vocab_file': 'toy_text_data/vocab/target.txt',
        'source_file': 'toy_text_data/dev/source.txt',
        'target_file': 'toy_text_data/dev/target.txt',
        'shuffle': False,
        'repeat': True,
        'max_length': 56,
        'delimiter': ' ',
        'special_tokens_already_in_vocab': False,
        'use_start_token': False,
    },
}
