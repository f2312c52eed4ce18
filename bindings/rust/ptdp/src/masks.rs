//! Loss masks and packed documents: labels of [`IGNORE_INDEX`] take no part in the loss
//! (Megatron's masked mean; a microbatch with no counted token has loss 0), position ids restart
//! and attention stays inside each document ([`BatchMasks`], given to the `_masked` calls of
//! [`crate::Model`] and [`crate::Optimizer`]); [`eod_masks`] derives all three from an
//! end-of-document token, as Megatron's --eod-mask-loss, --reset-position-ids and
//! --reset-attention-mask do.
use crate::error::{check, Error, Result};
use crate::sys;
use std::mem::MaybeUninit;
use std::ptr;

/// The label that takes no part in the loss (PyTorch's and Hugging Face's ignore_index).
pub const IGNORE_INDEX: i32 = sys::PTDP_IGNORE_INDEX;

/// Per-token inputs of a batch besides tokens and labels, laid out like the tokens
/// ([rows, seq_length] row-major); None means the default.
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchMasks<'a> {
    /// Each token's position (default: token i of a sample is at position i).
    pub position_ids: Option<&'a [i32]>,
    /// The first position of each token's document (default: causal attention over the sample).
    pub document_starts: Option<&'a [i32]>,
}

impl BatchMasks<'_> {
    /// The C struct over the slices, each checked to hold `count` elements (the tokens').
    pub(crate) fn to_raw(self, count: usize) -> Result<sys::ptdp_batch_masks> {
        let mut raw = MaybeUninit::<sys::ptdp_batch_masks>::zeroed();
        // SAFETY: all-zero is a valid value (NULL arrays); init fills the rest.
        let mut raw = unsafe {
            check(sys::ptdp_batch_masks_init(raw.as_mut_ptr()))?;
            raw.assume_init()
        };
        let array = |what: &str, values: Option<&[i32]>| match values {
            Some(v) if v.len() != count => Err(Error::invalid(format!("{what} has {} elements, not {count}", v.len()))),
            Some(v) => Ok(v.as_ptr()),
            None => Ok(ptr::null()),
        };
        raw.position_ids = array("position_ids", self.position_ids)?;
        raw.document_starts = array("document_starts", self.document_starts)?;
        Ok(raw)
    }
}

/// What [`eod_masks`] fills, each [rows, seq_length] row-major; None where its flag was not
/// asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EodMasks {
    /// The labels given, [`IGNORE_INDEX`] where the token is the end of document
    /// (`sys::PTDP_EOD_MASK_LOSS`).
    pub labels: Option<Vec<i32>>,
    /// Each token's position within its document (`sys::PTDP_EOD_RESET_POSITION_IDS`).
    pub position_ids: Option<Vec<i32>>,
    /// The first position of each token's document (`sys::PTDP_EOD_RESET_ATTENTION_MASK`).
    pub document_starts: Option<Vec<i32>>,
}

impl EodMasks {
    /// The position ids and document starts as [`BatchMasks`] for the `_masked` calls.
    pub fn batch_masks(&self) -> BatchMasks<'_> {
        BatchMasks {
            position_ids: self.position_ids.as_deref(),
            document_starts: self.document_starts.as_deref(),
        }
    }
}

/// Megatron's masks of the samples `tokens` ([rows, seq_length]) from their end-of-document
/// token: a document ends with its end-of-document token, the next token starts another.
/// `flags` combines `sys::PTDP_EOD_*`; `labels` (required with `PTDP_EOD_MASK_LOSS`) is copied,
/// not changed.
pub fn eod_masks(
    tokens: &[i32],
    seq_length: i32,
    eod_token_id: i32,
    labels: Option<&[i32]>,
    flags: sys::ptdp_eod_flags,
) -> Result<EodMasks> {
    if seq_length <= 0 || (tokens.len() / seq_length as usize) * seq_length as usize != tokens.len() {
        return Err(Error::invalid(format!(
            "eod_masks: {} tokens are not a multiple of seq_length = {seq_length}",
            tokens.len()
        )));
    }
    if let Some(l) = labels {
        if l.len() != tokens.len() {
            return Err(Error::invalid(format!(
                "eod_masks: {} tokens but {} labels",
                tokens.len(),
                l.len()
            )));
        }
    }
    let wanted = |flag: sys::ptdp_eod_flags| ((flags & flag) != 0).then(|| vec![0; tokens.len()]);
    let mut out = EodMasks {
        labels: labels.map(<[i32]>::to_vec),
        position_ids: wanted(sys::PTDP_EOD_RESET_POSITION_IDS),
        document_starts: wanted(sys::PTDP_EOD_RESET_ATTENTION_MASK),
    };
    let ptr_of = |v: &mut Option<Vec<i32>>| v.as_mut().map_or(ptr::null_mut(), |v| v.as_mut_ptr());
    check(unsafe {
        sys::ptdp_eod_masks(
            tokens.as_ptr(),
            (tokens.len() / seq_length as usize) as i64,
            seq_length,
            eod_token_id,
            flags,
            ptr_of(&mut out.labels),
            ptr_of(&mut out.position_ids),
            ptr_of(&mut out.document_starts),
        )
    })?;
    Ok(out)
}
