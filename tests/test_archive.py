"""
experiments.archive: a folder of runs into the tar.xz results/ commits, and back: finished and diverged runs whole
(config.json, metrics.jsonl, diverged.txt), the folder's own files and links, no checkpoint, log or run stopped
midway; extracted, the finished run reads as finished again. A bad folder or name is refused, and a failed write
leaves the archive before it whole.
"""

import os
import shutil
import tarfile

import pytest

from conftest import run_train, tiny_run_args
from experiments import archive
from experiments.sweep import finished_run


def test_an_archive_holds_the_runs_that_ended_and_extracts_to_what_the_tools_read(tiny_dataset, tmp_path):
    folder = tmp_path / "out" / "tune"
    done, diverged, stopped = (folder / "adamw" / name / "seed1" for name in ("lr=1", "lr=2", "lr=3"))
    run_train(tiny_run_args(tiny_dataset, str(done), max_iters=2, eval_interval=2))
    for run in (diverged, stopped):  # (a run's first lines, cut short: one stopped, one that diverged)
        shutil.copytree(done, run)
        lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
        (run / "metrics.jsonl").write_text("".join(lines[:1]))
    (diverged / "diverged.txt").write_text("training loss is nan at step 1\n")
    (folder / "tuning.md").write_text("# table\n")
    (folder / "sweep.log").write_text("a log\n")
    (folder / "tuned" / "adamw").mkdir(parents=True)
    (folder / "tuned" / "adamw" / "base").symlink_to("../../adamw/lr=1", target_is_directory=True)  # (as tune links)
    sharded = done / "ckpt_0000002"  # a sharded checkpoint's folder, and its link
    sharded.mkdir()
    (sharded / "__0_0.distcp").write_bytes(b"shard")
    (done / "ckpt_best").symlink_to("ckpt_0000002", target_is_directory=True)
    starting = folder / "adamw" / "lr=4" / "seed1"  # (a run only starting: its lock and log, nothing else yet)
    starting.mkdir(parents=True)
    (starting / "run.lock").write_text("")
    (starting / "train.log").write_text("starting\n")
    assert finished_run(str(done)) and not finished_run(str(stopped))
    assert any(f.startswith("ckpt") for f in os.listdir(done))  # (checkpoints the archive leaves out)

    path = tmp_path / "results" / "runs.tar.xz"
    names = archive.main([str(folder), str(path)])
    assert names == sorted(names) and "tune/tuning.md" in names and "tune/sweep.log" not in names
    assert {n for n in names if n.startswith("tune/adamw/")} == {
        *(f"tune/adamw/lr=1/seed1/{f}" for f in ("config.json", "metrics.jsonl")),
        *(f"tune/adamw/lr=2/seed1/{f}" for f in ("config.json", "metrics.jsonl", "diverged.txt"))}
    assert "tune/tuned/adamw/base" in names and not any(n.startswith("tune/tuned/adamw/base/") for n in names)

    out = tmp_path / "elsewhere"
    with tarfile.open(path) as tar:
        tar.extractall(out, filter="tar")
    assert finished_run(str(out / "tune" / "adamw" / "lr=1" / "seed1"))
    assert (out / "tune" / "tuned" / "adamw" / "base").is_symlink()
    assert (out / "tune" / "adamw" / "lr=2" / "seed1" / "diverged.txt").read_text().startswith("training loss is nan")


@pytest.mark.quick
def test_a_bad_folder_or_name_is_refused_and_a_failed_write_keeps_the_archive_before(tmp_path, capsys):
    for argv, error in (([str(tmp_path / "absent"), str(tmp_path / "a.tar.xz")], "is not a folder of runs"),
                        ([str(tmp_path), str(tmp_path / "a.zip")], "must end in .tar.xz")):
        with pytest.raises(SystemExit) as stop:
            archive.main(argv)
        assert stop.value.code == 2 and error in capsys.readouterr().err
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "tuning.md").write_text("# table\n")
    kept = tmp_path / "kept.tar.xz"
    archive.main([str(tmp_path / "runs"), str(kept)])
    before = kept.read_bytes()
    (tmp_path / "runs" / "new.md").write_text("# another\n")
    (tmp_path / "kept.tar.xz.tmp").mkdir()  # (where the new archive is written first: a folder, the write fails)
    with pytest.raises(SystemExit) as stop:
        archive.main([str(tmp_path / "runs"), str(kept)])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and f"could not write {kept}" in err and "Traceback" not in err, err
    assert kept.read_bytes() == before
