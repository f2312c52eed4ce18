//! Text and weights from outside through the safe crate: tokenizers against the committed
//! reference ids (tests/data/fixtures), Megatron's end-of-document masks and the masked losses,
//! preprocessing JSON lines into indexed data sets and merging them, and a Hugging Face export
//! imported back into a new model with the same parameters and loss.
use ptdp::sys;
use ptdp::{
    eod_masks, hf_load, hf_read_options, hf_save, merge_datasets, merge_datasets_main, preprocess, preprocess_main,
    tokenizer_type, BatchMasks, Defaults, GptOptions, Groups, HfSaveOptions, IndexedDataset, Model, ParallelOptions,
    PreprocessArgs, Runtime, RuntimeOptions, Tokenizer, TokenizerFiles, IGNORE_INDEX,
};
use std::fs;
use std::path::PathBuf;

fn fixture(name: &str) -> String {
    format!("{}/../../../tests/data/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A fresh scratch directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("ptdp-rust-text-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).expect("scratch directory");
        TempDir(path)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn gpt2() -> ptdp::Result<Tokenizer> {
    let (vocab, merges) = (
        fixture("tokenizer_gpt2_vocab.json"),
        fixture("tokenizer_gpt2_merges.txt"),
    );
    let files = TokenizerFiles {
        vocab_file: Some(&vocab),
        merge_file: Some(&merges),
        ..Default::default()
    };
    Tokenizer::with_files(tokenizer_type("GPT2BPETokenizer")?, &files)
}

const LICENSE: &str = "The GNU General Public License is a free, copyleft license for software.";

#[test]
fn tokenizers_give_the_reference_ids() -> ptdp::Result<()> {
    // tokenizer_expected.json's ids of Hugging Face tokenizers for the same files and text.
    let tok = gpt2()?;
    assert_eq!(tok.kind()?, sys::PTDP_TOKENIZER_GPT2_BPE);
    assert_eq!((tok.vocab_size()?, tok.eod()?, tok.bos()?), (320, Some(0), None));
    let ids = tok.encode(LICENSE)?;
    assert_eq!(
        ids,
        [
            52, 72, 69, 221, 39, 46, 53, 221, 39, 271, 261, 285, 221, 48, 85, 66, 76, 274, 221, 44, 274, 271, 292, 221,
            277, 258, 283, 265, 69, 12, 284, 80, 89, 308, 70, 84, 221, 76, 274, 271, 292, 307, 279, 79, 70, 84, 87, 65,
            265, 14
        ]
    );
    assert_eq!(tok.decode(&ids)?, LICENSE);
    assert_eq!(tok.token_to_id("<|endoftext|>")?, Some(0));
    assert_eq!(tok.token_to_id("\u{120}")?, Some(221)); // GPT-2 spells the space as "Ġ"
    assert_eq!(tok.id_to_token(221)?, "\u{120}".as_bytes());
    assert_eq!(tok.token_to_id("not a token")?, None);

    let model = fixture("tokenizer_llama3.json");
    let files = TokenizerFiles {
        tokenizer_model: Some(&model),
        ..Default::default()
    };
    let llama = Tokenizer::with_files(sys::PTDP_TOKENIZER_HUGGING_FACE, &files)?;
    assert_eq!(
        (llama.vocab_size()?, llama.eod()?, llama.bos()?),
        (320, Some(1), Some(0))
    );
    let ids = llama.encode("<|begin_of_text|>Hello<|end_of_text|><|eot_id|>")?;
    assert_eq!(ids, [0, 42, 71, 78, 78, 81, 1, 2]);
    assert_eq!(llama.decode(&ids)?, "<|begin_of_text|>Hello<|end_of_text|><|eot_id|>");
    Ok(())
}

#[test]
fn byte_level_gives_back_any_bytes() -> ptdp::Result<()> {
    let tok = Tokenizer::byte_level()?;
    assert_eq!(tok.kind()?, sys::PTDP_TOKENIZER_BYTE_LEVEL);
    assert_eq!((tok.vocab_size()?, tok.eod()?), (256, None));
    assert_eq!(tok.encode("hello")?, [104, 101, 108, 108, 111]);
    assert_eq!(tok.encode_bytes(b"a\0\xff")?, [97, 0, 255]);
    assert_eq!(tok.encode("")?, Vec::<i32>::new());
    assert_eq!(tok.decode_bytes(&[97, 0, 255])?, b"a\0\xff");
    let cafe = tok.encode("caf\u{e9}")?; // é is two bytes
    assert_eq!(cafe, [99, 97, 102, 0xC3, 0xA9]);
    assert_eq!(tok.decode(&cafe[..4])?, "caf\u{fffd}"); // half a character is not text
    assert_eq!(tok.id_to_token(255)?, [255u8]);
    assert_eq!(tok.token_to_id([255u8])?, Some(255));
    assert_eq!(tok.token_to_id("ab")?, None);
    // Shared between threads: the tokenizer is immutable.
    let text = "one tokenizer, several threads";
    let want = tok.encode(text)?;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..3).map(|_| s.spawn(|| tok.encode(text))).collect();
        for h in handles {
            assert_eq!(h.join().expect("thread").expect("encode"), want);
        }
    });
    Ok(())
}

