"""Tokenizers: text to token ids and back (``ptdp_tokenizer``), with Megatron-LM's
``--tokenizer-type`` names and flags and the ids the reference libraries give for the same files.

    tok = ptdp.Tokenizer("GPT2BPETokenizer", vocab_file="vocab.json", merge_file="merges.txt")

or, with no files, bytes as ids:

>>> import ptdp
>>> tok = ptdp.Tokenizer("ByteLevel")
>>> ids = tok.encode("Hi!")                 # an int32 numpy array
>>> ids.tolist(), tok.decode(ids), tok.vocab_size, tok.eod
([72, 105, 33], 'Hi!', 256, None)

No special token is added around the text. Byte-level tokenizers take any bytes and give them
back (``decode_bytes(encode(b)) == b``); :meth:`Tokenizer.decode` turns bytes that are not
UTF-8 (a multi-byte character cut by the ids chosen, say) into U+FFFD, as Hugging Face's decode
does. A tokenizer is immutable: one object may encode from several threads at once.
"""

import os

import numpy as np

from ._lib import Handle, _raw, as_int32, enum_member, filled, make_enum, make_struct
from .errors import error_for

# Megatron's --tokenizer-type names of the types.
_MEGATRON_NAMES = {
    "ByteLevel": "BYTE_LEVEL",
    "NullTokenizer": "NULL",
    "GPT2BPETokenizer": "GPT2_BPE",
    "HuggingFaceTokenizer": "HUGGING_FACE",
    "SentencePieceTokenizer": "SENTENCE_PIECE",
}

TokenizerType = make_enum("TokenizerType", "ptdp_tokenizer_type", "PTDP_TOKENIZER_",
                          "Kind of tokenizer (ptdp_tokenizer_type): BYTE_LEVEL, NULL, GPT2_BPE, HUGGING_FACE, "
                          "SENTENCE_PIECE, also named by Megatron's ``--tokenizer-type`` names (\"ByteLevel\", "
                          "\"NullTokenizer\", \"GPT2BPETokenizer\", \"HuggingFaceTokenizer\", "
                          "\"SentencePieceTokenizer\").", aliases=_MEGATRON_NAMES)


def as_tokenizer_type(value, what="Tokenizer: type"):
    """A :class:`TokenizerType` from itself, its number, its enum name ("GPT2_BPE") or Megatron's
    name ("GPT2BPETokenizer"). Anything else raises :class:`ptdp.InvalidArgumentError` naming
    ``what`` and the names."""
    return enum_member(TokenizerType, value, what)


def megatron_name(value):
    """Megatron's ``--tokenizer-type`` name of a tokenizer type (any form :func:`as_tokenizer_type`
    takes)."""
    wanted = as_tokenizer_type(value).name
    return next(name for name, member in _MEGATRON_NAMES.items() if member == wanted)


def _path(value):
    return None if value is None else os.fspath(value)


