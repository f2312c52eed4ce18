"""Training a GPT from ptdp-train's flags, parameters as numpy arrays, checkpoints, data."""
import json
import math
import sys

import numpy as np
import pytest

import ptdp

FLAGS = ("--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64 "
         "--micro-batch-size 2 --global-batch-size 4 --train-iters 12 --lr 1e-2 --hidden-dropout 0 "
         "--attention-dropout 0 --mock-data --seed 7")


@pytest.fixture()
def config():
    with ptdp.TrainConfig(FLAGS) as c:
        yield c


def test_config_hands_out_the_option_structs(config):
    gpt = config.gpt_options()
    assert (gpt["num_layers"], gpt["hidden_size"], gpt["seq_length"], gpt["vocab_size"]) == (2, 32, 16, 64)
    assert config.optimizer_options()["lr"] == pytest.approx(1e-2)
    assert config.parallel_options()["tensor_model_parallel_size"] == 1
    settings = config.settings()
    assert settings["micro_batch_size"] == 2 and settings["train_iters"] == 12
    assert json.loads(config.to_json())["num-layers"] == 2
    assert "--num-layers" in ptdp.TrainConfig.help()


def test_bad_flag_raises_with_the_library_message():
    with pytest.raises(ptdp.InvalidArgumentError, match="ptdp_train_config_parse: unknown flag --no-such-flag"):
        ptdp.TrainConfig(["--no-such-flag", "1"])


def test_unknown_option_field_is_a_type_error(groups):
    with pytest.raises(TypeError, match="ptdp_gpt_options has no field 'hidden'"):
        ptdp.Model(groups, hidden=3)


def test_bad_model_config_raises_with_the_library_message(groups):
    with pytest.raises(ptdp.InvalidArgumentError, match="ptdp_model_create"):
        ptdp.Model(groups, hidden_size=30, num_attention_heads=4)