#[test]
fn tokenizer_errors_carry_the_library_message() -> ptdp::Result<()> {
    let vocab = fixture("tokenizer_gpt2_vocab.json");
    let mut files = TokenizerFiles {
        vocab_file: Some(&vocab),
        ..Default::default()
    };
    let err = Tokenizer::with_files(sys::PTDP_TOKENIZER_GPT2_BPE, &files)
        .err()
        .expect("no merges");
    assert_eq!(err.status(), sys::PTDP_ERR_INVALID_ARGUMENT);
    assert!(err.message().contains("needs --merge-file"), "{err}");
    files.merge_file = Some("/nonexistent/merges.txt");
    let err = Tokenizer::with_files(sys::PTDP_TOKENIZER_GPT2_BPE, &files)
        .err()
        .expect("missing file");
    assert_eq!(err.status(), sys::PTDP_ERR_IO);
    assert!(err.message().contains("/nonexistent/merges.txt"), "{err}");
    let err = tokenizer_type("WordPiece").expect_err("unknown name");
    assert!(err.message().contains("GPT2BPETokenizer"), "{err}");

    let null = Tokenizer::with_files(
        sys::PTDP_TOKENIZER_NULL,
        &TokenizerFiles {
            vocab_size: 100,
            ..Default::default()
        },
    )?;
    assert_eq!((null.vocab_size()?, null.eod()?), (101, Some(100)));
    assert_eq!(null.encode("1 2 3")?, [1, 2, 3]);
    let err = null.encode("1 x").expect_err("not an id");
    assert_eq!(err.status(), sys::PTDP_ERR_INVALID_ARGUMENT);
    assert!(err.message().contains("'x' at byte 2"), "{err}");
    let err = null.decode(&[1, 101]).expect_err("out of the vocabulary");
    assert!(err.message().contains("id 101 at position 1"), "{err}");
    let err = Tokenizer::byte_level()?
        .id_to_token(256)
        .expect_err("out of the vocabulary");
    assert!(err.message().contains("256"), "{err}");
    let err = Tokenizer::from_checkpoint("/nonexistent/ckpt")
        .err()
        .expect("no checkpoint");
    assert_eq!(err.status(), sys::PTDP_ERR_IO);
    Ok(())
}

// Two samples of 4 tokens, end of document 0: "5 0 | 7 8" and "0 | 3 0 | 4".
const TOKENS: [i32; 8] = [5, 0, 7, 8, 0, 3, 0, 4];
const LABELS: [i32; 8] = [0, 7, 8, 9, 3, 0, 4, 1];
const ALL_FLAGS: i32 = sys::PTDP_EOD_MASK_LOSS | sys::PTDP_EOD_RESET_POSITION_IDS | sys::PTDP_EOD_RESET_ATTENTION_MASK;

