"""The README's first command: the stdlib corpus is prepared and a small GPT trains on it."""

import subprocess

import numpy as np

from conftest import PYTHON, REPO, run_train
from data.quickstart import stdlib_files
from data.shards import open_shard
from data.tokenizer import EOT_TOKEN, get_encoding


def test_quickstart_corpus_and_a_short_training(tmp_path):
    data = tmp_path / "stdlib"
    subprocess.run([PYTHON, "-m", "data.quickstart", "--out", str(data)], check=True, cwd=REPO)
    train = open_shard(str(data / "stdlib_train_000001.bin"))
    val = open_shard(str(data / "stdlib_val_000000.bin"))
    assert len(train) > 2_000_000 and len(val) > 10_000
    assert train[0] == EOT_TOKEN and val[0] == EOT_TOKEN
    # File 0 (and every 50th) is in val: its first document decodes to that file, byte for byte.
    val_tokens = np.asarray(val)
    end = int(np.flatnonzero(val_tokens == EOT_TOKEN)[1])
    with open(stdlib_files()[0], encoding="utf-8", errors="replace") as f:
        assert get_encoding().decode(val_tokens[1:end].tolist()) == f.read()
    proc = run_train([str(REPO / "config" / "quickstart.py"), f"--data_dir={data}", f"--out_dir={tmp_path / 'out'}",
                      "--max_iters=20", "--eval_interval=20", "--log_interval=10", "--sample_tokens=20",
                      "--micro_batch_size=4", "--total_batch_size=512", "--warmup_iters=5",
                      "--eval_sequences=16"])  # (the config's 128: 32 forwards of GPT-2's 50304 logits an evaluation)
    val_lines = [line for line in proc.stdout.splitlines() if "val loss" in line]
    first, last = (float(line.split()[-1]) for line in (val_lines[0], val_lines[-1]))
    assert last < first - 2.0
    assert "---- sample ----" in proc.stdout


def test_the_quickstart_says_what_it_installs_before_it_installs(tmp_path):
    """scripts/quickstart.sh, its python3 a stand-in that records each command (no torch: the first install runs):
    a line saying what is being installed comes before each pip command, which is quiet for a minute or two on a
    fresh machine."""
    log = tmp_path / "calls"
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    fake.write_text(f'#!/usr/bin/env bash\necho "python3 $*" >> {log}\necho "ran: python3 $*"\n'
                    '[[ "$1" == "-c" ]] && exit 1\nexit 0\n')  # (import torch fails: torch must be installed)
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(["bash", str(REPO / "scripts" / "quickstart.sh")], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    torch_install = lines.index("ran: python3 -m pip install torch==2.13.0")
    requirements = lines.index("ran: python3 -m pip install --quiet -r requirements.txt")
    assert lines[torch_install - 1].startswith("installing torch 2.13.0"), lines
    assert lines[requirements - 1].startswith("installing requirements.txt"), lines
