import dataclasses
import json
import re
import subprocess

import pytest

from config import ConfigError, TrainConfig, settable_keys
from conftest import PYTHON, REPO
from config.models import PRESETS
from optim import HYPERPARAMETERS, OPTIMIZERS, help_text, load_config


def test_file_then_overrides(tmp_path):
    path = tmp_path / "cfg.py"
    path.write_text("learning_rate = 1e-3\nmax_iters = 50\nout_dir = 'out/x'\n")
    cfg = load_config([str(path), "--max_iters=7", "--dataset=fineweb-edu", "--compile=True"])
    assert (cfg.learning_rate, cfg.max_iters, cfg.out_dir, cfg.dataset, cfg.compile) == (1e-3, 7, "out/x", "fineweb-edu", True)


@pytest.mark.quick
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


@pytest.mark.quick
def test_values_out_of_range_are_refused():
    with pytest.raises(ConfigError, match="wsd_decay_frac"):
        TrainConfig(wsd_decay_frac=1.5)
    with pytest.raises(ConfigError, match="warmup_iters"):
        TrainConfig(warmup_iters=-1)
    with pytest.raises(ConfigError, match="MARS-exact"):
        load_config(["--dtype=float16", "--optimizer=mars", "--is_approx=False"])
    with pytest.raises(ConfigError, match=r"'beta2' must be in \[0, 1\), got 1.0"):  # an optimizer's own range
        load_config(["--optimizer=mars", "--beta2=1.0"])
    with pytest.raises(ConfigError, match="'mars_type' is 'mars-sgd'; choose one of mars-adamw"):
        load_config(["--optimizer=mars", "--mars_type=mars-sgd"])


def test_a_key_the_chosen_optimizer_does_not_read_is_refused():
    """--optimizer=moonlight --lr_1d=... was silently ignored: lr_1d is MARS's and Muon's."""
    with pytest.raises(ConfigError, match="'lr_1d' is a setting of mars, muon(, [a-z-]+)*, not of the chosen "
                                          "optimizer 'moonlight'"):
        load_config(["--optimizer=moonlight", "--lr_1d=1e-3"])
    with pytest.raises(ConfigError, match="unknown config key 'lr_1dd' \\(did you mean 'lr_1d'\\?\\)"):
        load_config(["--optimizer=moonlight", "--lr_1dd=1e-3"])
    cfg = load_config(["--optimizer=muon", "--lr_1d=1e-3"])
    assert cfg.hyperparameters.lr_1d == 1e-3 and cfg.to_dict()["lr_1d"] == 1e-3 and "gamma" not in cfg.to_dict()


def test_names_a_config_file_imports_are_not_settings(tmp_path):
    path = tmp_path / "cfg.py"
    path.write_text("import math\nimport os.path\nfrom math import pi, sqrt as root\n"
                    "learning_rate = pi * 1e-4\nmax_iters = int(root(100))\n")
    cfg = load_config([str(path)])
    assert cfg.learning_rate == pytest.approx(3.14159e-4, rel=1e-5) and cfg.max_iters == 10


def test_bad_optimizer_values_and_includes_are_named(tmp_path):
    with pytest.raises(ConfigError, match="config key 'optimizer' is \\['adamw'\\]; choose one of adamw"):
        load_config(["--optimizer=['adamw']"])
    (tmp_path / "run.py").write_text('include = ["missing.py"]\n')
    with pytest.raises(ConfigError, match="config file .*run.py includes missing.py: cannot read config file"):
        load_config([str(tmp_path / "run.py")])
    with pytest.raises(ConfigError, match="'shampoo_beta' must be -1 \\(beta2\\) or in \\[0, 1\\)"):
        load_config(["--optimizer=soap", "--shampoo_beta=-0.5"])


