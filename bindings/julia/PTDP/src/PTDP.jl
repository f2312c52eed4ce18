"""
    PTDP

Julia bindings of ptdp, the pipeline/tensor/data-parallel GPT trainer. `libptdp.jl` holds the
raw `ccall`s, generated from `ptdp.h`; this file adds exceptions carrying the library's
message, objects that free their handles in finalizers (or earlier with `close`), option
structs with keyword defaults, and tensors from and to Julia arrays.

The library is `ENV["PTDP_LIBRARY"]` (a path or a name) when set while PTDP is precompiled,
else `libptdp` from the system library path.
"""
module PTDP

using Libdl

const libptdp = let path = get(ENV, "PTDP_LIBRARY", "")
    isempty(path) ? "libptdp" : path
end

include("libptdp.jl")

export PTDPError, defaults, with, Runtime, Groups, Model, Optimizer, Schedule, Tensor,
       world, group_rank, group_size, num_params, train_iteration!, train, generate, version,
       model_options, model_presets, preset_options, evaluate, get_param, param_names,
       Tokenizer, tokenizer_from_checkpoint, tokenizer_type, encode, decode, decode_bytes, vocab_size,
       eod, bos, token_to_id, id_to_token, IGNORE_INDEX, eod_masks, hf_read_options, hf_architecture,
       hf_load, hf_save, IndexedDataset, num_sequences, preprocess, merge_datasets, preprocess_main,
       merge_datasets_main

function __init__()
    wanted = get(ENV, "PTDP_LIBRARY", "")
    if !isempty(wanted) && wanted != libptdp
        @warn "PTDP was precompiled with library $(libptdp), not PTDP_LIBRARY=$(wanted); " *
              "re-precompile PTDP to switch"
    end
    Libdl.dlopen(libptdp)  # fails here, with the loader's message, if the library is missing
    return nothing
end

# ------------------------------------------------------------------------------------------
# Errors

"""
    PTDPError(status, message)

A failed ptdp call: its status (`PTDP_ERR_*`) and the library's message.
"""
struct PTDPError <: Exception
    status::ptdp_status
    message::String
end

status_string(status) = unsafe_string(ptdp_status_string(status))

Base.showerror(io::IO, e::PTDPError) =
    print(io, "PTDPError: ", status_string(e.status), ": ", e.message)

"""Throws a `PTDPError` with the thread's last message unless `status` is `PTDP_SUCCESS`."""
function check(status)
    status == PTDP_SUCCESS && return nothing
    throw(PTDPError(status, unsafe_string(ptdp_last_error())))
end

version() = unsafe_string(ptdp_version())

# ------------------------------------------------------------------------------------------
# Option structs: immutable copies of the C structs, filled by their `*_init` function.

"""
    defaults(T; fields...)

The library's defaults for the option struct `T` (e.g. `ptdp_gpt_options`), with the given
fields replaced: `defaults(ptdp_gpt_options; hidden_size = 32)`.
"""
function defaults(::Type{T}; fields...) where {T}
    init = getfield(@__MODULE__, Symbol(nameof(T), "_init"))
    ref = Ref{T}()
    check(init(ref))
    return with(ref[]; fields...)
end

"""
    with(x; fields...)

A copy of the struct `x` with some fields replaced.
"""
function with(x::T; fields...) where {T}
    isempty(fields) && return x
    names = fieldnames(T)
    for k in keys(fields)
        k in names || throw(ArgumentError("$(T) has no field $(k)"))
    end
    values = map(n -> haskey(fields, n) ? convert(fieldtype(T, n), fields[n]) : getfield(x, n), names)
    return T(values...)
end

# ------------------------------------------------------------------------------------------
# Handles: each object owns one C handle, freed by its finalizer or by `close`. Objects keep
# the objects they were created from, so a parent is never collected before its children.

abstract type Handle end

Base.unsafe_convert(::Type{Ptr{T}}, x::Handle) where {T} = convert(Ptr{T}, x.handle)

function Base.close(x::Handle)
    h = x.handle
    if h != C_NULL
        x.handle = C_NULL
        destroy(x, h)
    end
    return nothing
end

function owned(x::Handle)
    finalizer(close, x)
    return x
end

function create(f, ::Type{H}, args...) where {H}
    out = Ref{H}(C_NULL)
    check(f(args..., out))
    return out[]
end

"""
    Runtime(options = defaults(ptdp_runtime_options))

The world of processes: MPI's world, or one process with `use_mpi = 0`.
"""
mutable struct Runtime <: Handle
    handle::ptdp_runtime
