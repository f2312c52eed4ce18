"""Enum arguments and fields take their names: every enum of the header has its IntEnum, every
enum-typed field of every options struct takes the members' names (any case, "-" or "_"), the
member or its int, ptdp-train's flag spellings mean what the flags mean, and anything else is
refused with the names listed."""
import os
import re

import numpy as np
import pytest

import ptdp
from ptdp import _lib

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "capi", "include", "ptdp", "ptdp.h")
# Enums no argument or field is spelt with: the status every call returns (ptdp.Error's
# subclasses stand for it) and the one-value ptdp_label_value (ptdp.IGNORE_INDEX).
NOT_ARGUMENTS = {"ptdp_status", "ptdp_label_value"}


def header():
    with open(HEADER, encoding="utf-8") as f:
        return f.read()


def header_enums():
    """{C type: {constant: value}} of every enum of the header."""
    enums = {}
    for name, body in re.findall(r"typedef enum (\w+) PTDP_ENUM_INT \{(.*?)\} \1;", header(), re.S):
        enums[name] = {c: int(v) for c, v in re.findall(r"^\s*(PTDP_\w+)\s*=\s*(-?\d+)", body, re.M)}
    return enums


def enum_fields():
    """(struct, field, C enum type) of every field typed with an enum, and of every integer field
    documented as holding one ("a ::ptdp_chunk_placement")."""
    enums = header_enums()
    fields = []
    for struct, body in re.findall(r"typedef struct (\w+) \{(.*?)\} \1;", header(), re.S):
        # One declaration per match, with its comment up to the next declaration.
        declaration = r"^\s*(?:const\s+)?\w+\s+\**\w+(?:\[\w*\])?;"
        for type_, field, comment in re.findall(rf"^\s*(\w+)\s+(\w+);(.*?)(?={declaration}|\Z)", body, re.S | re.M):
            if type_ in enums:
                fields.append((struct, field, type_))
            elif type_ in ("int32_t", "int64_t"):
                mentioned = re.search(r"\ba\s+::(ptdp_\w+)", comment)
                if mentioned and mentioned.group(1) in enums:
                    fields.append((struct, field, mentioned.group(1)))
    return fields


def test_every_header_enum_is_an_enum_of_the_package():
    for c_type, constants in header_enums().items():
        if c_type in NOT_ARGUMENTS:
            assert c_type not in _lib._ENUMS
            continue
        cls = _lib._ENUMS[c_type]
        assert getattr(ptdp, cls.__name__) is cls, f"ptdp.{cls.__name__} is not exported"
        assert sorted(m.value for m in cls.__members__.values()) == sorted(constants.values()), c_type
        for constant, value in constants.items():
            assert constant.endswith("_" + cls(value).name), (c_type, constant)


def test_every_enum_field_takes_names_members_and_ints():
    fields = enum_fields()
    assert ("ptdp_optimizer_options", "optimizer", "ptdp_optimizer_kind") in fields
    assert ("ptdp_parallel_options", "pipeline_chunk_placement", "ptdp_chunk_placement") in fields
    assert len(fields) >= 20
    for struct, field, c_type in fields:
        cls = _lib._ENUMS[c_type]
        for member in cls:
            for spelling in (member.name.lower(), member.name.replace("_", "-"), member, int(member)):
                value = getattr(_lib.make_struct(struct, **{field: spelling}), field)
                assert value == member, (struct, field, spelling)
        with pytest.raises(ptdp.InvalidArgumentError, match=rf"^{struct}\.{field} = 'no such name' is not a "
                                                             rf"ptdp\.{cls.__name__}; expected one of '"):
            _lib.make_struct(struct, **{field: "no such name"})


def test_the_issues_examples():
    with ptdp.Runtime() as rt, rt.groups() as g:
        model = ptdp.Model(g, num_layers=1, hidden_size=16, num_attention_heads=2, seq_length=8, vocab_size=32,
                           recompute_granularity="full", normalization="RMSNorm", precision="f32")
        assert model.get_options()["recompute_granularity"] == ptdp.Recompute.FULL
        assert model.get_options()["normalization"] == ptdp.Normalization.RMSNORM
        for name, kind in (("adam", ptdp.OptimizerKind.ADAM), ("SGD", ptdp.OptimizerKind.SGD)):
            with ptdp.Optimizer(model, optimizer=name, lr=0.5, sgd_momentum=0, weight_decay=0, clip_grad=0) as opt:
                tokens = np.zeros((2, 8), dtype=np.int32)
                with ptdp.Schedule("1f1b", 1, 1) as schedule:
                    ptdp.train_iteration(model, opt, schedule, tokens, tokens, 2, 0)
        assert _lib.make_struct("ptdp_optimizer_options", optimizer="sgd").optimizer == kind
        with pytest.raises(ptdp.InvalidArgumentError,
                           match="ptdp_optimizer_options.optimizer = 'adma' is not a ptdp.OptimizerKind; expected "
                                 "one of 'adam', 'sgd', 'muon', 'adamw'"):
            ptdp.Optimizer(model, optimizer="adma")