def test_train_help_lists_every_key_preset_and_optimizer():
    """python train.py --help (and -h): the usage, every loop key of the schema, every model preset and every
    optimizer of the registry; with an optimizer named (an override or a config file), its own keys, each with
    its default and range. In step with the schema and the registry: read from them."""
    proc = subprocess.run([PYTHON, "train.py", "-h", "config/gpt2_small_mars.py"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: python train.py"), proc.stderr
    assert all(f"--{name}=" in proc.stdout for name in settable_keys(TrainConfig))
    assert all(f"    {name}: " in proc.stdout for name in PRESETS) and all(name in proc.stdout for name in OPTIMIZERS)
    assert "mars's own keys:" in proc.stdout and "--gamma=0.025  (float in [0.0, inf])" in proc.stdout
    for name, schema in HYPERPARAMETERS.items():
        text = help_text(["--help", f"--optimizer={name}"])
        assert all(f"--{f.name}={f.default!r}  (" in text for f in dataclasses.fields(schema)), name


def test_help_lists_only_keys_the_loader_accepts():
    """Every --key=value line of the help, the loop's and each optimizer's own, is a key load_config reads, its
    value as written (TrainConfig.hyperparameters, which load_config fills, is not one)."""
    for name in HYPERPARAMETERS:
        lines = re.findall(r"^    (--\w+=.*?)  \(", help_text(["--help", f"--optimizer={name}"]), re.MULTILINE)
        assert lines and not any(line.startswith("--hyperparameters=") for line in lines)
        for line in lines:
            try:  # (a default may not fit the others' defaults: Schedule-Free's lr_schedule)
                load_config([f"--optimizer={name}"] + ([line] if not line.startswith("--optimizer=") else []))
            except ConfigError as e:
                assert "unknown config key" not in str(e) and "not of the chosen optimizer" not in str(e), line


def test_help_after_config_files_shows_their_values_and_print_config_the_resolved_config(tmp_path):
    """python train.py FILE --key=value --help shows the values the file and the overrides set, each marked
    with where it came from and the default; --print_config prints the resolved config as config.json records
    it (the model as built: a Llama's bias=False) and exits 0 without starting the run."""
    proc = subprocess.run([PYTHON, "train.py", "config/gpt2_small_mars.py", "--warmup_iters=5", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "--learning_rate=0.006  (float)  [from config/gpt2_small_mars.py; default 0.0006]" in proc.stdout
    assert "--warmup_iters=5  (int)  [override; default 2000]" in proc.stdout
    assert "--beta1=0.95  (float in [0.0, 1.0))  [from config/gpt2_small_mars.py; default 0.9]" in proc.stdout
    assert "--seed=1337  (int)  fixes" in proc.stdout and "hyperparameters" not in proc.stdout
    out_dir = tmp_path / "run"
    args = ["config/llama_124m_mars.py", "--max_iters=3", f"--out_dir={out_dir}"]
    proc = subprocess.run([PYTHON, "train.py", *args, "--print_config"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    assert printed == json.loads(json.dumps(load_config(args).to_dict()))
    assert (printed["max_iters"], printed["learning_rate"], printed["bias"]) == (3, 0.003, False)
    assert not out_dir.exists()
    proc = subprocess.run([PYTHON, "train.py", *args, "--learning_rat=1", "--print_config"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown config key 'learning_rat'" in proc.stderr and not proc.stdout


@pytest.mark.quick
def test_help_lists_every_schedule_and_an_export_folder_is_ignored():
    """train.py --help's schedule line names every lr_schedule choice (onecycle was missing); the folder
    docs/evaluation.md exports into (hf/) is ignored by git, as out/ is."""
    from config import CHOICES
    from optim import help_text

    schedule_line = next(line for line in help_text([]).splitlines() if "learning-rate schedule" in line)
    assert all(choice in schedule_line for choice in CHOICES["lr_schedule"]), schedule_line
    assert subprocess.run(["git", "check-ignore", "-q", "hf/model.safetensors"], cwd=REPO).returncode == 0
