"""data/prepare.py on small local datasets in the hub's schemas, read through the same `datasets`
streaming path: round trip, shard boundaries, splits, resume after a crash, worker counts, verify,
bad input."""

import glob
import json
import os
import random
import shutil
import signal
import subprocess

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import PYTHON, run_train, tiny_run_args
from data import prepare as p
from data.loader import TokenWindows
from data.shards import HEADER_BYTES, ShardError, open_shard, write_shard
from data.tokenizer import EOT_TOKEN, get_encoding

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARD_SIZE = 400  # tokens: small, so a few dozen documents make many shards
FINEWEB_COLUMNS = ["text", "id", "dump", "url", "date", "file_path", "language", "language_score",
                   "token_count", "score", "int_score"]


def make_documents(count: int, seed: int) -> list[str]:
    """Varied documents: empty, long (spanning shards), unicode, a literal <|endoftext|>, whitespace runs."""
    rng = random.Random(seed)
    words = ["the", "optimizer", "MARS", "variance", "reduction", "naïve", "café", "東京", "🙂", "\n\n", "  ",
             "<|endoftext|>", "GPT-2", "1,234.5", "—", "tab\there", "Ünïcödé"]
    docs = ["", "<|endoftext|>", " leading space", "a" * 3000]
    while len(docs) < count:
        docs.append(" ".join(rng.choice(words) for _ in range(rng.randint(1, 250))) + f" #{len(docs)}")
    return docs


def write_fineweb_parquet(folder, docs: list[str], files: int = 3) -> list[str]:
    """FineWeb-Edu's schema, split over several parquet files with small row groups."""
    paths = []
    for i, part in enumerate(np.array_split(np.arange(len(docs)), files)):
        rows = [docs[j] for j in part]
        table = pa.table({
            "text": rows, "id": [f"<urn:uuid:{j}>" for j in part], "dump": ["CC-MAIN-2024-10"] * len(rows),
            "url": [f"https://example.org/{j}" for j in part], "date": ["2024-02-20T00:00:00Z"] * len(rows),
            "file_path": ["s3://commoncrawl/x.warc.gz"] * len(rows), "language": ["en"] * len(rows),
            "language_score": [0.95] * len(rows), "token_count": [len(r) for r in rows],
            "score": [3.2] * len(rows), "int_score": [3] * len(rows),
        })
        assert table.column_names == FINEWEB_COLUMNS
        paths.append(str(folder / f"train-{i:05d}.parquet"))
        pq.write_table(table, paths[-1], row_group_size=7)
    return paths