end
Runtime(options::ptdp_runtime_options = defaults(ptdp_runtime_options)) =
    owned(Runtime(create(ptdp_runtime_create, ptdp_runtime, Ref(options))))
destroy(::Runtime, h) = ptdp_runtime_destroy(h)

"""(rank, size) of this process in the world."""
function world(rt::Runtime)
    rank, size = Ref{Int32}(0), Ref{Int32}(0)
    check(ptdp_runtime_world(rt, rank, size))
    return (Int(rank[]), Int(size[]))
end

"""
    Groups(runtime, options = defaults(ptdp_parallel_options))

The tensor, pipeline, data, model and embedding groups of this rank.
"""
mutable struct Groups <: Handle
    handle::ptdp_groups
    runtime::Runtime
end
Groups(rt::Runtime, options::ptdp_parallel_options = defaults(ptdp_parallel_options)) =
    owned(Groups(create(ptdp_groups_create, ptdp_groups, rt, Ref(options)), rt))
destroy(::Groups, h) = ptdp_groups_destroy(h)

function group_rank(g::Groups, kind)
    r = Ref{Int32}(0)
    check(ptdp_groups_rank(g, kind, r))
    return Int(r[])
end

function group_size(g::Groups, kind)
    r = Ref{Int32}(0)
    check(ptdp_groups_size(g, kind, r))
    return Int(r[])
end

"""
    Model(groups, options = defaults(ptdp_gpt_options))

A GPT model: this rank's chunks under the groups' layout.
"""
mutable struct Model <: Handle
    handle::ptdp_model
    groups::Groups
end
Model(g::Groups, options::ptdp_gpt_options = defaults(ptdp_gpt_options)) =
    owned(Model(create(ptdp_model_create, ptdp_model, g, Ref(options)), g))
destroy(::Model, h) = ptdp_model_destroy(h)

"""
    model_options(model)

The `ptdp_gpt_options` the model was built with, its defaults resolved (`rotary_base` 10000
rather than 0, and so on).
"""
function model_options(m::Model)
    ref = Ref(defaults(ptdp_gpt_options))  # struct_size set: the library fills that many bytes
    check(ptdp_model_get_options(m, ref))
    return ref[]
end

"""
    model_presets()

The names of the model presets (`--model-preset` of ptdp-train and ptdp-plan), in order.
"""
function model_presets()
    n = Ref{Int32}(0)
    check(ptdp_model_preset_count(n))
    return [preset_name(i) for i in 0:(n[] - 1)]
end

function preset_name(i::Integer)
    len = Ref{Csize_t}(0)
    ptdp_model_preset_name(i, C_NULL, 0, len)  # no room on purpose: it tells the length
    buffer = Vector{Cchar}(undef, len[] + 1)
    check(ptdp_model_preset_name(i, buffer, length(buffer), len))
    return GC.@preserve buffer unsafe_string(pointer(buffer))
end

"""
    preset_options(name; fields...)

The `ptdp_gpt_options` of a named preset (any case), with the given fields replaced:
`Model(groups, preset_options("llama-3.2-1b"; num_layers = 2))`.
"""
function preset_options(name::AbstractString; fields...)
    ref = Ref(defaults(ptdp_gpt_options))
    check(ptdp_gpt_options_from_preset(name, ref))
    return with(ref[]; fields...)
end

function num_params(m::Model)
    n = Ref{Int32}(0)
    check(ptdp_model_num_params(m, n))
    return Int(n[])
end

"""
    generate(model, prompt; max_new_tokens = 16, top_k = 1, temperature = 1, seed = 1234)

The tokens sampled after `prompt` (the new ones only).
"""
function generate(m::Model, prompt::Vector{Int32}; fields...)
    options = defaults(ptdp_generate_options; max_new_tokens = 16, top_k = 1, fields...)
    out = Vector{Int32}(undef, options.max_new_tokens)
    count = Ref{Int32}(0)
    check(ptdp_model_generate(m, prompt, length(prompt), Ref(options), out, length(out), count))
    return out[1:count[]]
end

"""
    Optimizer(model, options = defaults(ptdp_optimizer_options))
"""
mutable struct Optimizer <: Handle
    handle::ptdp_optimizer
    model::Model
end
Optimizer(m::Model, options::ptdp_optimizer_options = defaults(ptdp_optimizer_options)) =
    owned(Optimizer(create(ptdp_optimizer_create, ptdp_optimizer, m, Ref(options)), m))
destroy(::Optimizer, h) = ptdp_optimizer_destroy(h)

"""
    Schedule(kind, p, m, v = 1)

A pipeline schedule (`PTDP_SCHEDULE_*`) for p stages, m microbatches and v chunks per stage.
"""
mutable struct Schedule <: Handle
    handle::ptdp_schedule
