# Tests of the Julia bindings. Run with the library of a build tree:
#   PTDP_LIBRARY=/path/to/build/capi/libptdp.so julia --project=bindings/julia/PTDP \
#       bindings/julia/PTDP/test/runtests.jl
using PTDP
using PTDP: PTDP_ERR_INVALID_ARGUMENT, PTDP_SCHEDULE_1F1B
using Test

@testset "PTDP" begin
    @testset "a bad argument throws PTDPError with the library's message" begin
        err = try
            PTDP.create(PTDP.ptdp_tensor_create, PTDP.ptdp_tensor,
                        Ref(defaults(PTDP.ptdp_tensor_options)), 2, Int64[2, -3], C_NULL, 0)
            nothing
        catch e
            e
        end
        @test err isa PTDPError
        @test err.status == PTDP_ERR_INVALID_ARGUMENT
        @test occursin("ptdp_tensor_create", err.message)
        @test occursin("invalid argument", sprint(showerror, err))
        @test_throws PTDPError Schedule(PTDP_SCHEDULE_1F1B, 0, 4)
    end

    @testset "struct layout matches the library" begin
        for T in (PTDP.ptdp_tensor_options, PTDP.ptdp_runtime_options, PTDP.ptdp_parallel_options,
                  PTDP.ptdp_gpt_options, PTDP.ptdp_pipeline_options, PTDP.ptdp_stage_callbacks,
                  PTDP.ptdp_schedule_costs, PTDP.ptdp_optimizer_options,
                  PTDP.ptdp_gpt_data_options, PTDP.ptdp_generate_options,
                  PTDP.ptdp_checkpoint_state)
            @test defaults(T).struct_size == sizeof(T)
        end
        @test defaults(PTDP.ptdp_gpt_options; hidden_size = 32).hidden_size == 32
    end

    @testset "tensors keep Julia's shape and values" begin
        a = Float32[1 2 3; 4 5 6]
        t = Tensor(a)
        @test size(t) == (2, 3)
        @test Array(t) == a
        close(t)
        @test t.handle == C_NULL
    end

    @testset "a tiny GPT learns to count" begin
        rt = Runtime(defaults(PTDP.ptdp_runtime_options; use_mpi = 0))
        @test world(rt) == (0, 1)
        groups = Groups(rt)
        vocab, seq, b, m = 32, 16, 2, 2
        model = Model(groups, defaults(PTDP.ptdp_gpt_options; hidden_size = 32, num_attention_heads = 4,
                                       vocab_size = vocab, seq_length = seq, hidden_dropout = 0,
                                       attention_dropout = 0))
        opt = Optimizer(model, defaults(PTDP.ptdp_optimizer_options; lr = 1e-2))
        schedule = Schedule(PTDP_SCHEDULE_1F1B, 1, m)
        losses = Float32[]
        for it in 0:39
            starts = [(it * 7 + s * 5) % vocab for s in 0:(b * m - 1)]
            tokens = Int32[(s + i) % vocab for i in 0:(seq - 1), s in starts]
            labels = Int32[(s + i + 1) % vocab for i in 0:(seq - 1), s in starts]
            push!(losses, train_iteration!(opt, schedule, tokens, labels, b, it).loss)
        end
        @test losses[end] < 0.5 * losses[1]
        @test generate(model, Int32[3, 4, 5, 6]; max_new_tokens = 4) == Int32[7, 8, 9, 10]
        foreach(close, (schedule, opt, model, groups, rt))
    end

    @testset "a tiny Llama gives its options back; presets" begin
        rt = Runtime(defaults(PTDP.ptdp_runtime_options; use_mpi = 0))
        groups = Groups(rt)
        llama = defaults(PTDP.ptdp_gpt_options; hidden_size = 32, num_attention_heads = 4, ffn_hidden_size = 48,
                         vocab_size = 64, seq_length = 16, normalization = PTDP.PTDP_NORMALIZATION_RMSNORM,
                         swiglu = 1, position_embedding_type = PTDP.PTDP_POSITION_EMBEDDING_ROPE,
                         rotary_base = 500000, num_query_groups = 2, disable_bias_linear = 1,
                         untie_embeddings_and_output_weights = 1)
        model = Model(groups, llama)
        back = model_options(model)
        @test back.normalization == PTDP.PTDP_NORMALIZATION_RMSNORM
        @test back.num_query_groups == 2
        @test back.rotary_base == 500000
        @test back.rotary_percent == 1  # 0 given: the default, resolved
        @test "llama-3.2-1b" in model_presets()
        @test preset_options("llama-3.2-1b"; num_layers = 2).num_layers == 2
        @test preset_options("llama-3.2-1b").num_query_groups == 8
        @test_throws PTDPError preset_options("llama-9")
        foreach(close, (model, groups, rt))
    end
end
