//! The Llama family's options through the safe crate: a tiny Llama-style model gives its options
//! back, and the presets are listed and filled.
use ptdp::sys;
use ptdp::{
    model_presets, preset_options, Defaults, GptOptions, Groups, Model, ParallelOptions, Runtime, RuntimeOptions,
};

#[test]
fn tiny_llama_options_round_trip() -> ptdp::Result<()> {
    let mut ro = RuntimeOptions::defaults();
    ro.use_mpi = 0;
    let runtime = Runtime::new(&ro)?;
    let groups = Groups::new(&runtime, &ParallelOptions::defaults())?;

    let mut gpt = GptOptions::defaults();
    gpt.num_layers = 2;
    gpt.hidden_size = 32;
    gpt.num_attention_heads = 4;
    gpt.ffn_hidden_size = 48;
    gpt.vocab_size = 64;
    gpt.seq_length = 16;
    gpt.normalization = sys::PTDP_NORMALIZATION_RMSNORM;
    gpt.swiglu = 1;
    gpt.position_embedding_type = sys::PTDP_POSITION_EMBEDDING_ROPE;
    gpt.rotary_base = 500000.0;
    gpt.num_query_groups = 2;
    gpt.disable_bias_linear = 1;
    gpt.untie_embeddings_and_output_weights = 1;
    let model = Model::new(&groups, &gpt)?;
    let back = model.options()?;
    assert_eq!(back.normalization, sys::PTDP_NORMALIZATION_RMSNORM);
    assert_eq!(back.position_embedding_type, sys::PTDP_POSITION_EMBEDDING_ROPE);
    assert_eq!(
        (back.swiglu, back.num_query_groups, back.disable_bias_linear),
        (1, 2, 1)
    );
    assert_eq!(back.rotary_base, 500000.0);
    assert_eq!(back.rotary_percent, 1.0); // 0 given: the default, resolved
    let names: Vec<String> = (0..model.num_params()?)
        .map(|i| model.param_info(i).map(|p| p.name))
        .collect::<ptdp::Result<_>>()?;
    assert!(!names.iter().any(|n| n == "embedding.position_embeddings.weight"));
    assert!(names.iter().any(|n| n == "output_layer.weight"));
    Ok(())
}

#[test]
fn presets_are_listed_and_filled() -> ptdp::Result<()> {
    let names = model_presets()?;
    assert!(names.iter().any(|n| n == "llama-3.2-1b"), "{names:?}");
    let llama = preset_options("llama-3.2-1b")?;
    assert_eq!((llama.hidden_size, llama.num_query_groups), (2048, 8));
    assert_eq!(llama.normalization, sys::PTDP_NORMALIZATION_RMSNORM);
    let err = preset_options("llama-9").err().expect("an unknown preset must fail");
    assert_eq!(err.status(), sys::PTDP_ERR_INVALID_ARGUMENT);
    assert!(err.message().contains("gpt2-124m"), "message: {}", err.message());
    Ok(())
}