end
Schedule(kind, p::Integer, m::Integer, v::Integer = 1) =
    owned(Schedule(create(ptdp_schedule_create, ptdp_schedule, kind, p, m, v)))
destroy(::Schedule, h) = ptdp_schedule_destroy(h)

"""
    train_iteration!(optimizer, schedule, tokens, labels, micro_batch_size, iteration;
                     position_ids = nothing, document_starts = nothing)

One training iteration (zero the gradients, run the batch through the schedule, step). Each
column of the `Int32` matrices `tokens` and `labels` is one sample of seq_length tokens; labels
may be `IGNORE_INDEX` (no part in the loss), and `position_ids` and `document_starts` (the
tokens' shape, see `eod_masks`) restart positions and keep attention inside documents.
Returns the `ptdp_iteration_result` (loss, grad_norm, learning_rate, ...).
"""
function train_iteration!(opt::Optimizer, schedule::Schedule, tokens::Array{Int32},
                          labels::Array{Int32}, micro_batch_size::Integer, iteration::Integer;
                          position_ids = nothing, document_starts = nothing)
    size(tokens) == size(labels) || throw(DimensionMismatch("tokens and labels differ in size"))
    result = Ref{ptdp_iteration_result}()
    with_options(tokens, position_ids, document_starts) do options
        check(ptdp_train_iteration(opt.model, opt, schedule, tokens, labels, micro_batch_size, iteration,
                                   options, result))
    end
    return result[]
end

"""
    evaluate(model, tokens, labels, micro_batch_size, num_microbatches;
             position_ids = nothing, document_starts = nothing) -> Float32

The forward-only loss of `num_microbatches` microbatches through the pipeline (dropout off,
gradients untouched): the mean of their masked mean losses, averaged over the data-parallel
replicas. Samples are columns, as in `train_iteration!`.
"""
function evaluate(m::Model, tokens::Array{Int32}, labels::Array{Int32}, micro_batch_size::Integer,
                  num_microbatches::Integer; position_ids = nothing, document_starts = nothing)
    size(tokens) == size(labels) || throw(DimensionMismatch("tokens and labels differ in size"))
    loss = Ref{Cfloat}(0)
    with_options(tokens, position_ids, document_starts) do options
        check(ptdp_model_evaluate(m, tokens, labels, micro_batch_size, num_microbatches, options, loss))
    end
    return loss[]
end

"""The names of the model's parameters, in the library's order."""
function param_names(m::Model)
    return map(0:(num_params(m) - 1)) do i
        name = Vector{UInt8}(undef, 256)
        ndim = Ref{Int32}(0)
        shape = zeros(Int64, PTDP_MAX_DIMS)
        part = Ref{Int32}(0)
        check(ptdp_model_param_info(m, i, name, length(name), ndim, shape, part))
        GC.@preserve name unsafe_string(pointer(name))
    end
end

"""
    get_param(model, name) -> Vector{Float32}

The full global value of a parameter, flattened in ptdp's row-major order (collective over the
model-parallel group).
"""
function get_param(m::Model, name::AbstractString)
    for i in 0:(num_params(m) - 1)
        buffer = Vector{UInt8}(undef, 256)
        ndim = Ref{Int32}(0)
        shape = ones(Int64, PTDP_MAX_DIMS)
        part = Ref{Int32}(0)
        check(ptdp_model_param_info(m, i, buffer, length(buffer), ndim, shape, part))
        found = GC.@preserve buffer unsafe_string(pointer(buffer))
        found == name || continue
        value = Vector{Float32}(undef, prod(shape[1:ndim[]]))
        check(ptdp_model_get_param(m, name, value, sizeof(value)))
        return value
    end
    throw(ArgumentError("the model has no parameter named $(name)"))
end

"""
    train(args; program = "ptdp-train") -> Int

Runs ptdp-train with the flags `args` through the library's training loop, the one every front
end shares: the same log lines, JSON lines and checkpoints as the C tool. Returns the exit
status: 0 done, 1 failed (the message went to stderr), 2 bad flags. Under mpirun every rank
calls it.
"""
function train(args::AbstractVector{<:AbstractString}; program::AbstractString = "ptdp-train")
    argv = String[program; args...]
    code = Ref{Int32}(1)
    GC.@preserve argv begin
        ptrs = [Base.unsafe_convert(Cstring, Base.cconvert(Cstring, a)) for a in argv]
        check(ptdp_train_main(Int32(length(ptrs)), ptrs, code))
    end
    return Int(code[])
end

