"""The paper's zero-shot downstream table: its columns and how a lm-eval result fills them."""

# (column, lm-eval task). Each column shows acc_norm where the task reports it
# (length-normalised multiple choice), acc otherwise.
PAPER_COLUMNS = [
    ("ARC-E", "arc_easy"),
    ("ARC-C", "arc_challenge"),
    ("BoolQ", "boolq"),
    ("HellaSwag", "hellaswag"),
    ("OBQA", "openbookqa"),
    ("PIQA", "piqa"),
    ("WG", "winogrande"),
    ("MMLU", "mmlu"),
    ("SciQ", "sciq"),
]


def paper_scores(results: dict) -> list[float | None]:
    """Percent per column of PAPER_COLUMNS, then Avg. over the columns present
    (None where a task was not run), from lm-eval's results dict."""
    scores = {**results.get("results", {}), **results.get("groups", {})}
    values = []
    for _, task in PAPER_COLUMNS:
        metrics = scores.get(task, {})
        value = metrics.get("acc_norm,none", metrics.get("acc,none"))
        values.append(None if value is None else 100 * value)
    present = [v for v in values if v is not None]
    return values + [sum(present) / len(present) if present else None]
