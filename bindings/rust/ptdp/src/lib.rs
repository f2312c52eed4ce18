//! Safe Rust types over the ptdp C API.
//!
//! Each handle of the C API is a type that frees it in `Drop`; objects that must outlive
//! another borrow it (a [`Model`] borrows its [`Groups`], which borrow the [`Runtime`]), so the
//! compiler orders the frees. Every call returns [`Result`], whose [`Error`] carries the C
//! status and the library's message (`ptdp_last_error()`). Option structs are the C structs
//! themselves, filled with the library's defaults by [`Defaults::defaults`].
//!
//! Text comes in through [`Tokenizer`] (Megatron's tokenizer types) and [`preprocess`] (JSON
//! lines to indexed data sets, read back with [`IndexedDataset`]); Hugging Face checkpoints
//! through [`hf_read_options`], [`hf_load`] and [`hf_save`]; [`eod_masks`] and [`IGNORE_INDEX`]
//! mask losses and documents for the `_masked` calls.
//!
//! ```no_run
//! use ptdp::{Defaults, Groups, Model, Runtime, RuntimeOptions};
//! let mut ro = RuntimeOptions::defaults();
//! ro.use_mpi = 0; // one process
//! let runtime = Runtime::new(&ro)?;
//! let groups = Groups::new(&runtime, &ptdp::ParallelOptions::defaults())?;
//! let model = Model::new(&groups, &ptdp::GptOptions::defaults())?;
//! println!("{} parameters", model.num_params()?);
//! # Ok::<(), ptdp::Error>(())
//! ```
mod config;
mod data;
mod error;
mod hf;
mod masks;
mod model;
mod options;
mod pipeline;
mod preprocessing;
mod runtime;
mod tensor;
mod tokenizer;
mod trainer;

pub use ptdp_sys as sys;

pub use config::TrainConfig;
pub use data::{GptData, IndexedDataset};
pub use error::{Error, Result};
pub use hf::{hf_load, hf_read_options, hf_save};
pub use masks::{eod_masks, BatchMasks, EodMasks, IGNORE_INDEX};
pub use model::{checkpoint_load, checkpoint_save, Model, Optimizer, ParamInfo, Schedule};
pub use options::*;
pub use pipeline::{pipeline_run, Stages};
pub use preprocessing::{merge_datasets, merge_datasets_main, preprocess, preprocess_main, PreprocessArgs};
pub use runtime::{Groups, Runtime};
pub use tensor::{Element, Tensor};
pub use tokenizer::{tokenizer_type, tokenizer_type_name, Tokenizer, TokenizerFiles};
pub use trainer::{train_main, IterationReport, MoeLayerLoad, MoeMetrics, Trainer, TrainerOptions};

use std::ffi::CStr;

/// The library's version string, e.g. "0.1.0".
pub fn version() -> String {
    // SAFETY: ptdp_version() returns a static NUL-terminated string.
    unsafe { CStr::from_ptr(sys::ptdp_version()) }
        .to_string_lossy()
        .into_owned()
}

/// Whether an optional part of the library (`sys::PTDP_FEATURE_*`) was built in.
pub fn has_feature(feature: sys::ptdp_feature) -> Result<bool> {
    let mut available = 0;
    error::check(unsafe { sys::ptdp_has_feature(feature, &mut available) })?;
    Ok(available != 0)
}