def _as_bytes(value, what):
    """Text as bytes: str as UTF-8 (with surrogateescape, so a str that came from
    :meth:`Tokenizer.id_to_token` gives its bytes back), bytes-like objects as they are."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return value
    raise TypeError(f"{what} must be str or bytes, not {type(value).__name__}")


class Tokenizer(Handle):
    """A tokenizer (``ptdp_tokenizer``) made from its files, with Megatron's flags.

    ``type``: a :class:`TokenizerType` or Megatron's name ("ByteLevel",
    "NullTokenizer", "GPT2BPETokenizer", "HuggingFaceTokenizer", "SentencePieceTokenizer");
    ``vocab_file`` and ``merge_file`` (GPT2BPETokenizer's vocab.json and merges.txt),
    ``tokenizer_model`` (a tokenizer.json or a SentencePiece .model), ``vocab_size``
    (NullTokenizer's V). A file the type needs and is not given, or one it does not use, raises
    :class:`ptdp.InvalidArgumentError` naming the flag; a missing or malformed file
    :class:`ptdp.FileError` naming it.

    >>> import ptdp
    >>> with ptdp.Tokenizer("NullTokenizer", vocab_size=100) as tok:   # ids written as numbers
    ...     tok.encode("3 14 15").tolist(), tok.eod, tok.type == ptdp.TokenizerType.NULL
    ([3, 14, 15], 100, True)
    """

    _destroy = staticmethod(_raw.ptdp_tokenizer_destroy)

    def __init__(self, type=TokenizerType.BYTE_LEVEL, vocab_file=None, merge_file=None,  # noqa: A002 - the C field
                 tokenizer_model=None, vocab_size=None):
        opts = make_struct("ptdp_tokenizer_options", type=int(as_tokenizer_type(type)),
                           vocab_file=_path(vocab_file), merge_file=_path(merge_file),
                           tokenizer_model=_path(tokenizer_model),
                           vocab_size=None if vocab_size is None else int(vocab_size))
        super().__init__(_raw.ptdp_tokenizer_create(opts))

    @classmethod
    def from_checkpoint(cls, directory):
        """The tokenizer a ptdp-train checkpoint in ``directory`` was trained with (its recorded
        --tokenizer-type and files, or bytes for --text-file)."""
        t = cls.__new__(cls)
        Handle.__init__(t, _raw.ptdp_tokenizer_create_from_checkpoint(os.fspath(directory)))
        return t

    @property
    def type(self):
        """The :class:`TokenizerType` it was created as."""
        return TokenizerType(_raw.ptdp_tokenizer_get_type(self.handle))

    @property
    def vocab_size(self):
        """The number of ids (every id below it is valid, special tokens included): the vocabulary
        size Megatron pads."""
        return _raw.ptdp_tokenizer_vocab_size(self.handle)

    @property
    def eod(self):
        """The end-of-document id (what --append-eod appends), or None when there is none."""
        id_ = _raw.ptdp_tokenizer_eod(self.handle)
        return None if id_ < 0 else id_

    @property
    def bos(self):
        """The beginning-of-sequence id, or None when there is none."""
        id_ = _raw.ptdp_tokenizer_bos(self.handle)
        return None if id_ < 0 else id_

    def encode(self, text):
        """The token ids of ``text`` (str, encoded as UTF-8, or bytes) as an int32 array."""
        data = _as_bytes(text, "text")
        # The first call asks for the count (reported also when there is no room).
        (status, message), count = _raw.ptdp_tokenizer_encode(self.handle, data, None)
        if status and count == 0:  # refused, not a matter of room
            raise error_for(status, message)
        ids = np.zeros(count, dtype=np.int32)
        if count:
            (status, message), count = _raw.ptdp_tokenizer_encode(self.handle, data, ids)
            if status:
                raise error_for(status, message)
        return ids

    def decode_bytes(self, ids):
        """The text of ``ids`` (any int32 array-like) as bytes, exactly as the tokenizer writes it."""
        a = as_int32(ids, "ids").reshape(-1)
        return filled(lambda buffer: _raw.ptdp_tokenizer_decode(self.handle, a, buffer), 4 * a.size + 16)

    def decode(self, ids):
        """The text of ``ids`` as str; bytes that are not UTF-8 become U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", "replace")

    def token_to_id(self, token):
        """The id of one vocabulary entry spelled as the model spells it ("Ġthe", "▁the", added
        tokens as written), or None when it is not an entry."""
        id_ = _raw.ptdp_tokenizer_token_to_id(self.handle, _as_bytes(token, "token"))
        return None if id_ < 0 else id_

    def id_to_token(self, id_):
        """The vocabulary entry of an id as str (bytes that are not UTF-8, such as ByteLevel's
        entries above 127, as surrogate escapes: :meth:`token_to_id` takes the str back)."""
        entry = filled(lambda buffer: _raw.ptdp_tokenizer_id_to_token(self.handle, int(id_), buffer), 256)
        return entry.decode("utf-8", "surrogateescape")


__all__ = ["TokenizerType", "Tokenizer"]
