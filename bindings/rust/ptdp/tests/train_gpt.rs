//! A tiny GPT trained through the C API in one process: the loss must fall.
use ptdp::sys;
use ptdp::Schedule;
use ptdp::{
    Defaults, GptOptions, Groups, Model, Optimizer, OptimizerOptions, ParallelOptions, Runtime, RuntimeOptions,
};

const VOCAB: i32 = 32;
const SEQ: i32 = 16;
const MICRO_BATCH: i32 = 2;
const MICROBATCHES: i32 = 2;

/// Counting sequences: each label is its token plus one, so the next token is learnable.
fn batch(iteration: i64) -> (Vec<i32>, Vec<i32>) {
    let samples = MICRO_BATCH * MICROBATCHES;
    let mut tokens = Vec::new();
    let mut labels = Vec::new();
    for s in 0..samples {
        let start = (iteration as i32 * 7 + s * 5) % VOCAB;
        for i in 0..SEQ {
            tokens.push((start + i) % VOCAB);
            labels.push((start + i + 1) % VOCAB);
        }
    }
    (tokens, labels)
}

#[test]
fn tiny_gpt_loss_falls() -> ptdp::Result<()> {
    let mut ro = RuntimeOptions::defaults();
    ro.use_mpi = 0;
    let runtime = Runtime::new(&ro)?;
    assert_eq!(runtime.world()?, (0, 1));
    let groups = Groups::new(&runtime, &ParallelOptions::defaults())?;

    let mut gpt = GptOptions::defaults();
    gpt.num_layers = 2;
    gpt.hidden_size = 32;
    gpt.num_attention_heads = 4;
    gpt.vocab_size = VOCAB;
    gpt.seq_length = SEQ;
    gpt.hidden_dropout = 0.0;
    gpt.attention_dropout = 0.0;
    let model = Model::new(&groups, &gpt)?;
    assert!(model.num_params()? > 0);
    let first = model.param_info(0)?;
    assert_eq!(
        model.get_param(&first)?.len() as i64,
        first.global_shape.iter().product::<i64>()
    );

    let mut opt = OptimizerOptions::defaults();
    opt.lr = 1e-2;
    let optimizer = Optimizer::new(&model, &opt)?;
    let schedule = Schedule::new(sys::PTDP_SCHEDULE_1F1B, 1, MICROBATCHES, 1)?;

    let mut losses = Vec::new();
    for iteration in 0..40 {
        let (tokens, labels) = batch(iteration);
        let result = optimizer.train_iteration(&schedule, &tokens, &labels, MICRO_BATCH, iteration, None)?;
        assert!(result.loss.is_finite() && result.grad_norm.is_finite());
        losses.push(result.loss);
    }
    let start = losses[0];
    let end = *losses.last().unwrap();
    println!("loss {start:.3} -> {end:.3}");
    assert!(
        start > 0.8 * (VOCAB as f32).ln(),
        "initial loss {start} should be near ln(V)"
    );
    assert!(end < 0.5 * start, "loss fell only from {start} to {end}");

    // Generation continues the counting pattern it learned.
    let mut gen = ptdp::GenerateOptions::defaults();
    gen.max_new_tokens = 4;
    gen.top_k = 1;
    let out = model.generate(&[3, 4, 5, 6], &gen)?;
    assert_eq!(out, vec![7, 8, 9, 10]);
    Ok(())
}

#[test]
fn moe_metrics_after_an_iteration() -> ptdp::Result<()> {
    let mut ro = RuntimeOptions::defaults();
    ro.use_mpi = 0;
    let runtime = Runtime::new(&ro)?;
    let groups = Groups::new(&runtime, &ParallelOptions::defaults())?;
    let mut gpt = GptOptions::defaults();
    gpt.num_layers = 2;
    gpt.hidden_size = 32;
    gpt.num_attention_heads = 4;
    gpt.vocab_size = VOCAB;
    gpt.seq_length = SEQ;
    gpt.num_experts = 4;
    gpt.moe_router_topk = 2;
    gpt.moe_ffn_hidden_size = 16;
    gpt.moe_aux_loss_coeff = 0.01;
    let model = Model::new(&groups, &gpt)?;
    assert_eq!(model.moe_metrics()?.0.moe_layers, 0); // before the first iteration
    let optimizer = Optimizer::new(&model, &OptimizerOptions::defaults())?;
    let schedule = Schedule::new(sys::PTDP_SCHEDULE_1F1B, 1, MICROBATCHES, 1)?;
    let (tokens, labels) = batch(0);
    optimizer.train_iteration(&schedule, &tokens, &labels, MICRO_BATCH, 0, None)?;
    let (metrics, loads) = model.moe_metrics()?;
    assert_eq!(metrics.moe_layers, 2);
    assert!(metrics.load_balancing_loss > 0.0 && metrics.z_loss.is_nan());
    assert_eq!(loads.iter().map(|l| l.layer).collect::<Vec<_>>(), vec![0, 1]);
    // 64 tokens, 2 choices each, over 4 experts: 32 on average.
    let pairs = (MICRO_BATCH * MICROBATCHES * SEQ * 2) as i64;
    assert!(loads
        .iter()
        .all(|l| l.min_tokens * 4 <= pairs && l.max_tokens * 4 >= pairs));
    Ok(())
}