# ptdp-train's choice flags: where each lands, and its enum.
CHOICE_FLAGS = {
    "recompute-granularity": ("gpt_options", "recompute_granularity", ptdp.Recompute),
    "attention-backend": ("gpt_options", "attention", ptdp.Attention),
    "normalization": ("gpt_options", "normalization", ptdp.Normalization),
    "position-embedding-type": ("gpt_options", "position_embedding_type", ptdp.PositionEmbedding),
    "rope-type": ("gpt_options", "rope_type", ptdp.RopeType),  # yarn: with RoPE, the model below
    "pipeline-schedule": ("settings", "pipeline_schedule", ptdp.ScheduleKind),
    "optimizer": ("optimizer_options", "optimizer", ptdp.OptimizerKind),
    "lr-decay-style": ("optimizer_options", "lr_decay_style", ptdp.LRDecayStyle),
    # A string of the settings ("auto" chooses when the model is built); its other values name
    # the ptdp.Device the model gets.
    "device": ("settings", "device", None),
    # Mixture of experts (read with --num-experts only, the MoE layout below).
    "moe-router-score-function": ("gpt_options", "moe_router_score_function", ptdp.MoeScoreFunction),
    "moe-router-load-balancing-type": ("gpt_options", "moe_router_load_balancing_type", ptdp.MoeLoadBalancing),
    "moe-token-drop-policy": ("gpt_options", "moe_token_drop_policy", ptdp.MoeDropPolicy),
    "moe-token-dispatcher-type": ("gpt_options", "moe_token_dispatcher_type", ptdp.MoeDispatcher),
    # The router always computes in fp32, the one value accepted; no field records it.
    "moe-router-dtype": (None, None, None),
    # Muon (read with --optimizer muon only, the Muon layout below).
    "muon-coefficient-type": ("optimizer_options", "muon_coefficient_type", ptdp.NsCoefficients),
    "muon-fp32-matmul-prec": ("optimizer_options", "muon_fp32_matmul_prec", ptdp.NsPrecision),
    "muon-scale-mode": ("optimizer_options", "muon_scale_mode", ptdp.MuonScaleMode),
    "muon-tp-mode": ("optimizer_options", "muon_tp_mode", ptdp.MuonTpMode),
    # AdamW, the one scalar optimizer built; no field records it.
    "muon-scalar-optimizer": (None, None, None),
}
# Spellings ptdp-train lists and refuses by design, each with the reason it gives (none today:
# global_aux_loss, once refused, is Megatron's loss now).
REFUSED = {}
FLAGS = ("--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64 "
         "--micro-batch-size 1 --global-batch-size 8 --mock-data")
# Layouts some schedules need (ZB-V and DualPipeV: p > 1; interleaved ZB: v > 1 as well), and
# RoPE for --rope-type yarn.
LAYOUTS = ("", " --optimizer muon", " --pipeline-model-parallel-size 2",
           " --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2",
           " --position-embedding-type rope",
           " --num-experts 4 --moe-router-topk 2 --disable-bias-linear --moe-expert-capacity-factor 1")


def test_ptdp_train_spellings_name_what_the_flags_choose():
    choices = dict(re.findall(r"--([\w-]+) \{([^}]*)\}", ptdp.TrainConfig.help()))
    assert set(choices) == set(CHOICE_FLAGS), "a choice flag of ptdp-train without its enum here"
    checked = 0
    for flag, values in choices.items():
        getter, field, cls = CHOICE_FLAGS[flag]
        for value in values.split(","):
            if (flag, value) in REFUSED:
                with pytest.raises(ptdp.InvalidArgumentError, match=REFUSED[(flag, value)]):
                    ptdp.TrainConfig(f"{FLAGS}{LAYOUTS[-1]} --{flag} {value}")
                checked += 1
                continue
            for layout in LAYOUTS:
                try:
                    config = ptdp.TrainConfig(f"{FLAGS}{layout} --{flag} {value}")
                    break
                except ptdp.InvalidArgumentError:
                    continue
            else:
                pytest.fail(f"--{flag} {value} parses in none of the layouts")
            if getter is None:
                config.close()
                checked += 1
                continue
            with config:
                got = getattr(config, getter)()[field]
            if cls is None:
                assert got == value
                assert value == "auto" or _lib.enum_member(ptdp.Device, value, flag).name == value.upper()
            else:
                assert got == _lib.enum_member(cls, value, flag), (flag, value)
            checked += 1
    for flag, dtype in (("--bf16", ptdp.DType.BF16), ("--fp16", ptdp.DType.F16)):
        with ptdp.TrainConfig(f"{FLAGS} {flag}") as config:
            assert config.gpt_options()["precision"] == _lib.enum_member(ptdp.DType, flag[2:], "dtype") == dtype
    assert checked >= 20