# ------------------------------------------------------------------------------------------
# Tensors. ptdp is row-major and Julia column-major: Tensor(a) has the shape size(a) and the
# same a[i, j, ...]; the elements are permuted on the way in and out.

const ELEMENT_DTYPES = Dict{DataType, ptdp_dtype}(Float32 => PTDP_DTYPE_F32,
                                                  Int32 => PTDP_DTYPE_I32,
                                                  Int64 => PTDP_DTYPE_I64)

mutable struct Tensor <: Handle
    handle::ptdp_tensor
end
destroy(::Tensor, h) = ptdp_tensor_destroy(h)

rowmajor(a::AbstractArray) = ndims(a) > 1 ? permutedims(a, ndims(a):-1:1) : collect(a)

"""
    Tensor(a::Array{Float32|Int32|Int64})

A CPU tensor holding a copy of `a`.
"""
function Tensor(a::AbstractArray{T}) where {T <: Union{Float32, Int32, Int64}}
    options = defaults(ptdp_tensor_options; dtype = ELEMENT_DTYPES[T])
    shape = Int64[size(a)...]
    data = rowmajor(a)
    return owned(Tensor(create(ptdp_tensor_create, ptdp_tensor, Ref(options), length(shape), shape,
                               data, sizeof(data))))
end

function Base.size(t::Tensor)
    ndim = Ref{Int32}(0)
    check(ptdp_tensor_ndim(t, ndim))
    shape = zeros(Int64, PTDP_MAX_DIMS)
    check(ptdp_tensor_shape(t, shape, PTDP_MAX_DIMS))
    return Tuple(Int.(shape[1:ndim[]]))
end

function eltype_of(t::Tensor)
    dtype = Ref{ptdp_dtype}(0)
    check(ptdp_tensor_dtype(t, dtype))
    for (T, d) in ELEMENT_DTYPES
        d == dtype[] && return T
    end
    throw(ArgumentError("tensor dtype $(dtype[]) has no Julia element type; cast it first"))
end

"""The tensor's elements as a Julia array of its shape."""
function Base.Array(t::Tensor)
    T = eltype_of(t)
    dims = size(t)
    buffer = Array{T}(undef, reverse(dims)...)
    check(ptdp_tensor_copy_to_host(t, buffer, sizeof(buffer)))
    return length(dims) > 1 ? permutedims(buffer, length(dims):-1:1) : buffer
end

# ------------------------------------------------------------------------------------------
# Strings and buffers for the calls below.

"""A `String` copy of a path or text argument; `nothing` stays `nothing`."""
cstr(::Nothing) = nothing
cstr(s::AbstractString) = String(s)

"""
A pointer to the NUL-terminated bytes of a `String` (C_NULL for `nothing`), for a struct field;
the caller keeps the string alive with `GC.@preserve` while the pointer is in use. A NUL inside
the string throws `ArgumentError`.
"""
cptr(::Nothing) = convert(Ptr{Cchar}, C_NULL)
cptr(s::String) = convert(Ptr{Cchar}, Base.unsafe_convert(Cstring, s))

"""
    filled(call, size)

The bytes a call writes into a char buffer under the count/capacity protocol: `call(buffer,
capacity, length)` returns the status and reports the length also when the buffer is too small;
the buffer grows until the bytes fit. A failure that is not about room throws `PTDPError`.
"""
function filled(call, size::Integer)
    while true
        buffer = Vector{UInt8}(undef, max(size, 1))
        len = Ref{Csize_t}(0)
        status = call(buffer, length(buffer), len)
        status == PTDP_SUCCESS && return buffer[1:len[]]
        len[] + 1 <= length(buffer) && check(status)
        size = len[] + 1
    end
end

# ------------------------------------------------------------------------------------------
# Tokenizers: text to token ids and back, with Megatron-LM's --tokenizer-type names and flags.

"""Megatron's `--tokenizer-type` names of the tokenizer types."""
const TOKENIZER_TYPES = Dict{String, ptdp_tokenizer_type}(
    "ByteLevel" => PTDP_TOKENIZER_BYTE_LEVEL,
    "NullTokenizer" => PTDP_TOKENIZER_NULL,
    "GPT2BPETokenizer" => PTDP_TOKENIZER_GPT2_BPE,
    "HuggingFaceTokenizer" => PTDP_TOKENIZER_HUGGING_FACE,
    "SentencePieceTokenizer" => PTDP_TOKENIZER_SENTENCE_PIECE)