#[test]
fn eod_masks_are_megatrons() -> ptdp::Result<()> {
    let m = eod_masks(&TOKENS, 4, 0, Some(&LABELS), ALL_FLAGS)?;
    assert_eq!(m.labels.as_deref(), Some(&[0, -100, 8, 9, -100, 0, -100, 1][..]));
    assert_eq!(m.position_ids.as_deref(), Some(&[0, 1, 0, 1, 0, 0, 1, 0][..]));
    assert_eq!(m.document_starts.as_deref(), Some(&[0, 0, 2, 2, 0, 1, 1, 3][..]));
    let only = eod_masks(&TOKENS, 4, 0, None, sys::PTDP_EOD_RESET_ATTENTION_MASK)?;
    assert_eq!((only.labels, only.position_ids), (None, None));
    assert_eq!(only.document_starts, m.document_starts);
    let err = eod_masks(&TOKENS, 4, 0, None, sys::PTDP_EOD_MASK_LOSS).expect_err("labels needed");
    assert_eq!(err.status(), sys::PTDP_ERR_INVALID_ARGUMENT);
    assert!(err.message().contains("labels"), "{err}");
    assert!(eod_masks(&TOKENS, 3, 0, Some(&LABELS), ALL_FLAGS).is_err());
    assert_eq!(IGNORE_INDEX, -100);
    Ok(())
}

fn single_process() -> ptdp::Result<Runtime> {
    let mut ro = RuntimeOptions::defaults();
    ro.use_mpi = 0;
    Runtime::new(&ro)
}

fn tiny(vocab_size: i32, seq_length: i32) -> GptOptions {
    let mut gpt = GptOptions::defaults();
    gpt.num_layers = 2;
    gpt.hidden_size = 16;
    gpt.num_attention_heads = 4;
    gpt.seq_length = seq_length;
    gpt.vocab_size = vocab_size;
    gpt.hidden_dropout = 0.0;
    gpt.attention_dropout = 0.0;
    gpt.seed = 9;
    gpt
}

#[test]
fn masked_losses_through_the_model() -> ptdp::Result<()> {
    let runtime = single_process()?;
    let groups = Groups::new(&runtime, &ParallelOptions::defaults())?;
    let model = Model::new(&groups, &tiny(16, 4))?;
    let m = eod_masks(&TOKENS, 4, 0, Some(&LABELS), ALL_FLAGS)?;
    let labels = m.labels.clone().expect("labels");
    let none = BatchMasks::default();
    let full = model.forward_masked(&TOKENS, &LABELS, &none, 2, 0, 0, false)?;
    assert_eq!(full, model.forward(&TOKENS, &LABELS, 2, 0, 0, false)?);
    let masked = model.forward_masked(&TOKENS, &labels, &none, 2, 0, 0, false)?;
    let documents = model.forward_masked(&TOKENS, &labels, &m.batch_masks(), 2, 0, 0, false)?;
    assert!(full.is_finite() && masked.is_finite() && documents.is_finite());
    assert_ne!(masked, full);
    assert_ne!(documents, masked);
    // No counted token: loss 0, never NaN; evaluation and the backward agree.
    let ignored = [IGNORE_INDEX; 8];
    assert_eq!(
        model.forward_masked(&TOKENS, &ignored, &m.batch_masks(), 2, 0, 0, false)?,
        0.0
    );
    let close = |x: f32| (x - documents).abs() <= 1e-6 * documents.abs();
    let evaluated = model.evaluate_masked(&TOKENS, &labels, &m.batch_masks(), 2, 1)?;
    assert!(close(evaluated), "{evaluated} vs {documents}");
    let loss = model.forward_backward_masked(&TOKENS, &labels, &m.batch_masks(), 2, 0, 0, 1.0)?;
    assert!(close(loss), "{loss} vs {documents}");
    let short = [0; 3];
    let err = model
        .forward_masked(
            &TOKENS,
            &labels,
            &BatchMasks {
                position_ids: Some(&short),
                document_starts: None,
            },
            2,
            0,
            0,
            false,
        )
        .expect_err("too few position ids");
    assert!(err.message().contains("position_ids has 3 elements, not 8"), "{err}");
    Ok(())
}