def test_spellings_of_arguments():
    assert ptdp.Schedule("interleaved-1F1B", 2, 4, 2).kind == ptdp.ScheduleKind.INTERLEAVED_1F1B
    assert ptdp.Schedule(np.int32(3), 2, 4).kind == ptdp.ScheduleKind.ZB_H1
    for name in ("bfloat16", "BF16", "bf16"):
        assert ptdp.Tensor.zeros((2,), dtype=name).dtype == ptdp.DType.BF16
    assert ptdp.Tensor([1, 2], dtype="int64").dtype == ptdp.DType.I64
    assert ptdp.Tokenizer("nulltokenizer", vocab_size=10).type == ptdp.TokenizerType.NULL
    assert ptdp.raw.ptdp_dtype_size("bf16") == 2
    assert _lib.enum_member(ptdp.HFArchitecture, "LlamaForCausalLM", "architecture") == ptdp.HFArchitecture.LLAMA
    assert _lib.enum_member(ptdp.ParamFlags, "replicated | no_weight_decay", "flags") == 3
    with ptdp.Runtime() as rt, rt.groups() as g:
        assert g.rank("Tensor") == g.rank(ptdp.GroupKind.TENSOR) == 0
        x = ptdp.Tensor(np.array([1, 5, 3], dtype=np.float32))
        g.all_reduce(x, kind="data", op="max")
        assert list(g.members("world")) == list(range(rt.size))
        w, grad = ptdp.Tensor(np.ones(2, np.float32)), ptdp.Tensor(np.ones(2, np.float32))
        with ptdp.Optimizer.for_tensors(g, [w], [grad], flags=["replicated|no_weight_decay"]):
            pass


def test_refusals_name_the_argument_and_list_the_names():
    with pytest.raises(ptdp.InvalidArgumentError, match=r"^dtype = 'f8' is not a ptdp\.DType; expected one of 'f32', "
                                                        r"'bf16', 'f16', 'i32', 'i64', 'fp32', 'float32'"):
        ptdp.Tensor.zeros((2,), dtype="f8")
    with pytest.raises(ptdp.InvalidArgumentError, match=r"^dtype = Device\.CPU is not a ptdp\.DType"):
        ptdp.Tensor.zeros((2,), dtype=ptdp.Device.CPU)
    with pytest.raises(ptdp.InvalidArgumentError, match=r"^kind = 99 is not a ptdp\.ScheduleKind"):
        ptdp.Schedule(99, 1, 1)
    with pytest.raises(TypeError, match=r"^dtype must be a name \(str\), a ptdp\.DType or an int, not float"):
        ptdp.Tensor.zeros((2,), dtype=1.0)
    with pytest.raises(ptdp.InvalidArgumentError, match=r"^ptdp_groups_rank: kind = 'tensr' is not a "
                                                        r"ptdp\.GroupKind; expected one of 'world', 'tensor'"):
        with ptdp.Runtime(use_mpi=0) as rt, rt.groups() as g:
            g.rank("tensr")
    with pytest.raises(ptdp.InvalidArgumentError, match=r"^flags\[1\] = 'shared' is not a ptdp\.ParamFlags"):
        with ptdp.Runtime(use_mpi=0) as rt, rt.groups() as g:
            ts = [ptdp.Tensor(np.ones(2, np.float32)) for _ in range(4)]
            ptdp.Optimizer.for_tensors(g, ts[:2], ts[2:], flags=["replicated", "shared"])
    # A plain int goes to the library, which range-checks it and names the argument.
    with pytest.raises(ptdp.InvalidArgumentError, match="ptdp_dtype_size"):
        ptdp.raw.ptdp_dtype_size(99)
    with pytest.raises(OverflowError, match="ptdp_dtype_size: dtype = 4294967296 is out of range"):
        ptdp.raw.ptdp_dtype_size(2 ** 32)
