import numpy as np
import pytest

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
        TokenWindows(str(tmp_path), "train", block_size=8)


def test_missing_split_names_the_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        TokenWindows(str(tmp_path), "train", block_size=8)


def test_step_batches_depend_only_on_seed_and_step(tiny_dataset):
    windows = TokenWindows(tiny_dataset, "train", block_size=32)
    batches = TrainBatches(windows, seed=3, sequences_per_step=8)
    whole, _ = batches.micro_batch(5, 0, 8, rank=0, world_size=1)
    # Two ranks with two micro-steps of 2 sequences each see the same 8 sequences.
    parts = [batches.micro_batch(5, m, 2, rank=r, world_size=2)[0] for r in range(2) for m in range(2)]
    assert np.array_equal(np.concatenate(parts), whole.numpy())
    assert not np.array_equal(batches.micro_batch(6, 0, 8, 0, 1)[0], whole)
    x, y = batches.micro_batch(5, 0, 8, 0, 1)
    assert np.array_equal(x[:, 1:], y[:, :-1])  # targets are inputs shifted by one


def test_windows_never_cross_shards(tiny_dataset):
    windows = TokenWindows(tiny_dataset, "train", block_size=32)
    last = np.array([windows.num_windows - 1])
    x, y = windows.gather(last)
    tail = np.asarray(windows.shards[-1][-33:])
    assert np.array_equal(np.concatenate([x[0], y[0, -1:]]), tail)


def test_validation_windows_are_fixed_and_spread(tiny_dataset):
    windows = TokenWindows(tiny_dataset, "val", block_size=32)
    ids = validation_window_ids(windows, 16)
    assert np.array_equal(ids, validation_window_ids(windows, 16))
    assert ids[0] == 0 and ids[-1] == windows.num_windows - 1 and len(ids) == 16