fn documents(prefix: &str) -> ptdp::Result<Vec<Vec<i32>>> {
    let ds = IndexedDataset::open(prefix)?;
    (0..ds.num_documents()?).map(|i| ds.document(i)).collect()
}

#[test]
fn preprocess_and_merge_write_the_token_ids() -> ptdp::Result<()> {
    let dir = TempDir::new("preprocess");
    let input = dir.path("in.jsonl");
    fs::write(
        &input,
        "{\"text\": \"ab\", \"title\": \"T1\"}\n{\"text\": \"\", \"title\": \"T2\"}\n{\"text\": \"xyz\"}\n",
    )
    .expect("input");
    let mut args = PreprocessArgs {
        inputs: vec![input.clone()],
        output_prefix: dir.path("out"),
        workers: Some(2),
        ..Default::default()
    };
    let result = preprocess(&args)?;
    assert_eq!(
        (result.documents, result.bad_lines, result.tokens, result.dtype_code),
        (3, 0, 5, 8)
    );
    assert_eq!(result.bytes, fs::metadata(&input).expect("input").len() as i64);
    assert_eq!(
        documents(&dir.path("out_text_document"))?,
        [vec![97, 98], vec![], vec![120, 121, 122]]
    );
    assert_eq!(
        IndexedDataset::open(&dir.path("out_text_document"))?.num_sequences()?,
        2
    );

    // The third line has no "title": named with its file and line, or skipped and counted.
    args.json_keys = vec!["text".into(), "title".into()];
    let err = preprocess(&args).expect_err("a line without the key");
    assert_eq!(err.status(), sys::PTDP_ERR_INVALID_ARGUMENT);
    assert!(err.message().contains(&format!("{input}:3")), "{err}");
    args.skip_bad_lines = true;
    let result = preprocess(&args)?;
    assert_eq!((result.documents, result.bad_lines), (2, 1));
    assert_eq!(
        documents(&dir.path("out_title_document"))?,
        [vec![84, 49], vec![84, 50]]
    );

    // GPT-2 BPE with end-of-document ids.
    let tok = gpt2()?;
    let bpe = PreprocessArgs {
        inputs: vec![input.clone()],
        output_prefix: dir.path("bpe"),
        tokenizer_type: Some("GPT2BPETokenizer".into()),
        vocab_file: Some(fixture("tokenizer_gpt2_vocab.json")),
        merge_file: Some(fixture("tokenizer_gpt2_merges.txt")),
        append_eod: true,
        ..Default::default()
    };
    preprocess(&bpe)?;
    let mut want = tok.encode("ab")?;
    want.push(0);
    assert_eq!(documents(&dir.path("bpe_text_document"))?[0], want);
    assert!(documents(&dir.path("bpe_text_document"))?[1].is_empty()); // no tokens: no eod either

    // The skipping run rewrote both data sets: two documents each.
    merge_datasets(
        &[dir.path("out_text_document"), dir.path("out_title_document")],
        &dir.path("merged"),
    )?;
    assert_eq!(
        documents(&dir.path("merged"))?,
        [vec![97, 98], vec![], vec![84, 49], vec![84, 50]]
    );
    let err = merge_datasets(&[dir.path("nothing")], &dir.path("none")).expect_err("no data set");
    assert_eq!(err.status(), sys::PTDP_ERR_IO);

    let status = preprocess_main(&[
        "ptdp-preprocess-data",
        "--input",
        &input,
        "--output-prefix",
        &dir.path("cli"),
        "--tokenizer-type",
        "ByteLevel",
    ])?;
    assert_eq!(status, 0);
    assert_eq!(documents(&dir.path("cli_text_document"))?[2], [120, 121, 122]);
    assert_eq!(preprocess_main(&["ptdp-preprocess-data", "--no-such-flag"])?, 2);
    assert_eq!(
        merge_datasets_main(&["ptdp-merge-datasets", "--output-prefix", &dir.path("x")])?,
        2
    );
    Ok(())
}

