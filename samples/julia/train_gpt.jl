# A tiny GPT trained from Julia in one process: the model learns to continue counting
# sequences, then generates the next tokens of a prompt.
#   PTDP_LIBRARY=/path/to/libptdp.so julia --project=bindings/julia/PTDP samples/julia/train_gpt.jl
using PTDP
using PTDP: ptdp_runtime_options, ptdp_gpt_options, ptdp_optimizer_options, PTDP_SCHEDULE_1F1B

const VOCAB, SEQ, MICRO_BATCH, MICROBATCHES = 32, 16, 2, 2

# One process without MPI; under mpirun, leave use_mpi at its default to span MPI's world.
runtime = Runtime(defaults(ptdp_runtime_options; use_mpi = 0))
groups = Groups(runtime)
model = Model(groups, defaults(ptdp_gpt_options; hidden_size = 32, num_attention_heads = 4,
                               vocab_size = VOCAB, seq_length = SEQ,
                               hidden_dropout = 0, attention_dropout = 0))
optimizer = Optimizer(model, defaults(ptdp_optimizer_options; lr = 1e-2))
schedule = Schedule(PTDP_SCHEDULE_1F1B, 1, MICROBATCHES)
println("ptdp ", version(), ": ", num_params(model), " parameter tensors")

for it in 0:39
    # Each column is one sample; every label is its token plus one.
    starts = [(it * 7 + s * 5) % VOCAB for s in 0:(MICRO_BATCH * MICROBATCHES - 1)]
    tokens = Int32[(s + i) % VOCAB for i in 0:(SEQ - 1), s in starts]
    labels = Int32[(s + i + 1) % VOCAB for i in 0:(SEQ - 1), s in starts]
    result = train_iteration!(optimizer, schedule, tokens, labels, MICRO_BATCH, it)
    it % 10 == 0 && println("iteration ", it, "  loss ", round(result.loss; digits = 4))
end
println("3 4 5 6 -> ", join(generate(model, Int32[3, 4, 5, 6]; max_new_tokens = 4), " "))

# A mistake raises PTDPError with the library's message.
try
    Schedule(PTDP_SCHEDULE_1F1B, 0, 4)
catch e
    e isa PTDPError || rethrow()
    println("as expected: ", sprint(showerror, e))
end
foreach(close, (schedule, optimizer, model, groups, runtime))  # or leave it to the GC