def write_jsonl(path, rows: list[dict]) -> str:
    with open(path, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return str(path)


def fineweb_source(files: list[str]) -> p.Source:
    return p.Source("fineweb-edu10B", "HuggingFaceFW/fineweb-edu", "sample-10BT", tuple(files), "text",
                    p.LeadingDocuments(tokens=SHARD_SIZE))


def openwebtext_source(files: list[str], fraction: float = 0.2) -> p.Source:
    return p.Source("openwebtext", "Skylion007/openwebtext", None, tuple(files), "text",
                    p.HeldOutFraction(fraction, seed=2357))


def split_tokens(out_dir, split: str) -> list[np.ndarray]:
    """A split's shards, in the loader's order (sorted glob)."""
    return [np.array(open_shard(path)) for path in sorted(glob.glob(os.path.join(out_dir, f"*_{split}_*.bin")))]


def token_stream(docs: list[str]) -> np.ndarray:
    """The reference: each document preceded by <|endoftext|>, encoded directly with tiktoken."""
    enc = get_encoding()
    return np.array([t for doc in docs for t in [EOT_TOKEN, *enc.encode_ordinary(doc)]], dtype=np.uint16)


def documents_of(shards: list[np.ndarray]) -> list[str]:
    """Decode a split: cut its token stream before each <|endoftext|> token, decode each document."""
    stream = np.concatenate(shards)
    starts = np.flatnonzero(stream == EOT_TOKEN)
    assert len(stream) == 0 or starts[0] == 0, "a split's stream starts with the delimiter"
    return [get_encoding().decode(doc[1:].tolist()) for doc in np.split(stream, starts[1:])]


def folder_bytes(folder) -> dict[str, bytes]:
    return {os.path.basename(f): open(f, "rb").read() for f in sorted(glob.glob(os.path.join(folder, "*")))}


@pytest.fixture(scope="module")
def fineweb(tmp_path_factory):
    """Local FineWeb-Edu parquet files and their uninterrupted preparation (1 worker)."""
    folder = tmp_path_factory.mktemp("fineweb")
    docs = make_documents(60, seed=1)
    files = write_fineweb_parquet(folder, docs)
    out = folder / "out"
    p.prepare(fineweb_source(files), str(out), shard_size=SHARD_SIZE, workers=1, batch_size=8)
    return docs, files, out


def test_fineweb_round_trip_and_shard_boundaries(fineweb):
    docs, files, out = fineweb
    val, train = split_tokens(out, "val"), split_tokens(out, "train")
    manifest = json.load(open(out / "manifest.json"))
    val_docs = manifest["splits"]["val"]["documents"]
    assert len(val) == 1 and 0 < val_docs < len(docs), "val is the leading documents, one shard's worth"
    assert len(val[0]) <= SHARD_SIZE < len(val[0]) + len(token_stream(docs[val_docs : val_docs + 1]))
    # The shards hold exactly the reference token stream: nothing lost, added or split at a boundary.
    assert np.array_equal(np.concatenate(val), token_stream(docs[:val_docs]))
    assert np.array_equal(np.concatenate(train), token_stream(docs[val_docs:]))
    assert get_encoding().decode(np.concatenate(val + train).tolist()) == "".join("<|endoftext|>" + d for d in docs)
    # Every train shard but the last is full, and documents do span shards (no shard starts with EOT).
    assert all(len(s) == SHARD_SIZE for s in train[:-1]) and 0 < len(train[-1]) <= SHARD_SIZE
    assert any(s[0] != EOT_TOKEN for s in train[1:])
    assert manifest["complete"] and manifest["documents"] == len(docs)
    assert manifest["tokens"] == sum(map(len, val + train))
    assert sorted(os.listdir(out)) == sorted(["fineweb-edu10B_val_000000.bin", "manifest.json"]
                                             + [f"fineweb-edu10B_train_{i:06d}.bin" for i in range(1, len(train) + 1)])
    assert p.verify(str(out)) == []


def test_openwebtext_held_out_split_is_disjoint_and_order_independent(tmp_path):
    docs = make_documents(120, seed=2)
    forward = write_jsonl(tmp_path / "owt.jsonl", [{"text": d} for d in docs])
    backward = write_jsonl(tmp_path / "owt_reversed.jsonl", [{"text": d} for d in reversed(docs)])
    splits = {}
    for name, path in (("forward", forward), ("backward", backward)):
        p.prepare(openwebtext_source([path]), str(tmp_path / name), shard_size=SHARD_SIZE, workers=1)
        for split in p.SPLITS:
            splits[name, split] = documents_of(split_tokens(tmp_path / name, split))
    val, train = splits["forward", "val"], splits["forward", "train"]
    assert 10 < len(val) < 45, "about 20% of 120 documents held out"
    assert sorted(val + train) == sorted(docs)
    assert not set(val) & set(train), "val and train overlap"
    # Each split keeps the stream's order.
    assert val == [d for d in docs if d in set(val)] and train == [d for d in docs if d in set(train)]
    # Chosen by content: reversing the corpus reverses each split but picks the same documents.
    assert splits["backward", "val"] == val[::-1] and splits["backward", "train"] == train[::-1]


def test_text_files_one_document_per_txt_file(tmp_path):
    docs = ["First file.\nTwo lines.\n", "Second file, no newline", "Third 🙂\n\n"] + make_documents(20, seed=3)[4:]
    for i, doc in enumerate(docs):
        (tmp_path / f"doc{i:03d}.txt").write_text(doc, encoding="utf-8")
    source = p.Source("mytext", None, None, p.local_files([str(tmp_path / "*.txt")]), "text",
                      p.HeldOutFraction(0.3, seed=2357))
    p.prepare(source, str(tmp_path / "out"), shard_size=SHARD_SIZE, workers=1)
    out = tmp_path / "out"
    assert sorted(documents_of(split_tokens(out, "val")) + documents_of(split_tokens(out, "train"))) == sorted(docs)


@pytest.mark.quick
def test_one_and_two_workers_write_identical_bytes(fineweb, tmp_path):
    _, files, out = fineweb
    p.prepare(fineweb_source(files), str(tmp_path / "two"), shard_size=SHARD_SIZE, workers=2, batch_size=5)
    assert folder_bytes(tmp_path / "two") == folder_bytes(out)


def test_hub_path_streams_the_named_dataset_and_subset(fineweb, tmp_path, monkeypatch):
    """Without --files the source is load_dataset(id, name=subset, split='train', streaming=True)."""
    _, files, out = fineweb
    calls, load_dataset = [], datasets.load_dataset

    def hub_from_local_files(path, name=None, **kwargs):
        calls.append((path, name, kwargs))
        return load_dataset("parquet", data_files=files, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", hub_from_local_files)
    hub = p.Source("fineweb-edu10B", "HuggingFaceFW/fineweb-edu", "sample-10BT", (), "text",
                   p.LeadingDocuments(tokens=SHARD_SIZE))
    p.prepare(hub, str(tmp_path / "hub"), shard_size=SHARD_SIZE, workers=1)
    assert calls == [("HuggingFaceFW/fineweb-edu", "sample-10BT", dict(split="train", streaming=True))]
    shards = lambda folder: {k: v for k, v in folder_bytes(folder).items() if k.endswith(".bin")}  # noqa: E731
    assert shards(tmp_path / "hub") == shards(out)


def test_cli_defaults_match_the_documented_sources(monkeypatch):
    captured = []
    monkeypatch.setattr(p, "prepare", lambda source, out, **kw: captured.append((source, out, kw)))
    assert p.main(["openwebtext"]) == 0
    assert p.main(["fineweb-edu", "--subset", "sample-100BT", "--shard-size", "1000", "--workers", "3"]) == 0
    (owt, owt_out, _), (fw, fw_out, fw_kw) = captured
    assert (owt.dataset, owt.subset, owt.val_rule) == ("Skylion007/openwebtext", None, p.HeldOutFraction(0.0005, 2357))
    assert (fw.dataset, fw.subset) == ("HuggingFaceFW/fineweb-edu", "sample-100BT")
    assert fw.val_rule == p.LeadingDocuments(1000)
    assert fw_kw == dict(shard_size=1000, workers=3)
    assert owt_out == os.path.join(REPO, "data", "openwebtext") and fw_out == os.path.join(REPO, "data", "fineweb-edu100B")


# -----------------------------------------------------------------------------
# Interrupted runs


@pytest.mark.parametrize("crash", ["before", "after"])
def test_crash_at_every_write_then_rerun_gives_identical_bytes(fineweb, tmp_path, monkeypatch, crash):
    """An exception at a durable write (shard, pending buffer, manifest), before or after it lands: at each
    of the first and last few writes, and every 7th between."""
    _, files, reference = fineweb
    real = {"write_shard": p.write_shard, "write_manifest": p.write_manifest}
    writes = [0]

    def install(fail_at: int | None):
        for name, function in real.items():
            def wrapped(*args, function=function):
                writes[0] += 1
                if writes[0] == fail_at and crash == "before":
                    raise RuntimeError("injected crash")
                function(*args)
                if writes[0] == fail_at and crash == "after":
                    raise RuntimeError("injected crash")
            monkeypatch.setattr(p, name, wrapped)

    install(None)
    p.prepare(fineweb_source(files), str(tmp_path / "count"), shard_size=SHARD_SIZE, workers=1, batch_size=8)
    total, resumed = writes[0], 0
    fail_points = sorted({*range(1, 7), *range(7, total - 5, 7), *range(total - 5, total + 1)})
    for fail_at in fail_points:
        out = str(tmp_path / f"crash{fail_at}")
        writes[0] = 0
        install(fail_at)
        with pytest.raises(RuntimeError, match="injected crash"):
            p.prepare(fineweb_source(files), out, shard_size=SHARD_SIZE, workers=1, batch_size=8)
        manifest = p.read_manifest(out)
        resumed += manifest is not None and not manifest["complete"]
        install(None)
        p.prepare(fineweb_source(files), out, shard_size=SHARD_SIZE, workers=1, batch_size=8)
        assert folder_bytes(out) == folder_bytes(reference), f"crash {crash} write {fail_at} of {total}"
    assert total > 20 and resumed > len(fail_points) // 2, "most crashes should leave a checkpoint to resume from"


KILL_SCRIPT = """
import functools, os, signal, sys
import data.prepare as p
real, calls = p.write_shard, [0]
def write_then_die(path, tokens):
    real(path, tokens)
    calls[0] += path.endswith(".bin")
    if calls[0] == {kill_after}:
        os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no finally: a power cut
p.write_shard = write_then_die
p.prepare = functools.partial(p.prepare, batch_size=4)  # checkpoints every few documents
sys.exit(p.main(sys.argv[1:]))
"""


def test_killed_process_resumes_to_identical_bytes(fineweb, tmp_path):
    """SIGKILL of a 2-worker run right after its 20th shard lands; the plain CLI rerun (other batch size)
    finishes the same bytes."""
    _, files, reference = fineweb
    out = str(tmp_path / "killed")
    args = ["fineweb-edu", "--subset", "sample-10BT", "--files", *files, "--out", out, "--shard-size", str(SHARD_SIZE),
            "--workers", "2"]
    env = dict(os.environ)
    killed = subprocess.run([PYTHON, "-c", KILL_SCRIPT.format(kill_after=20), *args],
                            env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert len(glob.glob(os.path.join(out, "*.bin"))) == 20
    rerun = subprocess.run([PYTHON, "-m", "data.prepare", *args],
                           env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "resuming" in rerun.stdout
    assert folder_bytes(out) == folder_bytes(reference)


def test_training_refuses_a_folder_whose_preparation_was_killed(fineweb, tmp_path):
    """train.py on the shards of a SIGKILLed prepare: a named error saying how to finish, not a run on
    part of the data. A finished folder (and one without a manifest, as the other tests' data) passes."""
    _, files, reference = fineweb
    out = str(tmp_path / "killed")
    args = ["fineweb-edu", "--subset", "sample-10BT", "--files", *files, "--out", out, "--shard-size", str(SHARD_SIZE),
            "--workers", "1"]
    killed = subprocess.run([PYTHON, "-c", KILL_SCRIPT.format(kill_after=8), *args],
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    proc = run_train(tiny_run_args(out, str(tmp_path / "run"), max_iters=2), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{out} is only partly prepared" in proc.stderr and "python -m data.prepare command again" in proc.stderr
    assert not os.path.exists(tmp_path / "run")
    p.check_complete(str(reference))


# -----------------------------------------------------------------------------
# verify, and the loader, on damaged shards


@pytest.fixture
def damaged(fineweb, tmp_path):
    """A copy of the prepared folder, and the path of its second train shard, to damage."""
    out = tmp_path / "copy"
    shutil.copytree(fineweb[2], out)
    return str(out), str(out / "fineweb-edu10B_train_000002.bin")


def flip_byte(path):
    with open(path, "r+b") as f:
        f.seek(HEADER_BYTES + 11)
        byte = f.read(1)
        f.seek(HEADER_BYTES + 11)
        f.write(bytes([byte[0] ^ 0x01]))


def truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 6)


def wrong_header(path):
    with open(path, "r+b") as f:
        f.write(np.array([20240521], dtype="<i4").tobytes())  # the magic number, off by one


@pytest.mark.parametrize("damage, problem, loader_refuses", [
    (flip_byte, "sha256 differs", False),  # only the checksum can see a changed token
    (truncate, "truncated or corrupt", True),
    (wrong_header, "not a token shard", True),
])
def test_verify_names_the_damaged_shard(damaged, capsys, damage, problem, loader_refuses):
    out, shard = damaged
    damage(shard)
    problems = p.verify(out)
    assert len(problems) == 1 and problems[0].startswith(shard) and problem in problems[0]
    assert p.main(["verify", out]) == 1
    assert shard in capsys.readouterr().err
    if loader_refuses:
        with pytest.raises(ShardError, match="fineweb-edu10B_train_000002.bin"):
            TokenWindows(out, "train", block_size=8, vocab_size=50304)


def test_verify_catches_out_of_range_tokens_and_unlisted_shards(damaged):
    out, shard = damaged
    write_shard(shard, np.full(SHARD_SIZE, 50300, dtype=np.uint16))  # a valid shard of invalid tokens
    manifest = p.read_manifest(out)
    manifest["splits"]["train"]["shards"][1]["sha256"] = p.file_sha256(shard)
    p.write_manifest(out, manifest)
    write_shard(os.path.join(out, "fineweb-edu10B_train_000099.bin"), np.zeros(3, dtype=np.uint16))
    problems = p.verify(out)
    assert len(problems) == 2
    assert problems[0].startswith(shard) and "50300" in problems[0]
    assert "train_000099.bin: not in the manifest" in problems[1]


def test_verify_refuses_an_incomplete_or_missing_manifest(damaged):
    out, _ = damaged
    manifest = p.read_manifest(out)
    p.write_manifest(out, dict(manifest, complete=False, documents_read=7))
    assert "incomplete" in p.verify(out)[0]
    os.remove(os.path.join(out, "manifest.json"))
    assert "manifest.json: missing" in p.verify(out)[0]


def test_verify_cli_passes_a_good_folder(fineweb):
    assert p.main(["verify", str(fineweb[2])]) == 0


# -----------------------------------------------------------------------------
# Bad input: a clear error, and nothing already written is lost


def prepare_error(source: p.Source, out) -> str:
    with pytest.raises(p.PrepareError) as error:
        p.prepare(source, str(out), shard_size=SHARD_SIZE, workers=1)
    return str(error.value)


def test_empty_corpus(tmp_path):
    empty = write_jsonl(tmp_path / "empty.jsonl", [])
    assert "corpus is empty" in prepare_error(openwebtext_source([empty]), tmp_path / "out")
    assert not glob.glob(str(tmp_path / "out" / "*.bin"))
    # Nothing was written, so a run on other files may use the folder.
    good = write_jsonl(tmp_path / "good.jsonl", [{"text": d} for d in make_documents(20, seed=4)])
    p.prepare(openwebtext_source([good]), str(tmp_path / "out"), shard_size=SHARD_SIZE, workers=1)


def test_missing_text_column(tmp_path):
    path = write_jsonl(tmp_path / "body.jsonl", [{"body": "a document"}])
    message = prepare_error(openwebtext_source([path]), tmp_path / "out")
    assert path in message and "no 'text' column" in message and "--text-column" in message


def test_unreadable_file_is_named_and_earlier_shards_survive(fineweb, tmp_path):
    _, files, _ = fineweb
    broken = tmp_path / "train-99999.parquet"
    broken.write_bytes(b"this is not parquet" * 50)
    out = tmp_path / "out"
    message = prepare_error(fineweb_source([*files, str(broken)]), out)
    assert message.startswith(f"cannot read {broken}")
    manifest = p.read_manifest(str(out))  # the shards of the good files are checkpointed, not lost
    assert not manifest["complete"] and len(manifest["splits"]["train"]["shards"]) > 3
    assert len(glob.glob(str(out / "*.bin"))) >= len(manifest["splits"]["train"]["shards"])


def test_bad_paths_and_file_types(tmp_path, capsys):
    with pytest.raises(p.PrepareError, match="no file matches"):
        p.local_files([str(tmp_path / "nothing*.jsonl")])
    with pytest.raises(p.PrepareError, match="matches only folders"):
        p.local_files([str(tmp_path)])
    (tmp_path / "corpus.csv").write_text("text\nhello\n")
    assert "unsupported file type" in prepare_error(openwebtext_source([str(tmp_path / "corpus.csv")]), tmp_path / "o")
    assert p.main(["text", "--files", str(tmp_path / "nothing*.jsonl")]) == 2
    assert "error: no file matches" in capsys.readouterr().err


def test_existing_output_is_never_overwritten_by_other_settings(fineweb, tmp_path):
    _, files, out = fineweb
    before = folder_bytes(out)
    with pytest.raises(p.PrepareError, match="other settings \\(different shard_size\\)"):
        p.prepare(fineweb_source(files), str(out), shard_size=SHARD_SIZE * 2, workers=1)
    p.prepare(fineweb_source(files), str(out), shard_size=SHARD_SIZE, workers=1)  # complete: nothing to do
    assert folder_bytes(out) == before
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    write_shard(str(foreign / "x_train_000001.bin"), np.zeros(5, dtype=np.uint16))
    assert "no manifest.json" in prepare_error(fineweb_source(files), foreign)


def test_restart_with_other_settings_before_any_checkpoint_leaves_no_stale_shard(fineweb, tmp_path, monkeypatch):
    _, files, _ = fineweb
    real_write_shard = p.write_shard

    def crash_after_third_shard(path, tokens):
        real_write_shard(path, tokens)
        if path.endswith("_000003.bin"):
            raise RuntimeError("injected crash")

    monkeypatch.setattr(p, "write_shard", crash_after_third_shard)
    with pytest.raises(RuntimeError):  # one batch: three shards on disk, none checkpointed
        p.prepare(fineweb_source(files), str(tmp_path / "out"), shard_size=SHARD_SIZE, workers=1, batch_size=100)
    monkeypatch.setattr(p, "write_shard", real_write_shard)
    p.prepare(fineweb_source(files), str(tmp_path / "out"), shard_size=100_000, workers=1)
    assert sorted(os.listdir(tmp_path / "out")) == ["fineweb-edu10B_train_000001.bin", "fineweb-edu10B_val_000000.bin",
                                                   "manifest.json"]
    assert p.verify(str(tmp_path / "out")) == []


def test_byte_tokenizer_shards_hold_each_documents_utf8_bytes(tmp_path, monkeypatch):
    texts = ["def f():\n    return 'ünïcode ✓'\n", "plain text", "<|endoftext|> is text here"]
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    outs = []
    for workers in ("1", "2"):
        out = tmp_path / f"bytes{workers}"
        assert p.main(["text", "--tokenizer", "bytes", "--files", str(corpus), "--val-fraction", "0",
                       "--workers", workers, "--out", str(out)]) == 0
        outs.append(folder_bytes(out))
    assert outs[0] == outs[1]
    (tokens,) = split_tokens(str(tmp_path / "bytes1"), "train")
    starts = np.flatnonzero(tokens == 256)  # <|endoftext|> before every document, and nowhere else
    assert tokens.max() == 256 and list(starts) == [0, *np.cumsum([len(t.encode()) + 1 for t in texts])[:-1]]
    ends = [*starts[1:], len(tokens)]
    assert [bytes(tokens[a + 1 : b].astype(np.uint8)).decode() for a, b in zip(starts, ends)] == texts
    captured = []
    monkeypatch.setattr(p, "prepare", lambda source, out, **kw: captured.append((source, out)))
    assert p.main(["text", "--tokenizer", "bytes", "--files", str(corpus), "--name", "docs"]) == 0
    assert captured[0][0].tokenizer == "bytes" and captured[0][1] == os.path.join(REPO, "data", "docs_bytes")


def test_a_file_that_is_not_utf8_is_read_with_replacements_and_named(tmp_path, capsys):
    """A stray Latin-1 byte in one file costs that character, with a warning naming the file, not the
    whole preparation."""
    good = write_jsonl(tmp_path / "good.jsonl", [{"text": "the first document"}, {"text": "the last document"}])
    bad_jsonl = tmp_path / "bad.jsonl"
    bad_jsonl.write_bytes(b'{"text": "caf\xe9 au lait"}\n{"text": "a fine line"}\n')
    bad_txt = tmp_path / "bad.txt"
    bad_txt.write_bytes(b"na\xefve text\n")
    out = tmp_path / "out"
    assert p.main(["text", "--files", good, str(bad_jsonl), str(bad_txt), "--out", str(out), "--workers", "1",
                   "--val-fraction", "0"]) == 0
    err = capsys.readouterr().err
    assert f"warning: {bad_jsonl} is not valid UTF-8 (byte 13 " in err and f"warning: {bad_txt} is not valid" in err
    assert good not in err
    assert documents_of(split_tokens(str(out), "train")) == [
        "the first document", "the last document", "caf\ufffd au lait", "a fine line", "na\ufffdve text\n"]
