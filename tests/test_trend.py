"""experiments.trend: the speedups of the testbed's three points side by side, and the power law through them read at
GPT-2 small as a projection, on speedups.csv files written here in experiments.report's schema."""

import csv
import math
import re

import pytest

from errors import InputError
from experiments import trend


def write_point(repo, point, rows):
    path = repo / point.speedups
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["optimizer", "setting", "tokens", "seeds", "loss_mean", "loss_std", "speedup", "low", "high"])
        writer.writerow(["AdamW", "", point.tokens, 3, 2.3, 0.01, 1, "", ""])
        for name, (s, low, high) in rows.items():
            writer.writerow([name, "", point.tokens, 3, 2.0, 0.01, s, low, high])


def planted(base, size_exponent, data_exponent, point):
    """A speedup that follows the law exactly: base (N / N_mini)^b (r / r_mini)^c."""
    mini = trend.POINTS[0]
    ratio = (point.tokens / point.parameters) / (mini.tokens / mini.parameters)
    return base * (point.parameters / mini.parameters) ** size_exponent * ratio**data_exponent


@pytest.mark.quick
def test_the_projection_is_the_law_through_the_three_points(tmp_path):
    """Speedups planted on a power law (3x at the mini, shrinking as size^-0.2 and ratio^-0.1) project to the law's
    value at GPT-2 small, its interval around it and wider than any point's; a point not yet run says so, and the
    projection waits for it."""
    for point in trend.POINTS:
        s = planted(3.0, -0.2, -0.1, point)
        write_point(tmp_path, point, {"Muon": (s, s / 1.1, s * 1.1), "Kron": (2.0, 1.5, 2.5)})
    expected = planted(3.0, -0.2, -0.1, trend.Point("", "", trend.GPT2_SMALL, 20 * trend.GPT2_SMALL))
    cells = [trend.read_point(str(tmp_path / p.speedups), p.tokens)["Muon"] for p in trend.POINTS]
    centre, low, high = trend.projected(cells, trend.GPT2_SMALL, 20.0)
    assert centre == pytest.approx(expected, rel=1e-9) and low < centre < high
    assert math.log(high / low) > 3 * math.log(1.1 * 1.1)  # (extrapolated over 190x: far wider than a point's)
    table = trend.trend_table(str(tmp_path))
    muon = next(line for line in table.splitlines() if line.startswith("| Muon "))
    assert f"{expected:.2f}x" in muon and "1.52x" in muon  # (the track's, beside)
    size, data = (trend.exponent(cells[0], cells[i], step) for i, step in ((2, trend.log_steps()[0]),
                                                                            (1, trend.log_steps()[1])))
    assert size[0] == pytest.approx(-0.2, abs=1e-9) and data[0] == pytest.approx(-0.1, abs=1e-9)
    # each interval: the two points' log-spreads (ln 1.1 / 1.96 each, planted) in quadrature, over the step
    for (centre, low, high), step in zip((size, data), trend.log_steps()):
        assert high - centre == pytest.approx(centre - low) == pytest.approx(math.sqrt(2) * math.log(1.1) / step)
    assert f"| {size[0]:+.2f} ({size[1]:+.2f} to {size[2]:+.2f}) | {data[0]:+.2f} (" in muon, muon
    (tmp_path / trend.POINTS[2].speedups).unlink()
    muon = next(line for line in trend.trend_table(str(tmp_path)).splitlines() if line.startswith("| Muon "))
    assert "not yet measured" in muon and "needs all three points" in muon
    assert f"| needs both points | {data[0]:+.2f} (" in muon  # (the data step measured, the size step not)


def test_no_mini_speedups_is_named(tmp_path):
    with pytest.raises(InputError, match="results/tune/speedups.csv"):
        trend.trend_table(str(tmp_path))


def test_an_interval_past_adamws_ladder_is_said_not_projected(tmp_path):
    """experiments.report writes a bound past AdamW's ladder as 0 or inf: the table says so, and projects nothing
    from it; the same optimizer twice at a point's tokens is refused by name."""
    for point in trend.POINTS:
        write_point(tmp_path, point, {"Muon": (2.2, 1.9, float("inf")), "Lion": (0.5, 0.0, 0.6)})
    table = trend.trend_table(str(tmp_path))
    muon = next(line for line in table.splitlines() if line.startswith("| Muon "))
    lion = next(line for line in table.splitlines() if line.startswith("| Lion "))
    assert "2.20x (1.90 to past the ladder)" in muon and "an interval past AdamW's ladder" in muon
    assert muon.count("an interval past AdamW's ladder") == 3  # (both exponents and the projection)
    assert "0.50x (past the ladder to 0.60)" in lion
    write_point(tmp_path, trend.POINTS[0], {"Muon": (2.2, 1.9, 2.5)})
    with open(tmp_path / trend.POINTS[0].speedups, "a") as f:
        f.write(f"Muon,,{trend.POINTS[0].tokens},3,2.0,0.01,2.3,2.0,2.6\n")
    with pytest.raises(InputError, match="Muon twice"):
        trend.trend_table(str(tmp_path))


def test_once_a_larger_point_is_measured_the_rows_are_its_optimizers(tmp_path):
    """The scale stages run a few optimizers: once a larger point is measured, the table holds those (a mini-only one
    would say "not run at this point" twice), and a point measured without an optimizer says so, where a point with
    no speedups yet says it is not yet measured."""
    mini, tokens4x, width192 = trend.POINTS
    write_point(tmp_path, mini, {"Muon": (3.0, 2.9, 3.1), "Kron": (2.0, 1.5, 2.5), "Lion": (0.5, 0.4, 0.6)})
    assert [line.split(" | ")[0] for line in trend.trend_table(str(tmp_path)).splitlines()[2:]] == [
        "| Muon", "| Kron", "| Lion"]
    write_point(tmp_path, tokens4x, {"Muon": (2.0, 1.8, 2.2), "Lion": (0.6, 0.5, 0.7)})
    table = trend.trend_table(str(tmp_path)).splitlines()[2:]
    assert [line.split(" | ")[0] for line in table] == ["| Muon", "| Lion"]
    assert "| 2.00x (1.80 to 2.20) | not yet measured |" in table[0]
    write_point(tmp_path, width192, {"Muon": (2.5, 2.2, 2.8)})
    lion = trend.trend_table(str(tmp_path)).splitlines()[3]
    assert "| 0.60x (0.50 to 0.70) | not run at this point |" in lion and "needs all three points" in lion


@pytest.mark.parametrize("damage, named", [("cut", "line 3: unreadable (a cut row)"), ("nan", "unreadable (NaN)"),
                                           ("text", "could not convert"), ("empty", "not a speedups.csv")])
def test_a_damaged_speedups_csv_is_named(tmp_path, damage, named):
    """A speedups.csv cut short, with a NaN or a word where a number goes, or empty: refused by file and line, with
    the command that rewrites it, never read as a shorter or different table."""
    for point in trend.POINTS[:2]:
        write_point(tmp_path, point, {"Muon": (2.5, 2.2, 2.8), "Lion": (0.5, 0.4, 0.6)})
    path = tmp_path / trend.POINTS[1].speedups
    text = path.read_text()
    path.write_text({"cut": text[:text.index("Muon") + 12], "nan": text.replace("2.5,2.2", "nan,2.2"),
                     "text": text.replace("2.5,2.2", "fast,2.2"), "empty": ""}[damage])
    with pytest.raises(InputError, match=re.escape(named)) as error:
        trend.trend_table(str(tmp_path))
    assert "experiments.report" in str(error.value)
