"""Data: Megatron's indexed data sets and GPT training samples, as int32 numpy arrays."""

import numpy as np

from ._lib import Handle, _raw, make_enum, make_struct
from .errors import error_for

DataSource = make_enum("DataSource", "ptdp_data_source", "PTDP_DATA_",
                       "Where training data comes from (ptdp_data_source): MOCK (``--mock-data``), INDEXED "
                       "(``--data-path``) or TEXT (``--text-file``).")
Split = make_enum("Split", "ptdp_data_split", "PTDP_SPLIT_", "The parts of a data set (ptdp_data_split): TRAIN, "
                  "VALID or TEST.")


class IndexedDataset(Handle):
    r"""A Megatron indexed data set PREFIX.idx + PREFIX.bin (``ptdp_dataset``), read-only.
    ``ds[i]`` (or ``document(i)``) is document i's tokens; :func:`ptdp.preprocess` writes them.

    >>> import json, os, tempfile, ptdp
    >>> with tempfile.TemporaryDirectory() as directory:
    ...     corpus = os.path.join(directory, "corpus.jsonl")
    ...     with open(corpus, "w") as f:
    ...         _ = f.write(json.dumps({"text": "Hi"}) + "\n" + json.dumps({"text": "there"}) + "\n")
    ...     _ = ptdp.preprocess(corpus, os.path.join(directory, "corpus"))
    ...     with ptdp.IndexedDataset(os.path.join(directory, "corpus_text_document")) as ds:
    ...         len(ds), ds.num_sequences, ds[0].tolist(), ds[-1].dtype
    (2, 2, [72, 105], dtype('int32'))
    """

    _destroy = staticmethod(_raw.ptdp_dataset_destroy)

    def __init__(self, prefix):
        super().__init__(_raw.ptdp_dataset_open(str(prefix)))

    @property
    def num_sequences(self):
        return _raw.ptdp_dataset_num_sequences(self.handle)

    @property
    def num_documents(self):
        return _raw.ptdp_dataset_num_documents(self.handle)

    def __len__(self):
        return self.num_documents

    def document(self, index):
        # The first call asks for the length (count is reported also when capacity is too small).
        (status, message), count = _raw.ptdp_dataset_document(self.handle, int(index), None)
        if status and count == 0:
            raise error_for(status, message)
        tokens = np.zeros(count, dtype=np.int32)
        (status, message), count = _raw.ptdp_dataset_document(self.handle, int(index), tokens if count else None)
        if status:
            raise error_for(status, message)
        return tokens

    def __getitem__(self, index):
        if not -len(self) <= index < len(self):
            raise IndexError(f"document {index} out of range for {len(self)} documents")
        return self.document(index % len(self))


class GPTData(Handle):
    """GPT training samples (``ptdp_gpt_data``) built as Megatron's GPTDataset builds them.

    ``options``: a ``ptdp_gpt_data_options`` struct or dict (``TrainConfig.data_options()``);
    keyword fields: source (a :class:`DataSource` or "mock", "indexed", "text"), path, split,
    seq_length, vocab_size, seed, num_samples. A split is a :class:`Split` or "train", "valid",
    "test".

    >>> import numpy as np, ptdp
    >>> with ptdp.GPTData(source="mock", seq_length=8, vocab_size=64) as data:
    ...     tokens, labels = data.batch(0, 2, split="train")
    ...     tokens.shape, bool(np.all(tokens[:, 1:] == labels[:, :-1])), data.num_samples("valid") >= 0
    ((2, 8), True, True)
    """

    _destroy = staticmethod(_raw.ptdp_gpt_data_destroy)

    def __init__(self, options=None, **fields):
        opts = make_struct("ptdp_gpt_data_options", options, **fields)
        super().__init__(_raw.ptdp_gpt_data_create(opts))
        self.seq_length = opts.seq_length

    def num_samples(self, split=Split.TRAIN):
        """The number of samples of ``split``."""
        return _raw.ptdp_gpt_data_num_samples(self.handle, split)

    def batch(self, first, count, split=Split.TRAIN):
        """(tokens, labels): samples [first, first + count) as int32 arrays [count, seq_length]."""
        tokens = np.zeros((int(count), self.seq_length), dtype=np.int32)
        labels = np.zeros_like(tokens)
        _raw.ptdp_gpt_data_batch(self.handle, split, int(first), int(count), tokens, labels)
        return tokens, labels
