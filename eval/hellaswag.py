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

if not __package__:  # run as a file: the repository's modules (model, data, ...) are not importable
    raise SystemExit("eval/hellaswag.py is a module of the eval package: run it from the repository root as\n"
                     "    python -m eval.hellaswag ...")

import argparse
import json
import os
import re
from typing import ContextManager

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule

from checkpoint import load_model
from data.tokenizer import Encoding
from eval.scoring import model_encoding, score_continuations, split_context_continuation
from model import GPT
from errors import InputError, at_least, exit_on_input_error
from runtime import autocast_context, device_arg

HUB_DATASET = "Rowan/hellaswag"  # the dataset lm-eval's hellaswag task loads
EXAMPLE_FIELDS = ("activity_label", "ctx_a", "ctx_b", "endings", "label")  # what query_choices_gold reads


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
    a local jsonl file, each line checked, or with path None from the Hugging Face hub (online)."""
    if path is not None:
        return read_hellaswag_jsonl(path)
    import datasets  # only needed for the download

    try:
        return [dict(example) for example in datasets.load_dataset(HUB_DATASET, split="validation")]
    except OSError as e:  # no network, or the hub refused (ConnectionError is an OSError)
        raise InputError(f"cannot download {HUB_DATASET} ({type(e).__name__}: {e}); offline, pass --data "
                         "with a local copy of HellaSwag's validation jsonl") from e


def read_hellaswag_jsonl(path: str) -> list[dict]:
    """The examples of a local HellaSwag jsonl; a line that is not one names the file and the line."""
    hint = "give HellaSwag's validation jsonl (one example per line)"
    if not os.path.isfile(path):
        what = "is a folder" if os.path.isdir(path) else "does not exist"
        raise InputError(f"HellaSwag file {path} {what}; {hint}")
    examples = []
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if line.strip():
                    examples.append(check_example(line, f"{path}, line {number}"))
    except UnicodeDecodeError as e:
        raise InputError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}); {hint}") from None
    if not examples:
        raise InputError(f"{path} holds no examples; {hint}")
    return examples


def check_example(line: str, where: str) -> dict:
    """One jsonl line as a HellaSwag example, or an InputError saying what is wrong with it."""
    try:
        example = json.loads(line)
    except json.JSONDecodeError as e:
        raise InputError(f"{where}: not JSON ({e.msg} at column {e.colno}); "
                         "each line must be one HellaSwag example as a JSON object") from None
    if not isinstance(example, dict):
        raise InputError(f"{where}: a JSON {type(example).__name__}, not an object; each line must be one example")
    missing = [k for k in EXAMPLE_FIELDS if k not in example]
    if missing:
        raise InputError(f"{where}: lacks {', '.join(missing)}; every example needs {', '.join(EXAMPLE_FIELDS)}")
    wrong = [k for k in ("activity_label", "ctx_a", "ctx_b") if not isinstance(example[k], str)]
    endings = example["endings"]
    if not isinstance(endings, list) or not endings or not all(isinstance(e, str) for e in endings):
        wrong.append("endings")
    if wrong:
        raise InputError(f"{where}: {', '.join(wrong)} must be text (endings: a non-empty list of texts)")
    label = example["label"]  # an int, or as on the hub a string of one
    index = int(label) if isinstance(label, str) and label.isdigit() else label
    if type(index) is not int or not 0 <= index < len(endings):  # (type: a bool is no label)
        raise InputError(f"{where}: label {label!r} is not the index of one of its "
                         f"{len(endings)} endings (0 to {len(endings) - 1})")
    return example


def score_examples(
    model: GPT, examples: list[dict], device: str, autocast_ctx: ContextManager, batch_size: int,
    enc: Encoding | None = None,
) -> list[list[float]]:
    """Summed log-likelihood of every ending of every example, tokenised with enc (GPT-2's when
    None). All endings of all examples are scored together, batch_size sequences per forward."""
    requests, n_endings = [], []
    for example in examples:
        query, choices, _ = query_choices_gold(example)
        requests += [split_context_continuation(query, " " + choice, enc) for choice in choices]
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


def forwards_behind(sequences: int, batch_size: int, device: str) -> int:
    """How many fewer forwards this rank's share of sequences takes than the most any rank's takes (a
    collective, before any forward: a sharded model's forward is one too, each gathering the weights)."""
    forwards = torch.tensor(-(-sequences // batch_size), device=device)
    most = forwards.clone()
    dist.all_reduce(most, op=dist.ReduceOp.MAX)
    return int(most - forwards)


@torch.no_grad()
def run_forwards(model: GPT, count: int, device: str) -> None:
    """count one-token forwards, which a sharded model's ranks run to keep their collectives in step."""
    was_training = model.training
    model.eval()
    for _ in range(count):
        model(torch.zeros(1, 1, dtype=torch.long, device=device))
    model.train(was_training)


def evaluate_hellaswag(
    model: GPT,
    examples: list[dict],
    device: str,
    autocast_ctx: ContextManager,
    batch_size: int,
    rank: int = 0,
    world_size: int = 1,
    tokenizer: str = "gpt2",
) -> dict[str, float]:
    """acc, acc_norm and count over examples, tokenised with the model's own tokenizer (the run's
    `tokenizer` setting; refused when it has ids beyond the model's vocabulary). With world_size > 1
    (under torchrun, torch.distributed initialised) each rank scores every world_size-th example
    and the counts are summed over ranks, so every rank returns the full result."""
    enc = model_encoding(tokenizer, model.config.vocab_size)
    shard = examples[rank::world_size]
    sharded = world_size > 1 and isinstance(model, FSDPModule)
    behind = forwards_behind(sum(len(query_choices_gold(e)[1]) for e in shard), batch_size, device) if sharded else 0
    correct = correct_norm = 0
    for example, lls in zip(shard, score_examples(model, shard, device, autocast_ctx, batch_size, enc)):
        _, choices, gold = query_choices_gold(example)
        correct += argmax(lls) == gold
        correct_norm += argmax([ll / len(choice) for ll, choice in zip(lls, choices)]) == gold
    run_forwards(model, behind, device)
    totals = torch.tensor([correct, correct_norm, len(shard)], dtype=torch.float64, device=device)
    if world_size > 1:
        dist.all_reduce(totals)
    correct, correct_norm, count = totals.tolist()
    return {"acc": correct / count, "acc_norm": correct_norm / count, "count": int(count)}


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(prog="python -m eval.hellaswag",
                                     description="Zero-shot HellaSwag accuracy of a checkpoint.")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--data", default=None, help="local HellaSwag jsonl (default: download from the hub)")
    parser.add_argument("--device", type=device_arg, default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--batch_size", type=at_least(1), default=64,
                        help="sequences (context + one ending) per forward")
    args = parser.parse_args(argv)
    with exit_on_input_error():
        examples = load_hellaswag(args.data)  # before the model: a bad file fails fast
        model, tokenizer = load_model(args.checkpoint, args.device)
        result = evaluate_hellaswag(model, examples, args.device, autocast_context(args.device, args.dtype),
                                    args.batch_size, tokenizer=tokenizer)
    print(f"hellaswag: acc {result['acc']:.4f}  acc_norm {result['acc_norm']:.4f}  ({result['count']} examples)")
    return result


if __name__ == "__main__":
    main()
