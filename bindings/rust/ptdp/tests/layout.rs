//! The generated #[repr(C)] structs have the C layout: each init function writes
//! sizeof(C struct) into struct_size, which must equal Rust's size of the same struct.
use ptdp::sys;
use ptdp::Defaults;
use std::mem::size_of;

macro_rules! same_size {
    ($($t:ty),*) => {$(
        let value = <$t>::defaults();
        assert_eq!(value.struct_size, size_of::<$t>(), "{}", stringify!($t));
    )*};
}

#[test]
fn option_structs_match_the_library() {
    same_size!(
        sys::ptdp_tensor_options,
        sys::ptdp_runtime_options,
        sys::ptdp_parallel_options,
        sys::ptdp_gpt_options,
        sys::ptdp_pipeline_options,
        sys::ptdp_stage_callbacks,
        sys::ptdp_schedule_costs,
        sys::ptdp_optimizer_options,
        sys::ptdp_gpt_data_options,
        sys::ptdp_generate_options,
        sys::ptdp_checkpoint_state,
        sys::ptdp_tokenizer_options,
        sys::ptdp_hf_save_options,
        sys::ptdp_preprocess_options
    );
}

#[test]
fn defaults_are_the_documented_ones() {
    let gpt = sys::ptdp_gpt_options::defaults();
    assert_eq!(
        (gpt.num_layers, gpt.hidden_size, gpt.vocab_size, gpt.seed),
        (2, 64, 256, 1234)
    );
    let data = sys::ptdp_gpt_data_options::defaults();
    assert_eq!(data.num_samples, [0, 0, 0]);
    assert_eq!(data.seed, 1234);
    let tokenizer = sys::ptdp_tokenizer_options::defaults();
    assert_eq!(tokenizer.r#type, sys::PTDP_TOKENIZER_BYTE_LEVEL);
    let hf = sys::ptdp_hf_save_options::defaults();
    assert_eq!(
        (hf.dtype, hf.max_shard_size, hf.architecture),
        (sys::PTDP_DTYPE_F32, 0, sys::PTDP_HF_ARCHITECTURE_AUTO)
    );
    let pre = sys::ptdp_preprocess_options::defaults();
    assert_eq!((pre.workers, pre.num_json_keys, pre.append_eod), (1, 0, 0));
}
