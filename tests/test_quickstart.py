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
