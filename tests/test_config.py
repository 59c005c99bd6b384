import pytest

from config import ConfigError, TrainConfig, load_config


def test_file_then_overrides(tmp_path):
    path = tmp_path / "cfg.py"
    path.write_text("learning_rate = 1e-3\nmax_iters = 50\nout_dir = 'out/x'\n")
    cfg = load_config([str(path), "--max_iters=7", "--dataset=fineweb-edu", "--compile=True"])
    assert (cfg.learning_rate, cfg.max_iters, cfg.out_dir, cfg.dataset, cfg.compile) == (1e-3, 7, "out/x", "fineweb-edu", True)


def test_unknown_key_names_the_nearest_valid_one(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown config key 'learning_rat'.*'learning_rate'"):
        load_config(["--learning_rat=1e-3"])
    path = tmp_path / "cfg.py"
    path.write_text("warmup_iter = 10\n")
    with pytest.raises(ConfigError, match=r"'warmup_iter'.*'warmup_iters'"):
        load_config([str(path)])


def test_wrong_type_names_the_key():
    with pytest.raises(ConfigError, match=r"'max_iters' must be int"):
        load_config(["--max_iters=1.5"])
    with pytest.raises(ConfigError, match=r"'compile' must be bool"):
        load_config(["--compile=1"])
    with pytest.raises(ConfigError, match=r"'optimizer' is 'sgd'"):
        load_config(["--optimizer=sgd"])


def test_int_is_accepted_for_float():
    assert load_config(["--learning_rate=1"]).learning_rate == 1.0


def test_grad_accumulation_is_derived_and_checked():
    cfg = TrainConfig(total_batch_size=480 * 1024, micro_batch_size=12, block_size=1024)
    assert [cfg.grad_accum_steps(w) for w in (1, 2, 4, 8)] == [40, 20, 10, 5]
    with pytest.raises(ConfigError, match="not a multiple"):
        TrainConfig(total_batch_size=480 * 1024, micro_batch_size=16).grad_accum_steps(8)


def test_token_budget_sets_the_run_length():
    cfg = TrainConfig(total_batch_size=480 * 1024, max_tokens=5_000_000_000)
    assert cfg.total_iters() == 10173  # ceil(5e9 / 491520)
    assert TrainConfig(max_iters=123).total_iters() == 123


def test_model_args_from_preset_and_overrides():
    assert TrainConfig(model="medium").model_args()["n_layer"] == 24
    args = TrainConfig(model="medium", n_layer=2).model_args()
    assert (args["n_layer"], args["n_head"], args["n_embd"]) == (2, 16, 1024)


def test_values_out_of_range_are_refused():
    with pytest.raises(ConfigError, match="wsd_decay_frac"):
        TrainConfig(wsd_decay_frac=1.5)
    with pytest.raises(ConfigError, match="warmup_iters"):
        TrainConfig(warmup_iters=-1)
    with pytest.raises(ConfigError, match="MARS-exact"):
        TrainConfig(dtype="float16", optimizer="mars", is_approx=False)


def test_names_a_config_file_imports_are_not_settings(tmp_path):
    path = tmp_path / "cfg.py"
    path.write_text("import math\nimport os.path\nfrom math import pi, sqrt as root\n"
                    "learning_rate = pi * 1e-4\nmax_iters = int(root(100))\n")
    cfg = load_config([str(path)])
    assert cfg.learning_rate == pytest.approx(3.14159e-4, rel=1e-5) and cfg.max_iters == 10
