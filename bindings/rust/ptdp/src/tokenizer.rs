//! Tokenizers: text to token ids and back, with Megatron-LM's `--tokenizer-type` names and
//! flags, giving the ids the reference libraries give for the same files.
use crate::error::{c_string, check, filled, Error, Result};
use crate::options::{Defaults, TokenizerOptions};
use crate::sys;
use std::ffi::CString;
use std::ptr;

/// Megatron's `--tokenizer-type` names of the tokenizer types.
const MEGATRON_NAMES: [(&str, sys::ptdp_tokenizer_type); 5] = [
    ("ByteLevel", sys::PTDP_TOKENIZER_BYTE_LEVEL),
    ("NullTokenizer", sys::PTDP_TOKENIZER_NULL),
    ("GPT2BPETokenizer", sys::PTDP_TOKENIZER_GPT2_BPE),
    ("HuggingFaceTokenizer", sys::PTDP_TOKENIZER_HUGGING_FACE),
    ("SentencePieceTokenizer", sys::PTDP_TOKENIZER_SENTENCE_PIECE),
];

/// The tokenizer type (`sys::PTDP_TOKENIZER_*`) of Megatron's `--tokenizer-type` name, e.g.
/// "GPT2BPETokenizer"; an unknown name is an invalid argument listing the names.
pub fn tokenizer_type(name: &str) -> Result<sys::ptdp_tokenizer_type> {
    MEGATRON_NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, t)| t)
        .ok_or_else(|| {
            let names: Vec<&str> = MEGATRON_NAMES.iter().map(|(n, _)| *n).collect();
            Error::invalid(format!("tokenizer type '{name}' is not one of {}", names.join(", ")))
        })
}

/// Megatron's `--tokenizer-type` name of a tokenizer type, e.g. "ByteLevel".
pub fn tokenizer_type_name(kind: sys::ptdp_tokenizer_type) -> Result<&'static str> {
    MEGATRON_NAMES
        .iter()
        .find(|(_, t)| *t == kind)
        .map(|&(n, _)| n)
        .ok_or_else(|| Error::invalid(format!("tokenizer type {kind} is not a ptdp_tokenizer_type")))
}

/// The files and flags a tokenizer is made from (`--vocab-file`, `--merge-file`,
/// `--tokenizer-model`, `--vocab-size`); `Default` leaves them all unset.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokenizerFiles<'a> {
    /// GPT2BPETokenizer's vocab.json.
    pub vocab_file: Option<&'a str>,
    /// GPT2BPETokenizer's merges.txt.
    pub merge_file: Option<&'a str>,
    /// A tokenizer.json (HuggingFaceTokenizer) or a SentencePiece .model.
    pub tokenizer_model: Option<&'a str>,
    /// NullTokenizer's V (ids below it); 0: unset.
    pub vocab_size: i64,
}

/// A tokenizer. It is immutable once created: one tokenizer may encode and decode from several
/// threads at once. No special token is added around the text; byte-level tokenizers give any
/// bytes back (`decode_bytes(encode_bytes(b)) == b`).
pub struct Tokenizer {
    raw: sys::ptdp_tokenizer,
}

// SAFETY: the C API documents a tokenizer as immutable once created and safe to use from
// several threads at once; destruction takes `self` by value (Drop), so no call can overlap it.
unsafe impl Send for Tokenizer {}
unsafe impl Sync for Tokenizer {}

