//! Preprocessing: JSON lines to Megatron's indexed data sets, and merging data sets, as
//! Megatron-LM's `tools/preprocess_data.py` and `tools/merge_datasets.py` do (the library's code,
//! shared with the `ptdp-preprocess-data` and `ptdp-merge-datasets` tools). Each key of the JSON
//! lines gives the data set OUTPUT_PREFIX_KEY_document, read by [`crate::IndexedDataset`].
use crate::error::{c_string, check, Result};
use crate::options::{Defaults, PreprocessOptions, PreprocessResult};
use crate::sys;
use std::ffi::CString;
use std::os::raw::c_char;
use std::ptr;

/// What to preprocess: `ptdp-preprocess-data`'s flags. `Default` gives the library's defaults
/// (ByteLevel, key "text", one worker) with no input and no output prefix.
#[derive(Clone, Debug, Default)]
pub struct PreprocessArgs {
    /// `--input`: JSON-lines files (plain or gzip), read in order.
    pub inputs: Vec<String>,
    /// `--json-keys`; empty: "text".
    pub json_keys: Vec<String>,
    /// `--output-prefix`; its directory must exist.
    pub output_prefix: String,
    /// `--tokenizer-type`, Megatron's name; None: "ByteLevel".
    pub tokenizer_type: Option<String>,
    /// `--vocab-file` (GPT2BPETokenizer's vocab.json).
    pub vocab_file: Option<String>,
    /// `--merge-file` (GPT2BPETokenizer's merges.txt).
    pub merge_file: Option<String>,
    /// `--tokenizer-model` (tokenizer.json, tokenizer.model).
    pub tokenizer_model: Option<String>,
    /// `--vocab-size` (NullTokenizer: ids below it); 0: unset.
    pub vocab_size: i64,
    /// `--append-eod`: end every document that has tokens with the end-of-document id.
    pub append_eod: bool,
    /// `--workers`: tokenizing threads; None: 1.
    pub workers: Option<i32>,
    /// A progress line on stderr every N documents; 0: none.
    pub log_interval: i64,
    /// Drop a bad line and count it instead of failing.
    pub skip_bad_lines: bool,
}

/// Strings as C strings, and the array of pointers to them (which borrows them).
fn c_strings<S: AsRef<str>>(what: &str, items: &[S]) -> Result<(Vec<CString>, Vec<*const c_char>)> {
    let owned = items
        .iter()
        .map(|s| c_string(what, s.as_ref()))
        .collect::<Result<Vec<CString>>>()?;
    let pointers = owned.iter().map(|s| s.as_ptr()).collect();
    Ok((owned, pointers))
}

/// Tokenizes the inputs into one indexed data set per key; returns what was done. A bad line
/// is an invalid argument naming FILE:LINE (unless skipped), an unreadable input an I/O error
/// naming it; a failed run leaves no partial data set.
pub fn preprocess(args: &PreprocessArgs) -> Result<PreprocessResult> {
    let (_inputs, input_ptrs) = c_strings("input", &args.inputs)?;
    let (_keys, key_ptrs) = c_strings("json key", &args.json_keys)?;
    let output = c_string("output_prefix", &args.output_prefix)?;
    let optional = |what: &str, s: &Option<String>| s.as_deref().map(|s| c_string(what, s)).transpose();
    let tokenizer_type = optional("tokenizer_type", &args.tokenizer_type)?;
    let vocab = optional("vocab_file", &args.vocab_file)?;
    let merges = optional("merge_file", &args.merge_file)?;
    let model = optional("tokenizer_model", &args.tokenizer_model)?;
    let as_ptr = |s: &Option<CString>| s.as_ref().map_or(ptr::null(), |s| s.as_ptr());

    let mut options = PreprocessOptions::defaults();
    options.inputs = input_ptrs.as_ptr();
    options.num_inputs = input_ptrs.len() as i32;
    options.json_keys = if key_ptrs.is_empty() {
        ptr::null()
    } else {
        key_ptrs.as_ptr()
    };
    options.num_json_keys = key_ptrs.len() as i32;
    options.output_prefix = output.as_ptr();
    if tokenizer_type.is_some() {
        options.tokenizer_type = as_ptr(&tokenizer_type);
    }
    options.vocab_file = as_ptr(&vocab);
    options.merge_file = as_ptr(&merges);
    options.tokenizer_model = as_ptr(&model);
    options.vocab_size = args.vocab_size;
    options.append_eod = args.append_eod as i32;
    if let Some(workers) = args.workers {
        options.workers = workers;
    }
    options.log_interval = args.log_interval;
    options.skip_bad_lines = args.skip_bad_lines as i32;

    // SAFETY: a plain C struct of numbers; struct_size tells the library how much to write.
    let mut result: PreprocessResult = unsafe { std::mem::zeroed() };
    result.struct_size = std::mem::size_of::<PreprocessResult>();
    check(unsafe { sys::ptdp_preprocess(&options, &mut result) })?;
    Ok(result)
}

/// Concatenates the indexed data sets `prefixes` (documents and sequences, in order) into
/// OUTPUT_PREFIX.bin and .idx.
pub fn merge_datasets<S: AsRef<str>>(prefixes: &[S], output_prefix: &str) -> Result<()> {
    let (_owned, pointers) = c_strings("prefix", prefixes)?;
    let output = c_string("output_prefix", output_prefix)?;
    check(unsafe { sys::ptdp_merge_datasets(pointers.as_ptr(), pointers.len() as i32, output.as_ptr()) })
}

type MainFn = unsafe extern "C" fn(i32, *const *const c_char, *mut i32) -> sys::ptdp_status;

fn run_main<S: AsRef<str>>(main: MainFn, args: &[S]) -> Result<i32> {
    let (_owned, argv) = c_strings("argument", args)?;
    let mut exit_code = 1;
    check(unsafe { main(argv.len() as i32, argv.as_ptr(), &mut exit_code) })?;
    Ok(exit_code)
}

/// Runs `ptdp-preprocess-data` with `args` (`args[0]` is the program name, then Megatron's
/// flags). Returns the exit status: 0 done, 1 failed (the message on stderr), 2 bad flags.
pub fn preprocess_main<S: AsRef<str>>(args: &[S]) -> Result<i32> {
    run_main(sys::ptdp_preprocess_main, args)
}

/// Runs `ptdp-merge-datasets` with `args` (`args[0]` is the program name, then `--input DIR` or
/// `--datasets PREFIX ...`, and `--output-prefix`). Returns the exit status as
/// [`preprocess_main`].
pub fn merge_datasets_main<S: AsRef<str>>(args: &[S]) -> Result<i32> {
    run_main(sys::ptdp_merge_datasets_main, args)
}
