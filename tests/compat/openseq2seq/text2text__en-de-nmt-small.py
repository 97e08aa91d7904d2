# opt-train test fixture: OpenSeq2Seq example_configs/text2text/en-de/en-de-nmt-small.py, transcribed from its facts
# (training keys as OpenSeq2Seq gives them; model and data parameters shortened). Never run.
from open_seq2seq.data.text2text.text2text import ParallelTextDataLayer
from open_seq2seq.decoders import RNNDecoderWithAttention
from open_seq2seq.encoders import BidirectionalRNNEncoderWithEmbedding
from open_seq2seq.losses import BasicSequenceLoss
from open_seq2seq.models import Text2Text
from open_seq2seq.optimizers.lr_policies import fixed_lr
import tensorflow as tf

base_model = Text2Text

base_params = {
    'use_horovod': False,
    'num_gpus': 1,
    'max_steps': 160082,
    'batch_size_per_gpu': 128,
    'save_summaries_steps': 50,
    'print_loss_steps': 48,
    'print_samples_steps': 48,
    'eval_steps': 1000,
    'save_checkpoint_steps': 2001,
    'logdir': 'nmt-small-en-de',
    'optimizer': 'Adam',
    'optimizer_params': {},
    'lr_policy': fixed_lr,
    'lr_policy_params': {
        'learning_rate': 0.001,
    },
    'larc_params': {
        'larc_eta': 0.001,
    },
    'dtype': tf.float32,
    'encoder': BidirectionalRNNEncoderWithEmbedding,
    'encoder_params': {
        'encoder_layers': 2,
        'encoder_dp_input_keep_prob': 0.8,
        'encoder_dp_output_keep_prob': 1.0,
        'encoder_use_skip_connections': False,
        'src_emb_size': 512,
        'use_swap_memory': True,
    },
    'decoder': RNNDecoderWithAttention,
    'decoder_params': {
        'decoder_layers': 2,
        'decoder_dp_input_keep_prob': 0.8,
        'decoder_dp_output_keep_prob': 1.0,
        'decoder_use_skip_connections': False,
        'tgt_emb_size': 512,
        'attention_type': 'gnmt_v2',
        'attention_layer_size': 512,
        'use_swap_memory': True,
    },
    'loss': BasicSequenceLoss,
    'loss_params': {
        'offset_target_by_one': True,
        'average_across_timestep': False,
        'do_mask': True,
    },
}

train_params = {
    'data_layer': ParallelTextDataLayer,
    'data_layer_params': {
        'src_vocab_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]m_common.vocab',
        'tgt_vocab_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]m_common.vocab',
        'source_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]train.clean.en.shuffled.BPE_common.32K.tok',
        'target_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]train.clean.de.shuffled.BPE_common.32K.tok',
        'delimiter': ' ',
        'shuffle': True,
        'shuffle_buffer_size': 25000,
        'repeat': True,
        'map_parallel_calls': 16,
        'prefetch_buffer_size': 2,
        'max_length': 50,
    },
}

eval_params = {
    'batch_size_per_gpu': 32,
    'data_layer': ParallelTextDataLayer,
    'data_layer_params': {
        'src_vocab_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]m_common.vocab',
        'tgt_vocab_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]m_common.vocab',
        'source_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]wmt13-en-de.src.BPE_common.32K.tok',
        'target_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]wmt13-en-de.ref.BPE_common.32K.tok',
        'delimiter': ' ',
        'shuffle': False,
        'repeat': True,
        'map_parallel_calls': 16,
        'prefetch_buffer_size': 1,
        'max_length': 16,
    },
}