def train(groups, config, iterations, batch=None):
    """Trains on one repeated global batch (so the loss must fall); returns the losses."""
    settings = config.settings()
    b, gb = settings["micro_batch_size"], settings["global_batch_size"]
    with ptdp.Model(groups, config.gpt_options()) as model, \
            ptdp.Optimizer(model, config.optimizer_options()) as optimizer, \
            ptdp.Schedule("1f1b", 1, gb // b) as schedule, \
            ptdp.GPTData(config.data_options()) as data:
        tokens, labels = data.batch(0, gb) if batch is None else batch
        losses = [ptdp.train_iteration(model, optimizer, schedule, tokens, labels, b, it).loss
                  for it in range(iterations)]
    return losses


def test_training_lowers_the_loss(groups, config):
    losses = train(groups, config, 15)
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.8 * losses[0], losses


def test_bf16_from_the_flags_trains_like_fp32(groups):
    """--bf16 reaches ptdp_gpt_options.precision; the loss follows the fp32 run to bf16 round-off."""
    runs = {}
    for flag in ("", " --bf16"):
        with ptdp.TrainConfig(FLAGS + flag) as c:
            runs[flag] = (c.gpt_options()["precision"], train(groups, c, 6))
    assert runs[""][0] == 0 and runs[" --bf16"][0] == 1  # PTDP_DTYPE_F32, PTDP_DTYPE_BF16
    np.testing.assert_allclose(runs[" --bf16"][1], runs[""][1], rtol=1e-2)


def test_parameters_in_and_out_as_numpy(groups, config):
    with ptdp.Model(groups, config.gpt_options()) as model:
        infos = {p.name: p for p in model.parameters()}
        assert infos["embedding.word_embeddings.weight"].shape == (128, 32)
        name = "decoder.layers.0.mlp.linear_fc1.weight"
        out = np.empty(infos[name].shape, dtype=np.float32)
        w = model.get_param(name, out=out)
        assert w is out and np.std(w) > 0
        model.set_param(name, np.full_like(w, 0.5))
        assert np.all(model.get_param(name) == 0.5)
        with pytest.raises(ptdp.InvalidArgumentError, match="ptdp_model_set_param"):
            model.set_param(name, np.zeros(3, dtype=np.float32))
        tokens = np.arange(32, dtype=np.int32).reshape(2, 16) % 64
        model.zero_grad()
        loss = model.forward_backward(tokens, np.roll(tokens, -1, axis=1))
        assert loss > 0 and np.abs(model.get_grad(name)).sum() > 0
        assert model.logits(tokens[:1]).shape == (1, 16, 64)
        generated = model.generate([1, 2, 3], max_new_tokens=5, top_k=1)
        assert generated.dtype == np.int32 and len(generated) == 5
        with pytest.raises(ptdp.InvalidArgumentError, match="ptdp_model_forward"):
            model.forward(np.full((2, 16), 999), tokens)  # ids outside the vocabulary


def test_checkpoint_round_trip(groups, config, tmp_path):
    settings = config.settings()
    with ptdp.Model(groups, config.gpt_options()) as model, \
            ptdp.Optimizer(model, config.optimizer_options()) as optimizer, \
            ptdp.Schedule("1f1b", 1, 2) as schedule, ptdp.GPTData(config.data_options()) as data:
        tokens, labels = data.batch(0, settings["global_batch_size"])
        for it in range(2):
            ptdp.train_iteration(model, optimizer, schedule, tokens, labels, 2, it)
        ptdp.save_checkpoint(tmp_path, model, optimizer, config, iteration=2, consumed_train_samples=8)
        saved = model.state_dict()
        next_loss = ptdp.train_iteration(model, optimizer, schedule, tokens, labels, 2, 2).loss
    options, iteration = ptdp.read_checkpoint_options(tmp_path)
    assert iteration == 2 and options["hidden_size"] == 32
    with ptdp.Model(groups, options) as model, ptdp.Optimizer(model, config.optimizer_options()) as optimizer, \
            ptdp.Schedule("1f1b", 1, 2) as schedule:
        state = ptdp.load_checkpoint(tmp_path, model, optimizer)
        assert state == ptdp.CheckpointState(2, 8, 0)
        assert all(np.array_equal(v, model.get_param(k)) for k, v in saved.items())
        assert ptdp.train_iteration(model, optimizer, schedule, tokens, labels, 2, 2).loss == pytest.approx(next_loss)
    with pytest.raises(ptdp.FileError):
        ptdp.read_checkpoint_options(tmp_path / "missing")


def test_runtime_and_groups(runtime, groups):
    assert (runtime.rank, runtime.size) == (0, 1) or runtime.size > 1
    assert groups.size(ptdp.GroupKind.TENSOR) == 1
    assert groups.members(ptdp.GroupKind.WORLD) == list(range(runtime.size))
    assert ptdp.layout_members(8, 5, ptdp.GroupKind.DATA, tensor=2, pipeline=2) == [5, 7]
    with pytest.raises(ptdp.InvalidArgumentError, match="ptdp_layout_members"):
        ptdp.layout_members(6, 0, ptdp.GroupKind.WORLD, tensor=4)
    t = ptdp.Tensor(np.ones(3, dtype=np.float32))
    work = groups.all_reduce(t, ptdp.GroupKind.WORLD, nonblocking=True)
    work.wait()
    work.close()
    assert np.all(t.numpy() == runtime.size)


def test_trainer_reports_every_iteration_and_stops_on_request(runtime, tmp_path):
    seen = []

    def watch(report):
        seen.append(report)
        return report.iteration >= 4  # stop after the fourth iteration

    flags = FLAGS + f" --save {tmp_path / 'ckpt'} --log-interval 100"
    with ptdp.Trainer(flags, on_iteration=watch, runtime=runtime, print_log=False) as trainer:
        last = trainer.run()
    assert [r.iteration for r in seen] == [1, 2, 3, 4]
    assert all(r.global_batch_size == 4 and r.consumed_samples == 4 * r.iteration for r in seen)
    assert all(math.isfinite(r.lm_loss) for r in seen)
    assert all(r.mfu > 0 and r.peak_flops > 0 and r.model_flops > 0 for r in seen)
    assert last.iteration == 4 and last.saved
    assert (tmp_path / "ckpt" / "iter_0000004" / "metadata.json").exists()


def test_trainer_callback_errors_stop_the_run_and_are_raised(runtime):
    def broken(report):
        raise ValueError(f"no good at iteration {report.iteration}")

    with ptdp.Trainer(FLAGS, on_iteration=broken, runtime=runtime, print_log=False) as trainer:
        with pytest.raises(ValueError, match="no good at iteration 1"):
            trainer.run()
        assert trainer.last_report.iteration == 1


def test_train_runs_ptdp_train_and_returns_its_exit_status(tmp_path, capfd):
    log = tmp_path / "log.jsonl"
    assert ptdp.train(FLAGS.split() + ["--log-json", str(log), "--log-interval", "6", "--train-iters", "6"]) == 0
    out = capfd.readouterr().out
    assert "iteration        6/       6" in out and "training done: 6 iterations" in out
    lines = [json.loads(l) for l in log.read_text().splitlines()]
    assert [l["iteration"] for l in lines] == [1, 2, 3, 4, 5, 6]
    assert ptdp.train(["--hidden-size", "abc"]) == 2
    assert "--hidden-size" in capfd.readouterr().err


def test_supervise_relaunches_a_failing_job_from_save(tmp_path):
    attempts = tmp_path / "attempts"
    # Fails on attempts 0 and 1, succeeds on attempt 2; records what each attempt was given.
    script = ("import os, sys\n"
              f"open({str(attempts)!r}, 'a').write(os.environ['PTDP_RESTART_ATTEMPT'] + ' ' + ' '.join(sys.argv[1:]) + '\\n')\n"
              "sys.exit(0 if os.environ['PTDP_RESTART_ATTEMPT'] == '2' else 1)\n")
    ck = str(tmp_path / "ck")
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "latest_checkpointed_iteration.txt").write_text("1\n")  # relaunches resume from it
    command = [sys.executable, "-c", script, "--save", ck, "--max-restarts", "3"]
    assert ptdp.supervise(command, max_restarts=3, backoff_seconds=0) == 0
    assert attempts.read_text().splitlines() == [f"0 --save {ck}", f"1 --save {ck} --load {ck}",
                                                 f"2 --save {ck} --load {ck}"]
    assert ptdp.supervise([sys.executable, "-c", "raise SystemExit(7)", "--save", ck], max_restarts=1,
                          backoff_seconds=0) == 5
    with pytest.raises(ptdp.InvalidArgumentError, match="max_restarts = -1"):
        ptdp.supervise(command, max_restarts=-1)
    with pytest.raises(ptdp.InvalidArgumentError, match="no --save DIR"):
        ptdp.supervise([sys.executable, "-c", "pass"], max_restarts=2)