"""
    tokenizer_type(name_or_type)

The `PTDP_TOKENIZER_*` value of Megatron's `--tokenizer-type` name (e.g. "GPT2BPETokenizer"),
or of the value itself.
"""
tokenizer_type(kind::Integer) = ptdp_tokenizer_type(kind)
function tokenizer_type(name::AbstractString)
    haskey(TOKENIZER_TYPES, name) && return TOKENIZER_TYPES[name]
    names = join(sort!(collect(keys(TOKENIZER_TYPES))), ", ")
    throw(ArgumentError("tokenizer type '$(name)' is not one of $(names)"))
end

"""Megatron's name of a tokenizer type."""
function tokenizer_type_name(kind)
    wanted = tokenizer_type(kind)
    for (name, t) in TOKENIZER_TYPES
        t == wanted && return name
    end
    throw(ArgumentError("$(kind) is not a ptdp_tokenizer_type"))
end

"""
    Tokenizer(kind = "ByteLevel"; vocab_file, merge_file, tokenizer_model, vocab_size = 0)
    tokenizer_from_checkpoint(directory)

A tokenizer from its files, with Megatron's flags: `kind` is Megatron's `--tokenizer-type` name
("ByteLevel", "NullTokenizer", "GPT2BPETokenizer", "HuggingFaceTokenizer",
"SentencePieceTokenizer") or a `PTDP_TOKENIZER_*` value; `vocab_file` and `merge_file` are
GPT2BPETokenizer's vocab.json and merges.txt, `tokenizer_model` a tokenizer.json or a
SentencePiece .model, `vocab_size` NullTokenizer's V. A tokenizer is immutable: tasks may share
one. No special token is added around the text.
"""
mutable struct Tokenizer <: Handle
    handle::ptdp_tokenizer
end
destroy(::Tokenizer, h) = ptdp_tokenizer_destroy(h)

function Tokenizer(kind::Union{Integer, AbstractString} = PTDP_TOKENIZER_BYTE_LEVEL; vocab_file = nothing,
                   merge_file = nothing, tokenizer_model = nothing, vocab_size::Integer = 0)
    vf, mf, tm = cstr(vocab_file), cstr(merge_file), cstr(tokenizer_model)
    handle = GC.@preserve vf mf tm begin
        options = defaults(ptdp_tokenizer_options; type_ = tokenizer_type(kind), vocab_file = cptr(vf),
                           merge_file = cptr(mf), tokenizer_model = cptr(tm), vocab_size = vocab_size)
        create(ptdp_tokenizer_create, ptdp_tokenizer, Ref(options))
    end
    return owned(Tokenizer(handle))
end

"""
    tokenizer_from_checkpoint(directory)

The tokenizer a ptdp-train checkpoint was trained with (its recorded `--tokenizer-type` and
files, or bytes for `--text-file`).
"""
tokenizer_from_checkpoint(directory::AbstractString) =
    owned(Tokenizer(create(ptdp_tokenizer_create_from_checkpoint, ptdp_tokenizer, directory)))

"""The `PTDP_TOKENIZER_*` type a tokenizer was created as."""
function tokenizer_type(t::Tokenizer)
    kind = Ref{ptdp_tokenizer_type}(0)
    check(ptdp_tokenizer_get_type(t, kind))
    return kind[]
end

"""The number of ids: every id below it is valid (the vocabulary size Megatron pads)."""
function vocab_size(t::Tokenizer)
    n = Ref{Int64}(0)
    check(ptdp_tokenizer_vocab_size(t, n))
    return Int(n[])
end

"""The end-of-document id (what `--append-eod` appends), or `nothing`."""
function eod(t::Tokenizer)
    id = Ref{Int32}(0)
    check(ptdp_tokenizer_eod(t, id))
    return id[] < 0 ? nothing : Int(id[])
end

"""The beginning-of-sequence id, or `nothing`."""
function bos(t::Tokenizer)
    id = Ref{Int32}(0)
    check(ptdp_tokenizer_bos(t, id))
    return id[] < 0 ? nothing : Int(id[])
end

"""
    encode(tokenizer, text) -> Vector{Int32}

The token ids of a string (its UTF-8 bytes) or of any bytes (`Vector{UInt8}`; NUL is a byte
like the others).
"""
function encode(t::Tokenizer, text::Union{AbstractString, AbstractVector{UInt8}})
    bytes = text isa AbstractString ? Vector{UInt8}(codeunits(String(text))) : Vector{UInt8}(text)
    count = Ref{Csize_t}(0)
    return GC.@preserve bytes begin
        p = isempty(bytes) ? C_NULL : pointer(bytes)
        # The first call asks for the count, reported also when there is no room.
        status = ptdp_tokenizer_encode(t, p, length(bytes), C_NULL, 0, count)
        count[] == 0 && check(status)  # no ids, or refused (not a matter of room)
        ids = Vector{Int32}(undef, count[])
        if !isempty(ids)
            check(ptdp_tokenizer_encode(t, p, length(bytes), ids, length(ids), count))
        end
        ids[1:count[]]
    end
