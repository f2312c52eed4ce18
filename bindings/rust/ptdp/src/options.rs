//! The option structs of the C API, filled with the library's defaults.
use crate::sys;
use std::mem::MaybeUninit;

/// Option structs whose defaults come from their `ptdp_*_init` function (which also sets
/// `struct_size`, so the library knows which version of the struct it was given).
pub trait Defaults: Sized {
    /// The library's defaults.
    fn defaults() -> Self;
}

macro_rules! defaults {
    ($($alias:ident = $c:ident by $init:ident;)*) => {$(
        #[doc = concat!("`", stringify!($c), "`, filled by `", stringify!($init), "()`.")]
        pub type $alias = sys::$c;
        impl Defaults for sys::$c {
            fn defaults() -> Self {
                let mut value = MaybeUninit::<sys::$c>::zeroed();
                // SAFETY: all-zero is a valid value of these plain C structs (NULL pointers,
                // None callbacks), and the init function only fails on a NULL argument.
                unsafe {
                    let status = sys::$init(value.as_mut_ptr());
                    debug_assert_eq!(status, sys::PTDP_SUCCESS);
                    value.assume_init()
                }
            }
        }
    )*};
}

defaults! {
    TensorOptions = ptdp_tensor_options by ptdp_tensor_options_init;
    RuntimeOptions = ptdp_runtime_options by ptdp_runtime_options_init;
    ParallelOptions = ptdp_parallel_options by ptdp_parallel_options_init;
    GptOptions = ptdp_gpt_options by ptdp_gpt_options_init;
    PipelineOptions = ptdp_pipeline_options by ptdp_pipeline_options_init;
    ScheduleCosts = ptdp_schedule_costs by ptdp_schedule_costs_init;
    OptimizerOptions = ptdp_optimizer_options by ptdp_optimizer_options_init;
    GptDataOptions = ptdp_gpt_data_options by ptdp_gpt_data_options_init;
    GenerateOptions = ptdp_generate_options by ptdp_generate_options_init;
    CheckpointState = ptdp_checkpoint_state by ptdp_checkpoint_state_init;
    TokenizerOptions = ptdp_tokenizer_options by ptdp_tokenizer_options_init;
    HfSaveOptions = ptdp_hf_save_options by ptdp_hf_save_options_init;
    PreprocessOptions = ptdp_preprocess_options by ptdp_preprocess_options_init;
}

/// The names of the model presets (`--model-preset` of ptdp-train and ptdp-plan), in order.
pub fn model_presets() -> crate::Result<Vec<String>> {
    let mut count = 0;
    crate::error::check(unsafe { sys::ptdp_model_preset_count(&mut count) })?;
    (0..count)
        .map(|i| {
            let mut length = 0;
            // Asks for the length first (a capacity of 0 is too small by design).
            crate::error::check(unsafe { sys::ptdp_model_preset_name(i, std::ptr::null_mut(), 0, &mut length) }).ok();
            let mut buffer = vec![0u8; length + 1];
            crate::error::check(unsafe {
                sys::ptdp_model_preset_name(i, buffer.as_mut_ptr().cast(), buffer.len(), &mut length)
            })?;
            Ok(crate::error::from_buffer(&buffer))
        })
        .collect()
}

/// The options of a named preset (any case): its shape and architecture, the other fields at
/// their defaults. An unknown name is an error listing the presets.
pub fn preset_options(name: &str) -> crate::Result<GptOptions> {
    let name = crate::error::c_string("preset name", name)?;
    let mut options = GptOptions::defaults();
    crate::error::check(unsafe { sys::ptdp_gpt_options_from_preset(name.as_ptr(), &mut options) })?;
    Ok(options)
}

/// What one training iteration or optimizer step reports (loss, grad norm, lr, ...).
pub type IterationResult = sys::ptdp_iteration_result;
/// The driver's settings of a parsed `ptdp-train` command line; its strings belong to the
/// [`crate::TrainConfig`] it came from.
pub type TrainSettings = sys::ptdp_train_settings;
/// One action of a pipeline schedule.
pub type Action = sys::ptdp_action;
/// What a preprocessing run did: documents, bad lines, bytes, tokens, seconds, dtype code.
pub type PreprocessResult = sys::ptdp_preprocess_result;

pub(crate) fn opt_ptr<T>(value: Option<&T>) -> *const T {
    value.map_or(std::ptr::null(), |v| v as *const T)
}
