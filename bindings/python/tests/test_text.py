"""Text and weights from outside through the Python API: tokenizers against the committed reference
ids (tests/data/fixtures, made with Hugging Face tokenizers and sentencepiece), Megatron's
end-of-document masks, preprocessing JSON lines into indexed data sets and merging them, and a
Hugging Face export imported back into a new model with the same parameters and logits."""
import json
import os
from pathlib import Path

import numpy as np
import pytest

import ptdp

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "data" / "fixtures"
GPT2_FILES = dict(vocab_file=FIXTURES / "tokenizer_gpt2_vocab.json", merge_file=FIXTURES / "tokenizer_gpt2_merges.txt")


@pytest.fixture(scope="module")
def expected():
    with open(FIXTURES / "tokenizer_expected.json", encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture()
def gpt2():
    with ptdp.Tokenizer("GPT2BPETokenizer", **GPT2_FILES) as tok:
        yield tok


# --------------------------------------------------------------------------------------------
# Tokenizers


@pytest.mark.parametrize("name, tokenizer_type, files", [
    ("gpt2", "GPT2BPETokenizer", GPT2_FILES),
    ("llama3", "HuggingFaceTokenizer", dict(tokenizer_model=FIXTURES / "tokenizer_llama3.json")),
    ("qwen2", ptdp.TokenizerType.HUGGING_FACE, dict(tokenizer_model=FIXTURES / "tokenizer_qwen2.json")),
    ("sp_bpe", "SentencePieceTokenizer", dict(tokenizer_model=FIXTURES / "tokenizer_sp_bpe.model")),
])
def test_tokenizers_give_the_reference_ids(expected, name, tokenizer_type, files):
    want = expected[name]
    with ptdp.Tokenizer(tokenizer_type, **files) as tok:
        assert tok.vocab_size == want["vocab_size"]
        assert tok.eod == (None if want["eod"] < 0 else want["eod"])
        assert tok.bos == (None if want["bos"] < 0 else want["bos"])
        for case in want["cases"]:
            ids = tok.encode(case["text"])
            assert ids.dtype == np.int32
            assert ids.tolist() == case["ids"], case["text"]
            assert tok.decode(ids) == case["decoded"], case["text"]


def test_gpt2_vocabulary_entries_and_types(gpt2):
    assert gpt2.type == ptdp.TokenizerType.GPT2_BPE
    assert gpt2.eod == 0 and gpt2.bos is None
    assert gpt2.token_to_id("<|endoftext|>") == gpt2.eod
    assert 0 not in gpt2.encode("a<|endoftext|>").tolist()  # Megatron's GPT2BPETokenizer: text, not a token
    space = gpt2.token_to_id("\u0120")  # GPT-2 spells the space as "Ġ"
    assert space == 221
    assert gpt2.id_to_token(space) == "\u0120"
    assert gpt2.decode([space]) == " "
    assert gpt2.token_to_id("not a token") is None
    # str and bytes encode alike; the text of a repeated word is its ids twice.
    assert gpt2.encode("the program".encode()).tolist() == gpt2.encode("the program").tolist()
    assert gpt2.encode("program program").tolist() == (gpt2.encode("program").tolist()
                                                       + gpt2.encode(" program").tolist())


def test_byte_level_gives_back_any_bytes():
    with ptdp.Tokenizer() as tok:  # ByteLevel by default, no files
        assert tok.type == ptdp.TokenizerType.BYTE_LEVEL
        assert (tok.vocab_size, tok.eod, tok.bos) == (256, None, None)
        np.testing.assert_array_equal(tok.encode("hello"), np.array([104, 101, 108, 108, 111], dtype=np.int32))
        assert tok.encode(b"a\0\xff").tolist() == [97, 0, 255]
        assert tok.encode("").size == 0
        assert tok.decode_bytes([97, 0, 255]) == b"a\0\xff"
        caf = tok.encode("caf\u00e9")  # é is two bytes
        assert caf.tolist() == [99, 97, 102, 0xC3, 0xA9]
        assert tok.decode(caf) == "caf\u00e9"
        assert tok.decode(caf[:4]) == "caf\ufffd"  # half a character is not text
        assert tok.decode_bytes(caf[:4]) == b"caf\xc3"
        assert tok.token_to_id("a") == 97 and tok.token_to_id("ab") is None
        assert tok.token_to_id(tok.id_to_token(255)) == 255  # a byte that is not UTF-8 comes back
        assert tok.id_to_token(104) == "h"
    with ptdp.Tokenizer(ptdp.TokenizerType.BYTE_LEVEL) as a, ptdp.Tokenizer("byte_level") as b:
        assert a.encode("xy").tolist() == b.encode("xy").tolist() == [120, 121]


def test_null_tokenizer_reads_the_ids():
    with ptdp.Tokenizer("NullTokenizer", vocab_size=100) as tok:
        assert (tok.vocab_size, tok.eod) == (101, 100)
        assert tok.encode("1 2 3").tolist() == [1, 2, 3]
        assert tok.decode([1, 2, 100]) == "1 2 100"
        with pytest.raises(ptdp.InvalidArgumentError, match="'x' at byte 2"):
            tok.encode("1 x")
        with pytest.raises(ptdp.InvalidArgumentError, match="id 101 at position 1"):
            tok.decode([1, 101])


def test_tokenizer_refusals_name_what_is_wrong(gpt2):
    with pytest.raises(ptdp.InvalidArgumentError, match="needs --merge-file"):
        ptdp.Tokenizer("GPT2BPETokenizer", vocab_file=GPT2_FILES["vocab_file"])
    with pytest.raises(ptdp.FileError, match="/nonexistent/merges.txt"):
        ptdp.Tokenizer("GPT2BPETokenizer", vocab_file=GPT2_FILES["vocab_file"], merge_file="/nonexistent/merges.txt")
    with pytest.raises(ptdp.InvalidArgumentError, match="--vocab-size"):
        ptdp.Tokenizer("NullTokenizer")
    with pytest.raises(ptdp.InvalidArgumentError, match="needs --tokenizer-model"):
        ptdp.Tokenizer("SentencePieceTokenizer")
    with pytest.raises(ptdp.InvalidArgumentError,
                       match="Tokenizer: type = 'WordPiece' is not a ptdp.TokenizerType; expected one of "
                             ".*'GPT2BPETokenizer'"):
        ptdp.Tokenizer("WordPiece")
    with pytest.raises(ptdp.InvalidArgumentError, match="Tokenizer: type = 9"):
        ptdp.Tokenizer(9)
    with pytest.raises(ptdp.InvalidArgumentError, match="320"):
        gpt2.id_to_token(320)
    with pytest.raises(TypeError, match="text must be str or bytes"):
        gpt2.encode(12)
    gpt2.close()
    with pytest.raises(ValueError, match="Tokenizer is closed"):
        gpt2.encode("a")


def test_the_tokenizer_a_checkpoint_was_trained_with(groups, gpt2, tmp_path):
    flags = ["--num-layers", "1", "--hidden-size", "16", "--num-attention-heads", "2", "--seq-length", "4",
             "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", str(GPT2_FILES["vocab_file"]),
             "--merge-file", str(GPT2_FILES["merge_file"]), "--mock-data"]
    with ptdp.TrainConfig(flags) as config, ptdp.Model(groups, config.gpt_options()) as model:
        ptdp.save_checkpoint(tmp_path / "ckpt", model, config=config)
    with ptdp.Tokenizer.from_checkpoint(tmp_path / "ckpt") as tok:
        assert tok.type == ptdp.TokenizerType.GPT2_BPE
        assert tok.encode("the program").tolist() == gpt2.encode("the program").tolist()
    with ptdp.TrainConfig(flags[:8]) as config, ptdp.Model(groups, config.gpt_options()) as model:
        ptdp.save_checkpoint(tmp_path / "mock", model, config=config)
    with pytest.raises(ptdp.InvalidArgumentError, match="records no --tokenizer-type"):
        ptdp.Tokenizer.from_checkpoint(tmp_path / "mock")
    with pytest.raises(ptdp.FileError, match="latest_checkpointed_iteration.txt"):
        ptdp.Tokenizer.from_checkpoint(tmp_path / "missing")


# --------------------------------------------------------------------------------------------
# Loss masks and documents

# Two samples of 4 tokens, end of document 0: "5 0 | 7 8" and "0 | 3 0 | 4".
TOKENS = np.array([[5, 0, 7, 8], [0, 3, 0, 4]], dtype=np.int32)
LABELS = np.array([[0, 7, 8, 9], [3, 0, 4, 1]], dtype=np.int32)


def test_eod_masks_are_megatrons():
    labels, positions, starts = ptdp.eod_masks(TOKENS, 4, 0, labels=LABELS)
    np.testing.assert_array_equal(labels, [[0, -100, 8, 9], [-100, 0, -100, 1]])
    np.testing.assert_array_equal(positions, [[0, 1, 0, 1], [0, 0, 1, 0]])
    np.testing.assert_array_equal(starts, [[0, 0, 2, 2], [0, 1, 1, 3]])
    np.testing.assert_array_equal(LABELS, [[0, 7, 8, 9], [3, 0, 4, 1]])  # the caller's labels are left alone
    assert ptdp.IGNORE_INDEX == -100 == ptdp.raw.PTDP_IGNORE_INDEX
    # Only the flags asked for are filled.
    labels, positions, starts = ptdp.eod_masks(TOKENS.reshape(-1), 4, 0, eod_mask_loss=False,
                                               reset_position_ids=False)
    assert labels is None and positions is None
    np.testing.assert_array_equal(starts, [[0, 0, 2, 2], [0, 1, 1, 3]])
    with pytest.raises(ValueError, match="not a multiple of seq_length = 3"):
        ptdp.eod_masks(TOKENS, 3, 0, labels=LABELS)


def test_masked_losses_through_the_model(groups):
    """Ignored labels take no part in the loss; a batch with none counted has loss 0 (never NaN);
    document masks change the loss of tokens after an end of document only."""
    with ptdp.Model(groups, num_layers=1, hidden_size=16, num_attention_heads=2, seq_length=4, vocab_size=16,
                    hidden_dropout=0.0, attention_dropout=0.0) as model:
        full = model.forward(TOKENS, LABELS)
        labels, positions, starts = ptdp.eod_masks(TOKENS, 4, 0, labels=LABELS)
        masked = model.forward(TOKENS, labels)
        assert np.isfinite(full) and np.isfinite(masked) and masked != full
        assert model.forward(TOKENS, np.full_like(LABELS, ptdp.IGNORE_INDEX)) == 0.0
        documents = model.forward(TOKENS, labels, position_ids=positions, document_starts=starts)
        assert np.isfinite(documents) and documents != masked
        # Only the first label of the first sample counts: tokens 5 and 0, the first document, see
        # nothing after them, so the document masks do not change that loss.
        first = np.full_like(LABELS, ptdp.IGNORE_INDEX)
        first[0, 0] = 3
        assert model.forward(TOKENS, first, position_ids=positions, document_starts=starts) == \
            pytest.approx(model.forward(TOKENS, first), rel=1e-6)


# --------------------------------------------------------------------------------------------
# Preprocessing

def write_lines(path, objects):
    with open(path, "w", encoding="utf-8") as f:
        for obj in objects:
            f.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
    return path


def documents(prefix):
    with ptdp.IndexedDataset(prefix) as ds:
        return [ds[i].tolist() for i in range(len(ds))], ds.num_sequences


def test_preprocess_writes_the_token_ids(tmp_path):
    source = write_lines(tmp_path / "in.jsonl", [{"text": "ab", "title": "T1"}, {"text": "", "title": "T2"},
                                                 {"text": "xyz", "title": ""}])
    result = ptdp.preprocess(source, tmp_path / "out", json_keys=["text", "title"], workers=2)
    assert isinstance(result, ptdp.PreprocessResult)
    assert (result.documents, result.bad_lines, result.tokens, result.dtype_code) == (3, 0, 2 + 3 + 2 + 2, 8)
    assert result.bytes == os.path.getsize(source)
    assert result.seconds >= 0
    assert documents(tmp_path / "out_text_document") == ([[97, 98], [], [120, 121, 122]], 2)
    assert documents(tmp_path / "out_title_document") == ([[84, 49], [84, 50], []], 2)


def test_preprocess_with_a_bpe_tokenizer_and_eod(tmp_path, gpt2):
    texts = ["The program is free software.", "it's a license"]
    source = write_lines(tmp_path / "in.jsonl", [{"text": t} for t in texts])
    result = ptdp.preprocess([source], tmp_path / "bpe", tokenizer_type=ptdp.TokenizerType.GPT2_BPE,
                             append_eod=True, **GPT2_FILES)
    want = [gpt2.encode(t).tolist() + [gpt2.eod] for t in texts]
    assert documents(tmp_path / "bpe_text_document")[0] == want
    assert result.tokens == sum(len(w) for w in want)
    # ByteLevel has no end-of-document id to append.
    with pytest.raises(ptdp.InvalidArgumentError, match="--append-eod"):
        ptdp.preprocess(source, tmp_path / "bytes", append_eod=True)


def test_preprocess_names_a_bad_line_or_skips_it(tmp_path):
    source = write_lines(tmp_path / "in.jsonl", [{"text": "ok"}, {"text": 5}, {"text": "fine"}])
    with pytest.raises(ptdp.InvalidArgumentError, match=f"{source}:2: key 'text' holds a number, not a string"):
        ptdp.preprocess(source, tmp_path / "out")
    assert not (tmp_path / "out_text_document.bin").exists()  # no partial output
    result = ptdp.preprocess(source, tmp_path / "out", skip_bad_lines=True)
    assert (result.documents, result.bad_lines) == (2, 1)
    assert documents(tmp_path / "out_text_document")[0] == [[111, 107], [102, 105, 110, 101]]
    with pytest.raises(ptdp.FileError, match="missing.jsonl"):
        ptdp.preprocess(tmp_path / "missing.jsonl", tmp_path / "out")
    with pytest.raises(ptdp.InvalidArgumentError, match="preprocess: tokenizer_type = 'WordPiece'"):
        ptdp.preprocess(source, tmp_path / "out", tokenizer_type="WordPiece")
    with pytest.raises(ptdp.InvalidArgumentError, match="workers"):
        ptdp.preprocess(source, tmp_path / "out", workers=0)


def test_merge_datasets_concatenates(tmp_path):
    a = write_lines(tmp_path / "a.jsonl", [{"text": "ab"}, {"text": "c"}])
    b = write_lines(tmp_path / "b.jsonl", [{"text": "xyz"}])
    ptdp.preprocess(a, tmp_path / "a")
    ptdp.preprocess(b, tmp_path / "b")
    ptdp.merge_datasets([tmp_path / "a_text_document", tmp_path / "b_text_document"], tmp_path / "ab")
    assert documents(tmp_path / "ab") == ([[97, 98], [99], [120, 121, 122]], 3)
    with pytest.raises(ptdp.FileError, match="nothing.idx"):
        ptdp.merge_datasets([tmp_path / "nothing"], tmp_path / "none")
    with pytest.raises(ptdp.InvalidArgumentError, match="count = 0"):
        ptdp.merge_datasets([], tmp_path / "none")


def test_the_command_line_tools(tmp_path, capfd):
    source = write_lines(tmp_path / "in.jsonl", [{"text": "hi"}])
    assert ptdp.preprocess_main(["--input", source, "--output-prefix", tmp_path / "cli", "--tokenizer-type",
                                 "ByteLevel"]) == 0
    assert documents(tmp_path / "cli_text_document")[0] == [[104, 105]]
    assert ptdp.merge_datasets_main(["--datasets", tmp_path / "cli_text_document", tmp_path / "cli_text_document",
                                     "--output-prefix", tmp_path / "twice"]) == 0
    assert documents(tmp_path / "twice")[0] == [[104, 105], [104, 105]]
    assert ptdp.preprocess_main("--input x --output-prefix y") == 2  # Megatron's --tokenizer-type is required
    assert "--tokenizer-type is required" in capfd.readouterr().err
    assert ptdp.preprocess_main("--no-such-flag") == 2
    assert ptdp.merge_datasets_main(["--output-prefix", tmp_path / "x"]) == 2
    assert "give either --input DIR or --datasets" in capfd.readouterr().err


# --------------------------------------------------------------------------------------------
# Hugging Face checkpoints

TINY = dict(num_layers=2, hidden_size=16, num_attention_heads=4, seq_length=8, vocab_size=128,
            hidden_dropout=0.0, attention_dropout=0.0, seed=9)
TINY_LLAMA = dict(TINY, normalization=ptdp.Normalization.RMSNORM, swiglu=1,
                  position_embedding_type=ptdp.PositionEmbedding.ROPE, num_query_groups=2, disable_bias_linear=1,
                  untie_embeddings_and_output_weights=1, ffn_hidden_size=32)


@pytest.mark.parametrize("fields, architecture, want", [
    (TINY, None, ptdp.HFArchitecture.GPT2),
    (TINY_LLAMA, None, ptdp.HFArchitecture.LLAMA),
    (dict(TINY_LLAMA, add_qkv_bias=1), "qwen2", ptdp.HFArchitecture.QWEN2),
])
def test_hf_export_imports_back_exactly(groups, tmp_path, fields, architecture, want):
    rng = np.random.default_rng(5)
    tokens = rng.integers(0, 128, size=(2, 8), dtype=np.int32)
    labels = rng.integers(0, 128, size=(2, 8), dtype=np.int32)
    with ptdp.Model(groups, **fields) as a:
        ptdp.hf_save(tmp_path / "hf", a, architecture=architecture)
        assert (tmp_path / "hf" / "config.json").exists() and (tmp_path / "hf" / "model.safetensors").exists()
        assert ptdp.hf_architecture(tmp_path / "hf") == want
        options = ptdp.hf_read_options(tmp_path / "hf", seed=77)  # other initial values, all replaced by the load
        for key in ("num_layers", "hidden_size", "num_attention_heads", "seq_length", "vocab_size", "normalization",
                    "swiglu", "position_embedding_type", "untie_embeddings_and_output_weights", "add_qkv_bias"):
            assert options[key] == a.get_options()[key], key
        with ptdp.Model(groups, options) as b:
            before = b.get_param("decoder.layers.0.self_attention.linear_qkv.weight")
            ptdp.hf_load(tmp_path / "hf", b)
            params = a.parameters()
            assert [p.name for p in b.parameters()] == [p.name for p in params]
            for p in params:
                np.testing.assert_array_equal(b.get_param(p.name), a.get_param(p.name), err_msg=p.name)
            assert not np.array_equal(before, b.get_param("decoder.layers.0.self_attention.linear_qkv.weight"))
            np.testing.assert_array_equal(b.logits(tokens), a.logits(tokens))
            assert b.forward(tokens, labels) == a.forward(tokens, labels)


def test_hf_shards_dtypes_and_refusals(groups, tmp_path):
    with ptdp.Model(groups, **TINY) as a:
        ptdp.hf_save(tmp_path / "bf16", a, dtype="bf16", max_shard_size=4096)
        index = json.loads((tmp_path / "bf16" / "model.safetensors.index.json").read_text())
        shards = sorted(set(index["weight_map"].values()))
        assert len(shards) > 1 and all((tmp_path / "bf16" / s).exists() for s in shards)
        with ptdp.Model(groups, ptdp.hf_read_options(tmp_path / "bf16")) as b:
            ptdp.hf_load(tmp_path / "bf16", b)
            name = "decoder.layers.1.mlp.linear_fc1.weight"
            value = a.get_param(name)
            rounded = b.get_param(name)
            # bf16 keeps 8 significant bits: the error is at most half a unit in the last place.
            np.testing.assert_allclose(rounded, value, rtol=2.0 ** -8, atol=0)
            assert not np.array_equal(rounded, value)
        with pytest.raises(ptdp.InvalidArgumentError, match="hidden_size"):
            with ptdp.Model(groups, dict(TINY, hidden_size=32)) as wrong:
                ptdp.hf_load(tmp_path / "bf16", wrong)
        with pytest.raises(ptdp.InvalidArgumentError,
                           match="hf_save: architecture = 'bert' is not a ptdp.HFArchitecture; expected one of 'auto', "
                                 "'gpt2'"):
            ptdp.hf_save(tmp_path / "x", a, architecture="bert")
        with pytest.raises(ptdp.InvalidArgumentError, match="max_shard_size"):
            ptdp.hf_save(tmp_path / "x", a, max_shard_size=-1)
        with pytest.raises(ptdp.UnsupportedError, match="GPT-2|gpt2"):
            with ptdp.Model(groups, **TINY_LLAMA) as llama:
                ptdp.hf_save(tmp_path / "x", llama, architecture=ptdp.HFArchitecture.GPT2)
    with pytest.raises(ptdp.FileError, match="config.json"):
        ptdp.hf_read_options(tmp_path / "empty")