end

"""The text of `ids` as the tokenizer writes it, as bytes."""
function decode_bytes(t::Tokenizer, ids::AbstractVector{<:Integer})
    v = Vector{Int32}(ids)
    return filled(4 * length(v) + 16) do buffer, capacity, len
        ptdp_tokenizer_decode(t, v, length(v), buffer, capacity, len)
    end
end

"""The text of `ids` as a `String` (its bytes as written: a byte-level tokenizer may cut a
character, which Julia's strings keep as invalid UTF-8)."""
decode(t::Tokenizer, ids::AbstractVector{<:Integer}) = String(decode_bytes(t, ids))

"""The id of one vocabulary entry as the model spells it ("Ġthe", "▁the"), or `nothing`."""
function token_to_id(t::Tokenizer, token::Union{AbstractString, AbstractVector{UInt8}})
    bytes = token isa AbstractString ? Vector{UInt8}(codeunits(String(token))) : Vector{UInt8}(token)
    id = Ref{Int32}(0)
    GC.@preserve bytes begin
        check(ptdp_tokenizer_token_to_id(t, isempty(bytes) ? C_NULL : pointer(bytes), length(bytes), id))
    end
    return id[] < 0 ? nothing : Int(id[])
end

"""The vocabulary entry of an id as a `String` of its bytes, as `token_to_id` spells it."""
function id_to_token(t::Tokenizer, id::Integer)
    return String(filled(256) do buffer, capacity, len
        ptdp_tokenizer_id_to_token(t, id, buffer, capacity, len)
    end)
end

# ------------------------------------------------------------------------------------------
# Loss masks and packed documents.

"""The label that takes no part in the loss (PyTorch's and Hugging Face's ignore_index)."""
const IGNORE_INDEX = Int32(PTDP_IGNORE_INDEX)

"""
    eod_masks(tokens, eod_token_id; labels = nothing, eod_mask_loss = labels !== nothing,
              reset_position_ids = true, reset_attention_mask = true)

Megatron's masks of the samples `tokens` (an `Int32` matrix, one sample per column, as in
`train_iteration!`) from their end-of-document token: a document ends with its end-of-document
token, the next token starts another. Returns `(labels, position_ids, document_starts)`, each of
the tokens' shape or `nothing` where not asked for: a copy of `labels` with `IGNORE_INDEX` where
the token is the end of document, each token's position within its document, and the first
position of its document (0-based, as the library counts).
"""
function eod_masks(tokens::AbstractMatrix{<:Integer}, eod_token_id::Integer; labels = nothing,
                   eod_mask_loss::Bool = labels !== nothing, reset_position_ids::Bool = true,
                   reset_attention_mask::Bool = true)
    t = Matrix{Int32}(tokens)
    seq_length, count = size(t)
    out_labels = labels === nothing ? nothing : Matrix{Int32}(labels)  # a copy: the caller's are kept
    out_labels === nothing || size(out_labels) == size(t) ||
        throw(DimensionMismatch("tokens and labels differ in size"))
    positions = reset_position_ids ? zeros(Int32, seq_length, count) : nothing
    starts = reset_attention_mask ? zeros(Int32, seq_length, count) : nothing
    flags = (eod_mask_loss ? PTDP_EOD_MASK_LOSS : 0) |
            (reset_position_ids ? PTDP_EOD_RESET_POSITION_IDS : 0) |
            (reset_attention_mask ? PTDP_EOD_RESET_ATTENTION_MASK : 0)
    ornull(x) = x === nothing ? C_NULL : x
    check(ptdp_eod_masks(t, count, seq_length, eod_token_id, flags, ornull(out_labels), ornull(positions),
                         ornull(starts)))
    return (labels = out_labels, position_ids = positions, document_starts = starts)
end

"""
Runs `f(options)` with a `Ref{ptdp_pipeline_options}` whose masks are those of `with_masks`
(the defaults when both arrays are `nothing`), kept alive for the call.
"""
function with_options(f, tokens, position_ids, document_starts)
    return with_masks(tokens, position_ids, document_starts) do masks
        GC.@preserve masks begin
            ptr = masks === C_NULL ? Ptr{ptdp_batch_masks}(C_NULL) :
                  Base.unsafe_convert(Ptr{ptdp_batch_masks}, masks)
            f(Ref(defaults(ptdp_pipeline_options; masks = ptr)))
        end
    end
end

