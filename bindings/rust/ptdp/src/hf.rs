//! Hugging Face checkpoints: `GPT2LMHeadModel`, `LlamaForCausalLM`, `MistralForCausalLM` and
//! `Qwen2ForCausalLM` directories (config.json and model.safetensors, or its shards) in and out.
//! The layouts are converted, not reinterpreted: a model imported and exported again gives the
//! same tensors, bit for bit, in the dtype they were stored in.
use crate::error::{c_string, check, Result};
use crate::model::Model;
use crate::options::{Defaults, GptOptions, HfSaveOptions};
use crate::sys;

/// The model options a Hugging Face directory's config.json describes (shape, vocabulary,
/// norms, RoPE, grouped-query attention, biases, tying, dropout; seq_length is the model's
/// context, the training settings their defaults), and its class (`sys::PTDP_HF_ARCHITECTURE_*`).
pub fn hf_read_options(directory: &str) -> Result<(GptOptions, sys::ptdp_hf_architecture)> {
    let dir = c_string("directory", directory)?;
    let mut options = GptOptions::defaults(); // struct_size set: the library fills that many bytes
    let mut architecture = sys::PTDP_HF_ARCHITECTURE_AUTO;
    check(unsafe { sys::ptdp_hf_read_options(dir.as_ptr(), &mut options, &mut architecture) })?;
    Ok((options, architecture))
}

/// Sets every parameter of `model` (built from [`hf_read_options`]; the training settings and
/// the layout may differ) from a Hugging Face checkpoint. Collective over the model's world; on
/// any failure the model is unchanged.
pub fn hf_load(directory: &str, model: &Model) -> Result<()> {
    let dir = c_string("directory", directory)?;
    check(unsafe { sys::ptdp_hf_load(dir.as_ptr(), model.as_raw()) })
}

/// Writes `model` (any layout) as a Hugging Face checkpoint in `directory` (created when
/// missing). `options`: the class, the storage dtype and the shard size (None: the defaults,
/// F32 in one file of the class the model's settings call for); `base_config`: a config.json
/// whose fields ptdp does not describe are kept (it replaces the options' field for the call).
/// Collective over the model's world; world rank 0 writes.
pub fn hf_save(
    directory: &str,
    model: &Model,
    options: Option<&HfSaveOptions>,
    base_config: Option<&str>,
) -> Result<()> {
    let dir = c_string("directory", directory)?;
    let base = base_config.map(|b| c_string("base_config", b)).transpose()?;
    let mut options = options.copied().unwrap_or_else(HfSaveOptions::defaults);
    if let Some(base) = &base {
        options.base_config = base.as_ptr();
    }
    check(unsafe { sys::ptdp_hf_save(dir.as_ptr(), model.as_raw(), &options) })
}