impl Tokenizer {
    /// Creates a tokenizer from the C options (their strings are read during the call only).
    pub fn new(options: &TokenizerOptions) -> Result<Tokenizer> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::ptdp_tokenizer_create(options, &mut raw) })?;
        Ok(Tokenizer { raw })
    }

    /// Creates a tokenizer of `kind` (`sys::PTDP_TOKENIZER_*`, or [`tokenizer_type`] of a
    /// Megatron name) from its files. A file the type needs and is not given, or one it does not
    /// use, is an invalid argument naming the flag; a missing or malformed file an I/O error
    /// naming it.
    pub fn with_files(kind: sys::ptdp_tokenizer_type, files: &TokenizerFiles) -> Result<Tokenizer> {
        let path = |what: &str, p: Option<&str>| p.map(|p| c_string(what, p)).transpose();
        let vocab = path("vocab_file", files.vocab_file)?;
        let merges = path("merge_file", files.merge_file)?;
        let model = path("tokenizer_model", files.tokenizer_model)?;
        let as_ptr = |s: &Option<CString>| s.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        let mut options = TokenizerOptions::defaults();
        options.r#type = kind;
        options.vocab_file = as_ptr(&vocab);
        options.merge_file = as_ptr(&merges);
        options.tokenizer_model = as_ptr(&model);
        options.vocab_size = files.vocab_size;
        Tokenizer::new(&options)
    }

    /// One token per byte (ids 0..255), no files.
    pub fn byte_level() -> Result<Tokenizer> {
        Tokenizer::with_files(sys::PTDP_TOKENIZER_BYTE_LEVEL, &TokenizerFiles::default())
    }

    /// The tokenizer a ptdp-train checkpoint in `directory` was trained with.
    pub fn from_checkpoint(directory: &str) -> Result<Tokenizer> {
        let dir = c_string("directory", directory)?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::ptdp_tokenizer_create_from_checkpoint(dir.as_ptr(), &mut raw) })?;
        Ok(Tokenizer { raw })
    }

    /// The type it was created as (`sys::PTDP_TOKENIZER_*`).
    pub fn kind(&self) -> Result<sys::ptdp_tokenizer_type> {
        let mut kind = 0;
        check(unsafe { sys::ptdp_tokenizer_get_type(self.raw, &mut kind) })?;
        Ok(kind)
    }

    /// The token ids of a text (its UTF-8 bytes).
    pub fn encode(&self, text: &str) -> Result<Vec<i32>> {
        self.encode_bytes(text.as_bytes())
    }

    /// The token ids of any bytes (NUL is a byte like the others).
    pub fn encode_bytes(&self, text: &[u8]) -> Result<Vec<i32>> {
        // The first call asks for the count, reported also when there is no room.
        let mut count = 0;
        let first = check(unsafe {
            sys::ptdp_tokenizer_encode(
                self.raw,
                text.as_ptr().cast(),
                text.len(),
                ptr::null_mut(),
                0,
                &mut count,
            )
        });
        if count == 0 {
            return first.map(|()| Vec::new()); // no ids, or refused (not a matter of room)
        }
        let mut ids = vec![0; count];
        check(unsafe {
            sys::ptdp_tokenizer_encode(
                self.raw,
                text.as_ptr().cast(),
                text.len(),
                ids.as_mut_ptr(),
                ids.len(),
                &mut count,
            )
        })?;
        ids.truncate(count);
        Ok(ids)
    }

    /// The text of `ids` as the tokenizer writes it (bytes; byte-level tokenizers may cut a
    /// UTF-8 character).
    pub fn decode_bytes(&self, ids: &[i32]) -> Result<Vec<u8>> {
        filled(4 * ids.len() + 16, |buffer, capacity, length| unsafe {
            sys::ptdp_tokenizer_decode(self.raw, ids.as_ptr(), ids.len(), buffer, capacity, length)
        })
    }

    /// The text of `ids` as a string; bytes that are not UTF-8 become U+FFFD.
    pub fn decode(&self, ids: &[i32]) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(ids)?).into_owned())
    }

    /// The number of ids: every id below it is valid (the vocabulary size Megatron pads).
    pub fn vocab_size(&self) -> Result<i64> {
        let mut size = 0;
        check(unsafe { sys::ptdp_tokenizer_vocab_size(self.raw, &mut size) })?;
        Ok(size)
    }

    /// The end-of-document id (what `--append-eod` appends), if the tokenizer has one.
    pub fn eod(&self) -> Result<Option<i32>> {
        let mut id = 0;
        check(unsafe { sys::ptdp_tokenizer_eod(self.raw, &mut id) })?;
        Ok((id >= 0).then_some(id))
    }

    /// The beginning-of-sequence id, if the tokenizer has one.
    pub fn bos(&self) -> Result<Option<i32>> {
        let mut id = 0;
        check(unsafe { sys::ptdp_tokenizer_bos(self.raw, &mut id) })?;
        Ok((id >= 0).then_some(id))
    }

    /// The id of one vocabulary entry spelled as the model spells it ("Ġthe", "▁the", added
    /// tokens as written), or None when it is not an entry.
    pub fn token_to_id(&self, token: impl AsRef<[u8]>) -> Result<Option<i32>> {
        let token = token.as_ref();
        let mut id = 0;
        check(unsafe { sys::ptdp_tokenizer_token_to_id(self.raw, token.as_ptr().cast(), token.len(), &mut id) })?;
        Ok((id >= 0).then_some(id))
    }

    /// The vocabulary entry of an id, as [`Tokenizer::token_to_id`] spells it (bytes: a
    /// ByteLevel entry above 127 is not UTF-8).
    pub fn id_to_token(&self, id: i32) -> Result<Vec<u8>> {
        filled(256, |buffer, capacity, length| unsafe {
            sys::ptdp_tokenizer_id_to_token(self.raw, id, buffer, capacity, length)
        })
    }

    pub fn as_raw(&self) -> sys::ptdp_tokenizer {
        self.raw
    }
}

impl Drop for Tokenizer {
    fn drop(&mut self) {
        unsafe { sys::ptdp_tokenizer_destroy(self.raw) };
    }
}