"""
Runs `f(masks)` with a `Ref{ptdp_batch_masks}` over the arrays (C_NULL when both are
`nothing`), each checked to have the tokens' size and kept alive for the call.
"""
function with_masks(f, tokens, position_ids, document_starts)
    position_ids === nothing && document_starts === nothing && return f(C_NULL)
    p = position_ids === nothing ? nothing : Array{Int32}(position_ids)
    d = document_starts === nothing ? nothing : Array{Int32}(document_starts)
    for (what, a) in (("position_ids", p), ("document_starts", d))
        a === nothing || length(a) == length(tokens) ||
            throw(DimensionMismatch("$(what) has $(length(a)) elements, the tokens $(length(tokens))"))
    end
    return GC.@preserve p d begin
        masks = defaults(ptdp_batch_masks;
                         position_ids = p === nothing ? convert(Ptr{Int32}, C_NULL) : pointer(p),
                         document_starts = d === nothing ? convert(Ptr{Int32}, C_NULL) : pointer(d))
        f(Ref(masks))
    end
end

# ------------------------------------------------------------------------------------------
# Hugging Face checkpoints: GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM and
# Qwen2ForCausalLM directories (config.json and model.safetensors, or its shards).

function read_hf(directory::AbstractString)
    ref = Ref(defaults(ptdp_gpt_options))  # struct_size set: the library fills that many bytes
    architecture = Ref{ptdp_hf_architecture}(PTDP_HF_ARCHITECTURE_AUTO)
    check(ptdp_hf_read_options(directory, ref, architecture))
    return ref[], architecture[]
end

"""
    hf_read_options(directory; fields...)

The `ptdp_gpt_options` a Hugging Face directory's config.json describes (seq_length is the
model's context, the training settings their defaults), with the given fields replaced:
`Model(groups, hf_read_options(dir; seq_length = 512))`.
"""
hf_read_options(directory::AbstractString; fields...) = with(read_hf(directory)[1]; fields...)

"""The `PTDP_HF_ARCHITECTURE_*` class of a Hugging Face directory's config.json."""
hf_architecture(directory::AbstractString) = read_hf(directory)[2]

"""
    hf_load(directory, model)

Sets every parameter of `model` (built from `hf_read_options`; the training settings and the
layout may differ) from a Hugging Face checkpoint. Collective over the model's world; on any
failure the model is unchanged.
"""
hf_load(directory::AbstractString, m::Model) = check(ptdp_hf_load(directory, m))

"""
    hf_save(directory, model; architecture = PTDP_HF_ARCHITECTURE_AUTO, dtype = PTDP_DTYPE_F32,
            max_shard_size = 0, base_config = nothing)

Writes `model` (any layout) as a Hugging Face checkpoint: config.json and model.safetensors, or
shards of at most `max_shard_size` bytes with an index (0: one file); tensors stored as `dtype`
(F32, BF16 or F16); the fields of `base_config` (a config.json) that ptdp does not describe are
kept. Collective over the model's world; world rank 0 writes.
"""
function hf_save(directory::AbstractString, m::Model; architecture = PTDP_HF_ARCHITECTURE_AUTO,
                 dtype = PTDP_DTYPE_F32, max_shard_size::Integer = 0, base_config = nothing)
    base = cstr(base_config)
    GC.@preserve base begin
        options = defaults(ptdp_hf_save_options; architecture = architecture, dtype = dtype,
                           max_shard_size = max_shard_size, base_config = cptr(base))
        check(ptdp_hf_save(directory, m, Ref(options)))
    end
    return nothing
end

# ------------------------------------------------------------------------------------------
# Indexed data sets and preprocessing (Megatron's preprocess_data.py and merge_datasets.py).

"""
    IndexedDataset(prefix)

A Megatron indexed data set PREFIX.idx + PREFIX.bin, read-only: `ds[i]` is document i's tokens
(1-based), `length(ds)` the number of documents.
"""
mutable struct IndexedDataset <: Handle
    handle::ptdp_dataset
end
IndexedDataset(prefix::AbstractString) =
    owned(IndexedDataset(create(ptdp_dataset_open, ptdp_dataset, prefix)))
destroy(::IndexedDataset, h) = ptdp_dataset_destroy(h)

function Base.length(ds::IndexedDataset)
    n = Ref{Int64}(0)
    check(ptdp_dataset_num_documents(ds, n))
    return Int(n[])
end

"""The number of sequences (entries of the index)."""
function num_sequences(ds::IndexedDataset)
    n = Ref{Int64}(0)
    check(ptdp_dataset_num_sequences(ds, n))
    return Int(n[])
end

