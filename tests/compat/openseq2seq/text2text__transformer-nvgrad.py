# opt-train test fixture: OpenSeq2Seq example_configs/text2text/en-de/transformer-nvgrad.py, transcribed from its facts
# (training keys as OpenSeq2Seq gives them; model and data parameters shortened). Never run.
from open_seq2seq.data.text2text.text2text import ParallelTextDataLayer
from open_seq2seq.decoders import TransformerDecoder
from open_seq2seq.encoders import TransformerEncoder
from open_seq2seq.losses import PaddedCrossEntropyLossWithSmoothing
from open_seq2seq.models import Text2Text
from open_seq2seq.optimizers.lr_policies import poly_decay
from open_seq2seq.optimizers.novograd import NovoGrad

base_model = Text2Text

base_params = {
    'use_horovod': True,
    'num_gpus': 1,
    'batch_size_per_gpu': 128,
    'max_steps': 600000,
    'save_summaries_steps': 100,
    'print_loss_steps': 100,
    'print_samples_steps': 10000,
    'eval_steps': 10000,
    'save_checkpoint_steps': 99999,
    'logdir': 'tr-nvgrad2_0.90.99-b128-lr0.1-fp16',
    'dtype': 'mixed',
    'loss_scaling': 'Backoff',
    'optimizer': NovoGrad,
    'optimizer_params': {
        'beta1': 0.95,
        'beta2': 0.99,
        'epsilon': 1e-08,
        'weight_decay': 1e-05,
        'grad_averaging': False,
    },
    'lr_policy': poly_decay,
    'lr_policy_params': {
        'learning_rate': 0.04,
        'power': 2,
    },
    'encoder': TransformerEncoder,
    'encoder_params': {
        'encoder_layers': 6,
        'hidden_size': 1024,
        'num_heads': 16,
        'filter_size': 4096,
        'attention_dropout': 0.1,
        'relu_dropout': 0.3,
        'layer_postprocess_dropout': 0.3,
        'pad_embeddings_2_eight': True,
        'remove_padding': True,
    },
    'decoder': TransformerDecoder,
    'decoder_params': {
        'num_hidden_layers': 6,
        'hidden_size': 1024,
        'num_heads': 16,
        'filter_size': 4096,
        'attention_dropout': 0.1,
        'relu_dropout': 0.3,
        'layer_postprocess_dropout': 0.3,
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
        'src_vocab_file': '/data/wmt16-ende-sp/m_common.vocab',
        'tgt_vocab_file': '/data/wmt16-ende-sp/m_common.vocab',
        'source_file': '/data/wmt16-ende-sp/train.clean.en.shuffled.BPE_common.32K.tok',
        'target_file': '/data/wmt16-ende-sp/train.clean.de.shuffled.BPE_common.32K.tok',
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
        'src_vocab_file': '/data/wmt16-ende-sp/m_common.vocab',
        'tgt_vocab_file': '/data/wmt16-ende-sp/m_common.vocab',
        'source_file': '/data/wmt16-ende-sp/wmt13-en-de.src.BPE_common.32K.tok',
        'target_file': '/data/wmt16-ende-sp/wmt13-en-de.ref.BPE_common.32K.tok',
        'delimiter': ' ',
        'shuffle': False,
        'repeat': True,
        'max_length': 256,
    },
}
