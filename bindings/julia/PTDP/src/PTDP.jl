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
       model_options, model_presets, preset_options

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
    train_iteration!(optimizer, schedule, tokens, labels, micro_batch_size, iteration)

One training iteration (zero the gradients, run the batch through the schedule, step). Each
column of the `Int32` matrices `tokens` and `labels` is one sample of seq_length tokens.
Returns the `ptdp_iteration_result` (loss, grad_norm, learning_rate, ...).
"""
function train_iteration!(opt::Optimizer, schedule::Schedule, tokens::Array{Int32},
                          labels::Array{Int32}, micro_batch_size::Integer, iteration::Integer)
    size(tokens) == size(labels) || throw(DimensionMismatch("tokens and labels differ in size"))
    result = Ref{ptdp_iteration_result}()
    check(ptdp_train_iteration(opt.model, opt, schedule, tokens, labels, micro_batch_size,
                               iteration, C_NULL, result))
    return result[]
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

end # module
