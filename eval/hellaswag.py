"""
HellaSwag (validation, zero-shot) scored exactly as lm-evaluation-harness defines
the task (lm_eval/tasks/hellaswag), so the accuracy logged during training is
comparable with harness numbers and the paper's:

  query   = preprocess(activity_label + ": " + ctx_a + " " + ctx_b.capitalize())
  choices = [preprocess(ending) for ending in endings], each scored as " " + choice
  acc      = argmax of the summed continuation log-likelihood
  acc_norm = argmax of that sum divided by len(choice) in characters

The harness's preprocessing is restated here (not imported) so training does not
depend on lm-eval; tests/test_eval.py checks both against the harness itself.

    python -m eval.hellaswag --checkpoint out/run/ckpt.pt [--data hellaswag_val.jsonl]
"""

import argparse
import json
import re
from typing import ContextManager

import torch
import torch.distributed as dist

from checkpoint import load_model
from eval.scoring import score_continuations, split_context_continuation
from model import GPT
from runtime import autocast_context

HUB_DATASET = "Rowan/hellaswag"  # the dataset lm-eval's hellaswag task loads


def preprocess(text: str) -> str:
    """lm-eval's hellaswag preprocess: the "[title]"/"[step]" markers are
    artifacts of the WikiHow part of HellaSwag."""
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    text = text.replace("  ", " ")
    return text


def query_choices_gold(example: dict) -> tuple[str, list[str], int]:
    """lm-eval's hellaswag process_docs: the prompt, the endings to score and the
    index of the right one."""
    ctx = example["ctx_a"] + " " + example["ctx_b"].capitalize()
    query = preprocess(example["activity_label"] + ": " + ctx)
    return query, [preprocess(ending) for ending in example["endings"]], int(example["label"])


def load_hellaswag(path: str | None = None) -> list[dict]:
    """HellaSwag validation examples in the original jsonl schema (ind,
    activity_label, ctx_a, ctx_b, ctx, endings, label, split, source_id): from
    a local jsonl file, or with path None from the Hugging Face hub (online)."""
    if path is not None:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    import datasets  # only needed for the download

    return [dict(example) for example in datasets.load_dataset(HUB_DATASET, split="validation")]


def score_examples(
    model: GPT, examples: list[dict], device: str, autocast_ctx: ContextManager, batch_size: int
) -> list[list[float]]:
    """Summed log-likelihood of every ending of every example. All endings of all
    examples are scored together, batch_size sequences per forward."""
    requests, n_endings = [], []
    for example in examples:
        query, choices, _ = query_choices_gold(example)
        requests += [split_context_continuation(query, " " + choice) for choice in choices]
        n_endings.append(len(choices))
    scores = [ll for ll, _ in score_continuations(model, requests, device, autocast_ctx, batch_size)]
    per_example, start = [], 0
    for n in n_endings:
        per_example.append(scores[start : start + n])
        start += n
    return per_example


def argmax(values: list[float]) -> int:
    """Index of the largest value, the first on ties (as numpy's argmax)."""
    return max(range(len(values)), key=values.__getitem__)


def evaluate_hellaswag(
    model: GPT,
    examples: list[dict],
    device: str,
    autocast_ctx: ContextManager,
    batch_size: int,
    rank: int = 0,
    world_size: int = 1,
) -> dict[str, float]:
    """acc, acc_norm and count over examples. With world_size > 1 (under torchrun,
    torch.distributed initialised) each rank scores every world_size-th example
    and the counts are summed over ranks, so every rank returns the full result."""
    shard = examples[rank::world_size]
    correct = correct_norm = 0
    for example, lls in zip(shard, score_examples(model, shard, device, autocast_ctx, batch_size)):
        _, choices, gold = query_choices_gold(example)
        correct += argmax(lls) == gold
        correct_norm += argmax([ll / len(choice) for ll, choice in zip(lls, choices)]) == gold
    totals = torch.tensor([correct, correct_norm, len(shard)], dtype=torch.float64, device=device)
    if world_size > 1:
        dist.all_reduce(totals)
    correct, correct_norm, count = totals.tolist()
    return {"acc": correct / count, "acc_norm": correct_norm / count, "count": int(count)}


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description="Zero-shot HellaSwag accuracy of a checkpoint.")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--data", default=None, help="local HellaSwag jsonl (default: download from the hub)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--batch_size", type=int, default=64, help="sequences (context + one ending) per forward")
    args = parser.parse_args(argv)
    model = load_model(args.checkpoint, args.device)
    examples = load_hellaswag(args.data)
    result = evaluate_hellaswag(
        model, examples, args.device, autocast_context(args.device, args.dtype), args.batch_size
    )
    print(f"hellaswag: acc {result['acc']:.4f}  acc_norm {result['acc_norm']:.4f}  ({result['count']} examples)")
    return result


if __name__ == "__main__":
    main()
