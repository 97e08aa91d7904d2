# opt-train test fixture: OpenSeq2Seq example_configs/text2text/en-de/en-de-convs2s-8-gpu.py, transcribed from its facts
# (training keys as OpenSeq2Seq gives them; model and data parameters shortened). Never run.
from open_seq2seq.data.text2text.text2text import ParallelTextDataLayer
from open_seq2seq.decoders import ConvS2SDecoder
from open_seq2seq.encoders import ConvS2SEncoder
from open_seq2seq.losses import BasicSequenceLoss
from open_seq2seq.models import Text2Text
from open_seq2seq.optimizers.lr_policies import transformer_policy
import tensorflow as tf

base_model = Text2Text

base_params = {
    'use_horovod': True,
    'num_gpus': 1,
    'max_steps': 310000,
    'batch_size_per_gpu': 64,
    'save_summaries_steps': 100,
    'print_loss_steps': 100,
    'print_samples_steps': 100,
    'eval_steps': 4000,
    'save_checkpoint_steps': 4000,
    'logdir': 'ConvSeq2Seq-8GPUs-FP32',
    'optimizer': 'Adam',
    'optimizer_params': {},
    'lr_policy': transformer_policy,
    'lr_policy_params': {
        'learning_rate': 9,
        'max_lr': 0.001,
        'warmup_steps': 4000,
        'd_model': 512,
    },
    'max_grad_norm': 0.1,
    'summaries': ['learning_rate', 'variables', 'gradients', 'larc_summaries', 'variable_norm', 'gradient_norm', 'global_gradient_norm'],
    'dtype': tf.float32,
    'encoder': ConvS2SEncoder,
    'encoder_params': {
        'src_emb_size': 512,
        'pad_embeddings_2_eight': True,
        'att_layer_num': 15,
        'embedding_dropout_keep_prob': 0.8,
        'hidden_dropout_keep_prob': 0.8,
        'max_input_length': 64,
        'normalization_type': 'weight_norm',
        'scaling_factor': 0.7071067811865476,
    },
    'decoder': ConvS2SDecoder,
    'decoder_params': {
        'shared_embed': True,
        'tgt_emb_size': 512,
        'pad_embeddings_2_eight': True,
        'out_emb_size': 512,
        'pos_embed': False,
        'embedding_dropout_keep_prob': 0.8,
        'hidden_dropout_keep_prob': 0.8,
        'out_dropout_keep_prob': 0.8,
        'max_input_length': 64,
        'extra_decode_length': 56,
        'beam_size': 5,
        'alpha': 0.6,
        'normalization_type': 'weight_norm',
        'scaling_factor': 0.7071067811865476,
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
        'prefetch_buffer_size': 2,
        'max_length': 64,
    },
}

eval_params = {
    'batch_size_per_gpu': 64,
    'data_layer': ParallelTextDataLayer,
    'data_layer_params': {
        'src_vocab_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]m_common.vocab',
        'tgt_vocab_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]m_common.vocab',
        'source_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]wmt13-en-de.src.BPE_common.32K.tok',
        'target_file': '[REPLACE THIS TO THE PATH WITH YOUR WMT DATA]wmt13-en-de.ref.BPE_common.32K.tok',
        'delimiter': ' ',
        'shuffle': False,
        'repeat': True,
        'max_length': 64,
        'prefetch_buffer_size': 1,
    },
}
