import numpy as np
import pytest

from conftest import patterned_tokens, run_train, tiny_run_args
from data.loader import TokenWindows, TrainBatches, validation_window_ids
from data.shards import HEADER_BYTES, ShardError, open_shard, write_shard


def test_roundtrip_and_llmc_header(tmp_path):
    tokens = np.arange(1000, dtype=np.uint16) * 50
    path = str(tmp_path / "x_train_000001.bin")
    write_shard(path, tokens)
    header = np.fromfile(path, dtype="<i4", count=256)
    assert list(header[:3]) == [20240520, 1, 1000] and not header[3:].any()
    assert np.array_equal(open_shard(path), tokens)


@pytest.mark.parametrize("damage", ["magic", "truncate", "count"])
def test_corrupt_shard_is_reported_by_name(tmp_path, damage):
    path = tmp_path / "x_train_000001.bin"
    write_shard(str(path), np.arange(500, dtype=np.uint16))
    raw = bytearray(path.read_bytes())
    if damage == "magic":
        raw[0] ^= 0xFF
    elif damage == "truncate":
        raw = raw[: HEADER_BYTES + 333]
    else:
        raw[8] += 1  # the token count no longer matches the size
    path.write_bytes(bytes(raw))
    with pytest.raises(ShardError, match="x_train_000001.bin"):
        TokenWindows(str(tmp_path), "train", block_size=8, vocab_size=50304)


def test_missing_split_names_the_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        TokenWindows(str(tmp_path), "train", block_size=8, vocab_size=50304)


def test_step_batches_depend_only_on_seed_and_step(tiny_dataset):
    windows = TokenWindows(tiny_dataset, "train", block_size=32, vocab_size=50304)
    batches = TrainBatches(windows, seed=3, sequences_per_step=8)
    whole, _ = batches.micro_batch(5, 0, 8, rank=0, world_size=1)
    # Two ranks with two micro-steps of 2 sequences each see the same 8 sequences.
    parts = [batches.micro_batch(5, m, 2, rank=r, world_size=2)[0] for r in range(2) for m in range(2)]
    assert np.array_equal(np.concatenate(parts), whole.numpy())
    assert not np.array_equal(batches.micro_batch(6, 0, 8, 0, 1)[0], whole)
    x, y = batches.micro_batch(5, 0, 8, 0, 1)
    assert np.array_equal(x[:, 1:], y[:, :-1])  # targets are inputs shifted by one


def test_windows_never_cross_shards(tiny_dataset):
    windows = TokenWindows(tiny_dataset, "train", block_size=32, vocab_size=50304)
    last = np.array([windows.num_windows - 1])
    x, y = windows.gather(last)
    tail = np.asarray(windows.shards[-1][-33:])
    assert np.array_equal(np.concatenate([x[0], y[0, -1:]]), tail)


def test_validation_windows_are_fixed_and_spread(tiny_dataset):
    windows = TokenWindows(tiny_dataset, "val", block_size=32, vocab_size=50304)
    ids = validation_window_ids(windows, 16)
    assert np.array_equal(ids, validation_window_ids(windows, 16))
    assert ids[0] == 0 and ids[-1] == windows.num_windows - 1 and len(ids) == 16


# ----------------------------------------------------------------- ids beyond the model's vocabulary

BYTE_VOCAB = 264  # config/mini.py's: 256 bytes + <|endoftext|>, padded


def gpt2_like_shards(folder) -> str:
    """Train and val shards of small ids with GPT-2's <|endoftext|> (50256) before every 100th token:
    GPT-2 token shards, as a byte-vocabulary model must not read them."""
    rng = np.random.default_rng(0)
    for split, count in (("train", 6_000), ("val", 2_000)):
        tokens = patterned_tokens(rng, count)
        tokens[::100] = 50256
        write_shard(str(folder / f"gpt2_{split}_000001.bin"), tokens)
    return str(folder)


@pytest.mark.quick
def test_gather_refuses_an_id_beyond_the_vocabulary(tmp_path):
    windows = TokenWindows(gpt2_like_shards(tmp_path), "train", block_size=8, vocab_size=BYTE_VOCAB)
    windows.gather(np.array([1, 50]))  # windows without the id load: nothing is scanned up front
    with pytest.raises(ShardError) as error:
        windows.gather(np.array([1, 195]))  # the second window holds position 200
    message = str(error.value)
    assert str(tmp_path / "gpt2_train_000001.bin") in message and "token id 50256 at position 200" in message
    assert "vocab_size 264" in message and "--tokenizer" in message and "data.prepare verify" in message


def test_train_on_shards_beyond_the_vocabulary_stops_with_a_named_error(tmp_path):
    """GPT-2 token shards under a byte-tokenizer config: a named error, exit status 2, no IndexError
    traceback (on CUDA, a device-side assert) and no checkpoint."""
    data, out = gpt2_like_shards(tmp_path), tmp_path / "run"
    proc = run_train(tiny_run_args(data, str(out), tokenizer="bytes", vocab_size=BYTE_VOCAB), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "gpt2_val_000001.bin: token id 50256" in proc.stderr and "vocab_size 264" in proc.stderr
    assert not (out / "ckpt.pt").exists()
