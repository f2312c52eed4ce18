//! GPT training samples (mock tokens, Megatron's indexed data sets, or plain text), and
//! Megatron's indexed data sets themselves.
use crate::error::{c_string, check, Result};
use crate::options::GptDataOptions;
use crate::sys;
use std::ptr;

/// A sample source with its train, validation and test splits.
pub struct GptData {
    raw: sys::ptdp_gpt_data,
    seq_length: i32,
}

impl GptData {
    /// Opens a source. `path` and `split` replace the options' string fields for the call
    /// (None keeps the field as it is).
    pub fn new(options: &GptDataOptions, path: Option<&str>, split: Option<&str>) -> Result<GptData> {
        let path = path.map(|p| c_string("path", p)).transpose()?;
        let split = split.map(|s| c_string("split", s)).transpose()?;
        let mut options = *options;
        if let Some(path) = &path {
            options.path = path.as_ptr();
        }
        if let Some(split) = &split {
            options.split = split.as_ptr();
        }
        let mut raw = ptr::null_mut();
        check(unsafe { sys::ptdp_gpt_data_create(&options, &mut raw) })?;
        Ok(GptData {
            raw,
            seq_length: options.seq_length,
        })
    }

    /// Samples in a split (`sys::PTDP_SPLIT_*`).
    pub fn num_samples(&self, split: sys::ptdp_data_split) -> Result<i64> {
        let mut count = 0;
        check(unsafe { sys::ptdp_gpt_data_num_samples(self.raw, split, &mut count) })?;
        Ok(count)
    }

    /// `count` samples from `first`: (tokens, labels), each [count, seq_length] row-major.
    pub fn batch(&self, split: sys::ptdp_data_split, first: i64, count: i32) -> Result<(Vec<i32>, Vec<i32>)> {
        let n = count.max(0) as usize * self.seq_length as usize;
        let (mut tokens, mut labels) = (vec![0; n], vec![0; n]);
        check(unsafe {
            sys::ptdp_gpt_data_batch(self.raw, split, first, count, tokens.as_mut_ptr(), labels.as_mut_ptr())
        })?;
        Ok((tokens, labels))
    }

    pub fn as_raw(&self) -> sys::ptdp_gpt_data {
        self.raw
    }
}

impl Drop for GptData {
    fn drop(&mut self) {
        unsafe { sys::ptdp_gpt_data_destroy(self.raw) };
    }
}

/// A Megatron indexed data set PREFIX.idx + PREFIX.bin, read-only: documents of token ids.
pub struct IndexedDataset {
    raw: sys::ptdp_dataset,
}

impl IndexedDataset {
    /// Opens PREFIX.idx and PREFIX.bin.
    pub fn open(prefix: &str) -> Result<IndexedDataset> {
        let prefix = c_string("prefix", prefix)?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::ptdp_dataset_open(prefix.as_ptr(), &mut raw) })?;
        Ok(IndexedDataset { raw })
    }

    pub fn num_documents(&self) -> Result<i64> {
        let mut count = 0;
        check(unsafe { sys::ptdp_dataset_num_documents(self.raw, &mut count) })?;
        Ok(count)
    }

    pub fn num_sequences(&self) -> Result<i64> {
        let mut count = 0;
        check(unsafe { sys::ptdp_dataset_num_sequences(self.raw, &mut count) })?;
        Ok(count)
    }

    /// Document `index`'s tokens (all its sequences).
    pub fn document(&self, index: i64) -> Result<Vec<i32>> {
        // The first call asks for the length, reported also when there is no room.
        let mut count = 0;
        let first = check(unsafe { sys::ptdp_dataset_document(self.raw, index, ptr::null_mut(), 0, &mut count) });
        if count == 0 {
            return first.map(|()| Vec::new());
        }
        let mut tokens = vec![0; count as usize];
        check(unsafe { sys::ptdp_dataset_document(self.raw, index, tokens.as_mut_ptr(), count, &mut count) })?;
        tokens.truncate(count as usize);
        Ok(tokens)
    }

    pub fn as_raw(&self) -> sys::ptdp_dataset {
        self.raw
    }
}

impl Drop for IndexedDataset {
    fn drop(&mut self) {
        unsafe { sys::ptdp_dataset_destroy(self.raw) };
    }
}