fn params(model: &Model) -> ptdp::Result<Vec<(String, Vec<f32>)>> {
    (0..model.num_params()?)
        .map(|i| {
            let info = model.param_info(i)?;
            Ok((info.name.clone(), model.get_param(&info)?))
        })
        .collect()
}

#[test]
fn hugging_face_export_imports_back_exactly() -> ptdp::Result<()> {
    let dir = TempDir::new("hf");
    let runtime = single_process()?;
    let groups = Groups::new(&runtime, &ParallelOptions::defaults())?;
    let tokens: Vec<i32> = (0..16).map(|i| (i * 37 + 5) % 128).collect();
    let labels: Vec<i32> = (0..16).map(|i| (i * 53 + 11) % 128).collect();
    for (name, llama) in [("gpt2", false), ("llama", true)] {
        let mut gpt = tiny(128, 8);
        if llama {
            gpt.normalization = sys::PTDP_NORMALIZATION_RMSNORM;
            gpt.swiglu = 1;
            gpt.position_embedding_type = sys::PTDP_POSITION_EMBEDDING_ROPE;
            gpt.num_query_groups = 2;
            gpt.disable_bias_linear = 1;
            gpt.untie_embeddings_and_output_weights = 1;
            gpt.ffn_hidden_size = 32;
        }
        let a = Model::new(&groups, &gpt)?;
        let path = dir.path(name);
        hf_save(&path, &a, None, None)?;
        let (mut options, architecture) = hf_read_options(&path)?;
        let want = if llama {
            sys::PTDP_HF_ARCHITECTURE_LLAMA
        } else {
            sys::PTDP_HF_ARCHITECTURE_GPT2
        };
        assert_eq!(architecture, want);
        assert_eq!(
            (options.num_layers, options.hidden_size, options.vocab_size),
            (2, 16, 128)
        );
        options.seed = 77; // other initial values, all replaced by the load
        let b = Model::new(&groups, &options)?;
        assert_ne!(params(&b)?, params(&a)?);
        hf_load(&path, &b)?;
        assert_eq!(params(&b)?, params(&a)?, "{name}");
        assert_eq!(
            b.forward(&tokens, &labels, 2, 0, 0, false)?,
            a.forward(&tokens, &labels, 2, 0, 0, false)?
        );
    }
    // Options and refusals.
    let a = Model::new(&groups, &tiny(128, 8))?;
    let mut so = HfSaveOptions::defaults();
    so.dtype = sys::PTDP_DTYPE_BF16;
    so.max_shard_size = 4096;
    hf_save(&dir.path("shards"), &a, Some(&so), None)?;
    assert!(fs::metadata(dir.path("shards/model.safetensors.index.json")).is_ok());
    so.max_shard_size = -1;
    let err = hf_save(&dir.path("bad"), &a, Some(&so), None).expect_err("negative shard size");
    assert_eq!(err.status(), sys::PTDP_ERR_INVALID_ARGUMENT);
    assert!(err.message().contains("max_shard_size"), "{err}");
    let err = hf_read_options(&dir.path("empty")).expect_err("no config.json");
    assert_eq!(err.status(), sys::PTDP_ERR_IO);
    assert!(err.message().contains("config.json"), "{err}");
    let wrong = Model::new(&groups, &tiny(64, 8))?;
    let err = hf_load(&dir.path("gpt2"), &wrong).expect_err("another vocabulary");
    assert_eq!(err.status(), sys::PTDP_ERR_INVALID_ARGUMENT);
    assert!(err.message().contains("vocab_size"), "{err}");
    Ok(())
}
