r"""Preprocessing: JSON lines to Megatron's indexed data sets, and merging data sets, as
Megatron-LM's ``tools/preprocess_data.py`` and ``tools/merge_datasets.py`` do (the library's
code, shared with the ``ptdp-preprocess-data`` and ``ptdp-merge-datasets`` tools).

>>> import json, os, tempfile, ptdp
>>> directory = tempfile.TemporaryDirectory()
>>> corpus = os.path.join(directory.name, "corpus.jsonl")
>>> with open(corpus, "w") as f:
...     f.writelines(json.dumps({"text": text}) + "\n" for text in ("Hello", "world!"))
>>> result = ptdp.preprocess(corpus, os.path.join(directory.name, "corpus"), tokenizer_type="ByteLevel",
...                          workers=2)
>>> result.documents, result.tokens
(2, 11)
>>> with ptdp.IndexedDataset(os.path.join(directory.name, "corpus_text_document")) as ds:
...     len(ds), bytes(ds[1].astype("uint8"))
(2, b'world!')
>>> directory.cleanup()

With GPT-2's files: ``tokenizer_type="GPT2BPETokenizer", vocab_file="vocab.json",
merge_file="merges.txt", append_eod=True``.

Each key of ``json_keys`` gives the data set OUTPUT_PREFIX_KEY_document (.bin and .idx), read by
:class:`ptdp.IndexedDataset` and by ptdp-train's ``--data-path``. Blends need no call: the data
options' ``path`` takes Megatron's weighted list ("0.3 PREFIX_A 0.7 PREFIX_B"), and
``train_data_path``/``valid_data_path``/``test_data_path`` one list per split.
"""

from collections import namedtuple
import os

from ._lib import _raw, make_struct
from .tokenizer import as_tokenizer_type, megatron_name

PreprocessResult = namedtuple("PreprocessResult", "documents bad_lines bytes tokens seconds dtype_code")
PreprocessResult.__doc__ = ("What :func:`preprocess` did (ptdp_preprocess_result): documents written (in each key's "
                            "data set), bad lines dropped, input bytes read (after gzip), tokens written over all "
                            "keys, wall seconds, and Megatron's dtype code of the tokens (8: uint16, 4: int32).")


class _PreprocessOptions:
    """What the extension reads for ptdp_preprocess_options (see ptdp.i): the struct, and the
    lists of inputs and keys."""

    def __init__(self, options, inputs, json_keys):
        self.options = options
        self.inputs = inputs
        self.json_keys = json_keys


def _paths(value):
    """One path or a sequence of them, as a list of str."""
    if isinstance(value, (str, bytes, os.PathLike)):
        return [os.fsdecode(value)]
    return [os.fsdecode(v) for v in value]


def preprocess(input, output_prefix, json_keys=None, tokenizer_type=None, vocab_file=None,  # noqa: A002
               merge_file=None, tokenizer_model=None, vocab_size=None, append_eod=False, workers=None,
               log_interval=None, skip_bad_lines=False):
    """Tokenizes JSON-lines files into one indexed data set per key; returns a
    :class:`PreprocessResult`.

    ``input``: a file or a list of files (plain or gzip), read in order, one JSON object and one
    document per line. ``output_prefix``: the data sets' prefix (its directory must exist).
    ``json_keys``: the keys to read (default "text"); each holds a string or a list of strings
    (one sequence each). The tokenizer is Megatron's flags: ``tokenizer_type`` (Megatron's name or
    a :class:`ptdp.TokenizerType`; default "ByteLevel"), ``vocab_file``, ``merge_file``,
    ``tokenizer_model``, ``vocab_size``. ``append_eod`` ends each document with the tokenizer's
    end-of-document id; ``workers`` tokenizing threads (default 1); ``log_interval`` prints
    Megatron's progress line on stderr every N documents; ``skip_bad_lines`` drops and counts bad
    lines instead of failing.

    A bad line raises :class:`ptdp.InvalidArgumentError` naming FILE:LINE, an unreadable input or
    tokenizer file :class:`ptdp.FileError` naming it; a failed run leaves no partial data set.
    """
    options = make_struct("ptdp_preprocess_options", output_prefix=os.fspath(output_prefix),
                          tokenizer_type=None if tokenizer_type is None else megatron_name(
                              as_tokenizer_type(tokenizer_type, "preprocess: tokenizer_type")),
                          vocab_file=None if vocab_file is None else os.fspath(vocab_file),
                          merge_file=None if merge_file is None else os.fspath(merge_file),
                          tokenizer_model=None if tokenizer_model is None else os.fspath(tokenizer_model),
                          vocab_size=None if vocab_size is None else int(vocab_size),
                          append_eod=int(bool(append_eod)), workers=None if workers is None else int(workers),
                          log_interval=None if log_interval is None else int(log_interval),
                          skip_bad_lines=int(bool(skip_bad_lines)))
    keys = [] if json_keys is None else ([json_keys] if isinstance(json_keys, str) else [str(k) for k in json_keys])
    result = _raw.ptdp_preprocess(_PreprocessOptions(options, _paths(input), keys))
    return PreprocessResult(**{k: getattr(result, k) for k in PreprocessResult._fields})


def merge_datasets(prefixes, output_prefix):
    r"""Concatenates the indexed data sets ``prefixes`` (their documents and sequences, in order)
    into OUTPUT_PREFIX.bin and .idx. Data sets of different dtypes raise
    :class:`ptdp.InvalidArgumentError`; a missing or malformed one :class:`ptdp.FileError` naming
    the file.

    >>> import json, os, tempfile, ptdp
    >>> with tempfile.TemporaryDirectory() as directory:
    ...     corpus = os.path.join(directory, "corpus.jsonl")
    ...     with open(corpus, "w") as f:
    ...         _ = f.write(json.dumps({"text": "one document"}) + "\n")
    ...     _ = ptdp.preprocess(corpus, os.path.join(directory, "a"))
    ...     prefix = os.path.join(directory, "a_text_document")
    ...     ptdp.merge_datasets([prefix, prefix], os.path.join(directory, "twice"))
    ...     len(ptdp.IndexedDataset(os.path.join(directory, "twice")))
    2
    """
    _raw.ptdp_merge_datasets(_paths(prefixes), os.fspath(output_prefix))


def _main(function, args, program):
    argv = [program] + (args.split() if isinstance(args, str) else [os.fsdecode(a) for a in args])
    return function(argv)


def preprocess_main(args=(), program="ptdp-preprocess-data"):
    """Runs ``ptdp-preprocess-data`` with ``args`` (its flags, Megatron's, as a list or one
    string): progress on stderr, a summary on stdout. Returns the exit status: 0 done, 1 failed
    (the message went to stderr), 2 bad flags."""
    return _main(_raw.ptdp_preprocess_main, args, program)


def merge_datasets_main(args=(), program="ptdp-merge-datasets"):
    """Runs ``ptdp-merge-datasets`` with ``args`` (``--input DIR`` or ``--datasets PREFIX ...``,
    and ``--output-prefix``). Returns the exit status: 0 done, 1 failed, 2 bad flags."""
    return _main(_raw.ptdp_merge_datasets_main, args, program)


__all__ = ["PreprocessResult", "preprocess", "merge_datasets", "preprocess_main", "merge_datasets_main"]
