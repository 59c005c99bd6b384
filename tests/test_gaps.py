"""
experiments.gaps: each variant's losses per optimizer and each optimizer's gap to the reference, with Welch's p, as
the betas and component-swap stages print them (scripts/scale_mini.sh); the command in the header reproduces the
table (its --variants too).
"""

import pytest

from errors import InputError
from experiments import gaps
from experiments.report import welch

LOSSES = {"0.9-0.95": {"adamw": [2.30, 2.28, 2.27], "mars": [2.25, 2.24, 2.26]},
          "0.95-0.99": {"adamw": [2.35, 2.36, 2.35], "mars": [2.30, 2.28]},
          "other": {"mars": [2.0, 2.1]}}


@pytest.mark.quick
def test_each_variants_gap_to_the_reference_with_welchs_p():
    text = gaps.table(LOSSES, "adamw", ["0.9-0.95", "0.95-0.99", "other"])
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in text.splitlines()[2:]]
    rows = {row[0]: row[1:] for row in cells}
    adamw, mars, gap = rows["0.9-0.95"][:3]
    assert adamw == "2.2833 ± 0.0153 (3)" and mars == "2.2500 ± 0.0100 (3)"
    assert gap == f"-0.0333 (p = {welch(LOSSES['0.9-0.95']['mars'], LOSSES['0.9-0.95']['adamw'])[2]:.2g})"
    assert rows["0.95-0.99"][1] == "2.2900 ± 0.0141 (2)"
    # a variant without the reference: the optimizer's loss, no gap
    assert rows["other"] == ["", "2.0500 ± 0.0707 (2)", ""]


def test_the_header_gives_the_command_with_its_variants_and_an_empty_folder_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(gaps, "read_losses", lambda folder: LOSSES)
    text = gaps.main([str(tmp_path), "--variants", "0.95-0.99,0.9-0.95"])
    command = f"python -m experiments.gaps {tmp_path} --variants 0.95-0.99,0.9-0.95"
    assert text.startswith(f"# Loss gaps to adamw ({command})")
    variants = [line.split(" | ")[0] for line in text.splitlines() if line.startswith("| 0.")]
    assert variants == ["| 0.95-0.99", "| 0.9-0.95"]
    assert (tmp_path / "gaps.md").read_text() == text
    other = gaps.main([str(tmp_path), "--reference", "mars"])  # (the folder's variants, sorted)
    assert other.startswith(f"# Loss gaps to mars (python -m experiments.gaps {tmp_path} --reference mars)")
    monkeypatch.undo()
    (tmp_path / "adamw@a" / "base").mkdir(parents=True)
    with pytest.raises(InputError, match=f"{tmp_path} holds no finished run of a recipe named <optimizer>@<variant>"):
        gaps.read_losses(str(tmp_path))
    with pytest.raises(InputError, match=f"{tmp_path / 'absent'} does not exist"):
        gaps.read_losses(str(tmp_path / "absent"))