function Base.getindex(ds::IndexedDataset, i::Integer)
    count = Ref{Int64}(0)
    # The first call asks for the length, reported also when there is no room.
    status = ptdp_dataset_document(ds, i - 1, C_NULL, 0, count)
    count[] == 0 && check(status)
    tokens = Vector{Int32}(undef, count[])
    isempty(tokens) || check(ptdp_dataset_document(ds, i - 1, tokens, length(tokens), count))
    return tokens
end

"""
    preprocess(inputs, output_prefix; json_keys = ["text"], tokenizer_type = "ByteLevel",
               vocab_file, merge_file, tokenizer_model, vocab_size = 0, append_eod = false,
               workers = 1, log_interval = 0, skip_bad_lines = false) -> ptdp_preprocess_result

Tokenizes JSON-lines files (plain or gzip, one document per line) into one indexed data set per
key, OUTPUT_PREFIX_KEY_document (.bin and .idx), with Megatron's flags. Returns what was done:
documents, bad_lines, bytes, tokens, seconds, dtype_code. A bad line throws `PTDPError` naming
FILE:LINE unless `skip_bad_lines`; a failed run leaves no partial data set.
"""
function preprocess(inputs, output_prefix::AbstractString; json_keys = String[], tokenizer_type = nothing,
                    vocab_file = nothing, merge_file = nothing, tokenizer_model = nothing,
                    vocab_size::Integer = 0, append_eod::Bool = false, workers::Integer = 1,
                    log_interval::Integer = 0, skip_bad_lines::Bool = false)
    files = String[(inputs isa AbstractString ? [inputs] : inputs)...]
    keys = String[(json_keys isa AbstractString ? [json_keys] : json_keys)...]
    out = String(output_prefix)
    tt = tokenizer_type === nothing ? nothing : tokenizer_type_name(tokenizer_type)
    vf, mf, tm = cstr(vocab_file), cstr(merge_file), cstr(tokenizer_model)
    result = Ref(ptdp_preprocess_result(sizeof(ptdp_preprocess_result), 0, 0, 0, 0, 0.0, 0))
    GC.@preserve files keys out tt vf mf tm begin
        file_ptrs = [cptr(f) for f in files]
        key_ptrs = [cptr(k) for k in keys]
        GC.@preserve file_ptrs key_ptrs begin
            base = defaults(ptdp_preprocess_options)
            options = with(base; inputs = pointer(file_ptrs), num_inputs = length(file_ptrs),
                           json_keys = isempty(key_ptrs) ? base.json_keys : pointer(key_ptrs),
                           num_json_keys = length(key_ptrs), output_prefix = cptr(out),
                           tokenizer_type = tt === nothing ? base.tokenizer_type : cptr(tt),
                           vocab_file = cptr(vf), merge_file = cptr(mf), tokenizer_model = cptr(tm),
                           vocab_size = vocab_size, append_eod = append_eod, workers = workers,
                           log_interval = log_interval, skip_bad_lines = skip_bad_lines)
            check(ptdp_preprocess(Ref(options), result))
        end
    end
    return result[]
end

"""
    merge_datasets(prefixes, output_prefix)

Concatenates the indexed data sets `prefixes` (their documents and sequences, in order) into
OUTPUT_PREFIX.bin and .idx.
"""
function merge_datasets(prefixes, output_prefix::AbstractString)
    names = String[prefixes...]
    GC.@preserve names begin
        ptrs = [cptr(p) for p in names]
        check(ptdp_merge_datasets(ptrs, length(ptrs), output_prefix))
    end
    return nothing
end

function run_main(main, program::AbstractString, args)
    argv = String[program; args...]
    code = Ref{Int32}(1)
    GC.@preserve argv begin
        ptrs = [cptr(a) for a in argv]
        check(main(Int32(length(ptrs)), ptrs, code))
    end
    return Int(code[])
end

"""
    preprocess_main(args; program = "ptdp-preprocess-data") -> Int

Runs `ptdp-preprocess-data` with Megatron's flags `args`. Returns the exit status: 0 done, 1
failed (the message went to stderr), 2 bad flags.
"""
preprocess_main(args::AbstractVector{<:AbstractString};
                program::AbstractString = "ptdp-preprocess-data") = run_main(ptdp_preprocess_main, program, args)

"""
    merge_datasets_main(args; program = "ptdp-merge-datasets") -> Int

Runs `ptdp-merge-datasets` (`--input DIR` or `--datasets PREFIX...`, and `--output-prefix`).
Returns the exit status as `preprocess_main`.
"""
merge_datasets_main(args::AbstractVector{<:AbstractString};
                    program::AbstractString = "ptdp-merge-datasets") = run_main(ptdp_merge_datasets_main, program, args)

end # module
