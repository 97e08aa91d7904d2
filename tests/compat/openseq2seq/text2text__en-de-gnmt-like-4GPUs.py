# opt-train test fixture: OpenSeq2Seq example_configs/text2text/en-de/en-de-gnmt-like-4GPUs.py, transcribed from its facts
# (training keys as OpenSeq2Seq gives them; model and data parameters shortened). Never run.
from open_seq2seq.data.text2text.text2text import ParallelTextDataLayer
from open_seq2seq.decoders import RNNDecoderWithAttention
from open_seq2seq.encoders import GNMTLikeEncoderWithEmbedding
from open_seq2seq.losses import BasicSequenceLoss
from open_seq2seq.models import Text2Text
from open_seq2seq.optimizers.lr_policies import exp_decay
import tensorflow as tf

base_model = Text2Text

base_params = {
    'use_horovod': False,
    'num_gpus': 4,
    'max_steps': 340000,
    'batch_size_per_gpu': 32,
    'save_summaries_steps': 50,
    'print_loss_steps': 48,
    'print_samples_steps': 48,
    'eval_steps': 4001,
    'save_checkpoint_steps': 4000,
    'logdir': 'GNMT-4GPUs-FP32',
    'optimizer': 'Adam',
    'optimizer_params': {},
    'lr_policy': exp_decay,
    'lr_policy_params': {
        'learning_rate': 0.0008,
        'begin_decay_at': 170000,
        'decay_steps': 17000,
        'decay_rate': 0.5,
        'use_staircase_decay': True,
        'min_lr': 5e-07,
    },
    'max_grad_norm': 32768.0,
    'dtype': tf.float32,
    'encoder': GNMTLikeEncoderWithEmbedding,
    'encoder_params': {
        'encoder_layers': 7,
        'encoder_dp_input_keep_prob': 0.8,
        'encoder_dp_output_keep_prob': 1.0,
        'encoder_use_skip_connections': True,
        'src_emb_size': 1024,
    },
    'decoder': RNNDecoderWithAttention,
    'decoder_params': {
        'decoder_layers': 8,
        'decoder_dp_input_keep_prob': 0.8,
        'decoder_dp_output_keep_prob': 1.0,
        'decoder_use_skip_connections': True,
        'tgt_emb_size': 1024,
        'attention_type': 'gnmt_v2',
        'attention_layer_size': 1024,
    },
    'loss': BasicSequenceLoss,
    'loss_params': {
        'offset_target_by_one': True,
        'average_across_timestep': True,
        'do_mask': True,
    },
}

train_params = {
    'data_layer': ParallelTextDataLayer,
    'data_layer_params': {
        'pad_vocab_to_eight': True,
        'src_vocab_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]m_common.vocab',
        'tgt_vocab_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]m_common.vocab',
        'source_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]train.clean.en.shuffled.BPE_common.32K.tok',
        'target_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]train.clean.de.shuffled.BPE_common.32K.tok',
        'delimiter': ' ',
        'shuffle': True,
        'shuffle_buffer_size': 25000,
        'repeat': True,
        'map_parallel_calls': 16,
        'prefetch_buffer_size': 8,
        'max_length': 50,
    },
}

eval_params = {
    'batch_size_per_gpu': 16,
    'data_layer': ParallelTextDataLayer,
    'data_layer_params': {
        'pad_vocab_to_eight': True,
        'src_vocab_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]m_common.vocab',
        'tgt_vocab_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]m_common.vocab',
        'source_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]wmt13-en-de.src.BPE_common.32K.tok',
        'target_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]wmt13-en-de.ref.BPE_common.32K.tok',
        'delimiter': ' ',
        'shuffle': False,
        'repeat': True,
        'map_parallel_calls': 16,
        'prefetch_buffer_size': 1,
        'max_length': 32,
    },
}
