//! `ptdp-train`'s command line (Megatron-LM's flag names), parsed by the library.
use crate::error::{c_string, check, from_buffer, Result};
use crate::options::TrainSettings;
use crate::options::{Defaults, GptDataOptions, GptOptions, OptimizerOptions, ParallelOptions, RuntimeOptions};
use crate::sys;
use std::ffi::CString;
use std::ptr;

/// A parsed training configuration.
pub struct TrainConfig {
    raw: sys::ptdp_train_config,
}

impl TrainConfig {
    /// Parses `args` (`args[0]` is the program name).
    pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<TrainConfig> {
        let owned = args
            .iter()
            .map(|a| c_string("argument", a.as_ref()))
            .collect::<Result<Vec<CString>>>()?;
        let argv: Vec<*const std::os::raw::c_char> = owned.iter().map(|a| a.as_ptr()).collect();
        let mut raw = ptr::null_mut();
        check(unsafe { sys::ptdp_train_config_parse(argv.len() as i32, argv.as_ptr(), &mut raw) })?;
        Ok(TrainConfig { raw })
    }

    /// The `--help` text.
    pub fn help(program: &str) -> Result<String> {
        let program = c_string("program", program)?;
        let mut length = 0;
        check(unsafe { sys::ptdp_train_config_help(program.as_ptr(), ptr::null_mut(), 0, &mut length) }).ok();
        let mut buffer = vec![0u8; length + 1];
        check(unsafe {
            sys::ptdp_train_config_help(program.as_ptr(), buffer.as_mut_ptr().cast(), buffer.len(), &mut length)
        })?;
        Ok(from_buffer(&buffer))
    }

    /// Every setting as JSON.
    pub fn to_json(&self) -> Result<String> {
        let mut length = 0;
        check(unsafe { sys::ptdp_train_config_to_json(self.raw, ptr::null_mut(), 0, &mut length) }).ok();
        let mut buffer = vec![0u8; length + 1];
        check(unsafe {
            sys::ptdp_train_config_to_json(self.raw, buffer.as_mut_ptr().cast(), buffer.len(), &mut length)
        })?;
        Ok(from_buffer(&buffer))
    }

    /// The driver's settings; their strings live as long as this configuration.
    pub fn settings(&self) -> Result<TrainSettings> {
        // SAFETY: all-zero is a valid value; struct_size is set before the call.
        let mut settings: TrainSettings = unsafe { std::mem::zeroed() };
        settings.struct_size = std::mem::size_of::<TrainSettings>();
        check(unsafe { sys::ptdp_train_config_settings(self.raw, &mut settings) })?;
        Ok(settings)
    }

    pub fn gpt_options(&self) -> Result<GptOptions> {
        let mut options = GptOptions::defaults();
        check(unsafe { sys::ptdp_train_config_gpt_options(self.raw, &mut options) })?;
        Ok(options)
    }

    pub fn optimizer_options(&self) -> Result<OptimizerOptions> {
        let mut options = OptimizerOptions::defaults();
        check(unsafe { sys::ptdp_train_config_optimizer_options(self.raw, &mut options) })?;
        Ok(options)
    }

    pub fn parallel_options(&self) -> Result<ParallelOptions> {
        let mut options = ParallelOptions::defaults();
        check(unsafe { sys::ptdp_train_config_parallel_options(self.raw, &mut options) })?;
        Ok(options)
    }

    pub fn runtime_options(&self) -> Result<RuntimeOptions> {
        let mut options = RuntimeOptions::defaults();
        check(unsafe { sys::ptdp_train_config_runtime_options(self.raw, &mut options) })?;
        Ok(options)
    }

    /// The data options; their strings live as long as this configuration.
    pub fn data_options(&self) -> Result<GptDataOptions> {
        let mut options = GptDataOptions::defaults();
        check(unsafe { sys::ptdp_train_config_data_options(self.raw, &mut options) })?;
        Ok(options)
    }

    pub fn as_raw(&self) -> sys::ptdp_train_config {
        self.raw
    }
}

impl Drop for TrainConfig {
    fn drop(&mut self) {
        unsafe { sys::ptdp_train_config_destroy(self.raw) };
    }
}
