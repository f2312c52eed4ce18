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
                  PTDP.ptdp_checkpoint_state, PTDP.ptdp_tokenizer_options, PTDP.ptdp_batch_masks,
                  PTDP.ptdp_hf_save_options, PTDP.ptdp_preprocess_options)
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

    fixtures = joinpath(@__DIR__, "..", "..", "..", "..", "tests", "data", "fixtures")

    @testset "tokenizers give the reference ids" begin
        # tests/data/fixtures/tokenizer_expected.json: Hugging Face tokenizers' ids of the same files.
        tok = Tokenizer("GPT2BPETokenizer"; vocab_file = joinpath(fixtures, "tokenizer_gpt2_vocab.json"),
                        merge_file = joinpath(fixtures, "tokenizer_gpt2_merges.txt"))
        @test tokenizer_type(tok) == PTDP.PTDP_TOKENIZER_GPT2_BPE
        @test (vocab_size(tok), eod(tok), bos(tok)) == (320, 0, nothing)
        text = "The GNU General Public License is a free, copyleft license for software."
        ids = encode(tok, text)
        @test ids == Int32[52, 72, 69, 221, 39, 46, 53, 221, 39, 271, 261, 285, 221, 48, 85, 66, 76,
                           274, 221, 44, 274, 271, 292, 221, 277, 258, 283, 265, 69, 12, 284, 80, 89,
                           308, 70, 84, 221, 76, 274, 271, 292, 307, 279, 79, 70, 84, 87, 65, 265, 14]
        @test decode(tok, ids) == text
        @test token_to_id(tok, "\u0120") == 221  # GPT-2 spells the space as "Ġ"
        @test id_to_token(tok, 221) == "\u0120"
        @test token_to_id(tok, "not a token") === nothing
        close(tok)

        bytes = Tokenizer()  # ByteLevel: no files
        @test tokenizer_type(bytes) == PTDP.PTDP_TOKENIZER_BYTE_LEVEL
        @test (vocab_size(bytes), eod(bytes)) == (256, nothing)
        @test encode(bytes, "hello") == Int32[104, 101, 108, 108, 111]
        @test encode(bytes, UInt8[0x61, 0x00, 0xff]) == Int32[97, 0, 255]
        @test decode_bytes(bytes, Int32[97, 0, 255]) == UInt8[0x61, 0x00, 0xff]
        @test isempty(encode(bytes, ""))

        null = Tokenizer("NullTokenizer"; vocab_size = 100)
        @test (vocab_size(null), eod(null)) == (101, 100)
        @test encode(null, "1 2 3") == Int32[1, 2, 3]
        @test decode(null, Int32[1, 2, 100]) == "1 2 100"
        err = try
            encode(null, "1 x")
            nothing
        catch e
            e
        end
        @test err isa PTDPError
        @test err.status == PTDP_ERR_INVALID_ARGUMENT
        @test occursin("'x' at byte 2", err.message)
        err = try
            Tokenizer("GPT2BPETokenizer"; vocab_file = joinpath(fixtures, "tokenizer_gpt2_vocab.json"))
            nothing
        catch e
            e
        end
        @test err isa PTDPError && occursin("needs --merge-file", err.message)
        @test_throws ArgumentError Tokenizer("WordPiece")
        foreach(close, (bytes, null))
    end

    @testset "end-of-document masks and masked losses" begin
        # Two samples (columns) of 4 tokens, end of document 0: "5 0 | 7 8" and "0 | 3 0 | 4".
        tokens = Int32[5 0; 0 3; 7 0; 8 4]
        labels = Int32[0 3; 7 0; 8 4; 9 1]
        m = eod_masks(tokens, 0; labels = labels)
        @test m.labels == Int32[0 -100; -100 0; 8 -100; 9 1]
        @test m.position_ids == Int32[0 0; 1 0; 0 1; 1 0]
        @test m.document_starts == Int32[0 0; 0 1; 2 1; 2 3]
        @test labels == Int32[0 3; 7 0; 8 4; 9 1]  # the caller's labels are left alone
        starts_only = eod_masks(tokens, 0; reset_position_ids = false)
        @test starts_only.labels === nothing && starts_only.position_ids === nothing
        @test starts_only.document_starts == m.document_starts

        rt = Runtime(defaults(PTDP.ptdp_runtime_options; use_mpi = 0))
        groups = Groups(rt)
        model = Model(groups, defaults(PTDP.ptdp_gpt_options; num_layers = 1, hidden_size = 16,
                                       num_attention_heads = 2, seq_length = 4, vocab_size = 16,
                                       hidden_dropout = 0, attention_dropout = 0))
        full = evaluate(model, tokens, labels, 2, 1)
        masked = evaluate(model, tokens, m.labels, 2, 1)
        documents = evaluate(model, tokens, m.labels, 2, 1; position_ids = m.position_ids,
                             document_starts = m.document_starts)
        @test isfinite(full) && isfinite(masked) && isfinite(documents)
        @test masked != full && documents != masked
        @test evaluate(model, tokens, fill(IGNORE_INDEX, 4, 2), 2, 1) == 0  # nothing counted: 0, not NaN
        foreach(close, (model, groups, rt))
    end

    @testset "preprocessing writes the token ids; merging concatenates" begin
        dir = mktempdir()
        input = joinpath(dir, "in.jsonl")
        write(input, "{\"text\": \"ab\"}\n{\"text\": \"\"}\n{\"text\": \"xyz\"}\n")
        result = preprocess([input], joinpath(dir, "out"); workers = 2)
        @test (result.documents, result.bad_lines, result.tokens, result.dtype_code) == (3, 0, 5, 8)
        ds = IndexedDataset(joinpath(dir, "out_text_document"))
        @test (length(ds), num_sequences(ds)) == (3, 2)
        @test [ds[i] for i in 1:3] == [Int32[97, 98], Int32[], Int32[120, 121, 122]]
        close(ds)
        merge_datasets([joinpath(dir, "out_text_document"), joinpath(dir, "out_text_document")],
                       joinpath(dir, "twice"))
        twice = IndexedDataset(joinpath(dir, "twice"))
        @test length(twice) == 6
        @test twice[6] == Int32[120, 121, 122]
        close(twice)
        @test preprocess_main(["--input", input, "--output-prefix", joinpath(dir, "cli"),
                               "--tokenizer-type", "ByteLevel"]) == 0
        @test IndexedDataset(joinpath(dir, "cli_text_document"))[1] == Int32[97, 98]
        write(input, "{\"text\": 5}\n")
        err = try
            preprocess(input, joinpath(dir, "bad"))
            nothing
        catch e
            e
        end
        @test err isa PTDPError && occursin("$(input):1", err.message)
        rm(dir; recursive = true)
    end

    @testset "a Hugging Face export imports back exactly" begin
        rt = Runtime(defaults(PTDP.ptdp_runtime_options; use_mpi = 0))
        groups = Groups(rt)
        a = Model(groups, defaults(PTDP.ptdp_gpt_options; num_layers = 2, hidden_size = 16,
                                   num_attention_heads = 4, seq_length = 8, vocab_size = 128,
                                   hidden_dropout = 0, attention_dropout = 0, seed = 9))
        dir = mktempdir()
        hf_save(dir, a)
        @test isfile(joinpath(dir, "config.json"))
        @test hf_architecture(dir) == PTDP.PTDP_HF_ARCHITECTURE_GPT2
        options = hf_read_options(dir; seed = 77)  # other initial values, all replaced by the load
        @test (options.num_layers, options.hidden_size, options.vocab_size, options.seq_length) ==
              (2, 16, 128, 8)
        b = Model(groups, options)
        names = param_names(a)
        @test param_names(b) == names
        @test any(get_param(b, n) != get_param(a, n) for n in names)
        hf_load(dir, b)
        @test all(get_param(b, n) == get_param(a, n) for n in names)
        tokens = Int32[(i * 37 + s * 11 + 5) % 128 for i in 0:7, s in 0:1]
        labels = Int32[(i * 53 + s * 7 + 11) % 128 for i in 0:7, s in 0:1]
        @test evaluate(b, tokens, labels, 2, 1) == evaluate(a, tokens, labels, 2, 1)
        hf_save(joinpath(dir, "bf16"), a; dtype = PTDP.PTDP_DTYPE_BF16, max_shard_size = 4096)
        @test isfile(joinpath(dir, "bf16", "model.safetensors.index.json"))
        @test_throws PTDPError hf_read_options(joinpath(dir, "missing"))
        @test_throws PTDPError hf_save(joinpath(dir, "bad"), a; max_shard_size = -1)
        foreach(close, (b, a, groups, rt))
        rm(dir; recursive = true)
    end
end
