"""
Our GPT checkpoints as an lm-evaluation-harness model, and a CLI around it.

    python -m eval.harness --checkpoint out/gpt2_small_mars/ckpt.pt \
        --tasks hellaswag,arc_easy,arc_challenge,boolq,openbookqa,piqa,winogrande,mmlu,sciq \
        --batch_size 32 [--include_path my_tasks/] [--limit 100]

The results go to <checkpoint>_lm_eval.json (next to the checkpoint) and are
printed as lm-eval's table and as the paper's table. Within Python, use the
registered name (simple_evaluate(model="mars_gpt", model_args={"checkpoint": ...}))
or pass an instance: GPTLM(model=gpt).
"""

if not __package__:  # run as a file: the repository's modules (model, data, ...) are not importable
    raise SystemExit("eval/harness.py is a module of the eval package: run it from the repository root as\n"
                     "    python -m eval.harness ...")

import argparse
import difflib
import json
import os

import lm_eval.models  # noqa: F401  fills the registry first: registering into an empty one hides the built-in models
import torch
from lm_eval import simple_evaluate
from lm_eval.api.instance import Instance
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.tasks import TaskManager
from lm_eval.utils import get_rolling_token_windows, handle_non_serializable, make_disjoint_window, make_table

from files import atomic_write
from eval.paper import PAPER_COLUMNS, paper_scores
from checkpoint import load_checkpoint, load_model
from eval.scoring import TokenPair, encode, model_encoding, right_padded, score_continuations
from model import GPT
from errors import InputError, at_least, exit_on_input_error
from runtime import autocast_context, device_arg

DEFAULT_MAX_GEN_TOKENS = 256  # lm-eval's default when a task does not say



@register_model("mars_gpt")
class GPTLM(TemplateLM):
    """A GPT from model.py behind lm-eval's interface. Log-likelihoods come from
    eval.scoring (shared with the built-in HellaSwag evaluator); generation is
    greedy. Text is tokenised with the model's own tokenizer: `tokenizer`, else a
    checkpoint's (checkpoint.evaluation.tokenizer_of), else GPT-2's for a model given as such."""

    def __init__(
        self,
        checkpoint: str | None = None,
        model: GPT | None = None,
        device: str = "cpu",
        batch_size: int | str = 32,
        dtype: str = "float32",
        max_batch_size: int | None = None,  # lm-eval always passes it; only "auto" batch sizes use it
        tokenizer: str | None = None,
    ):
        super().__init__()
        if (checkpoint is None) == (model is None):
            raise ValueError("give exactly one of checkpoint (a path) and model (a GPT)")
        if str(batch_size).startswith("auto"):
            raise ValueError("batch_size 'auto' is not supported; give a number of sequences per forward")
        if checkpoint is not None:
            self.model, trained_with = load_model(checkpoint, device)
            tokenizer = tokenizer or trained_with
        else:
            self.model = model
        self.enc = model_encoding(tokenizer or "gpt2", self.model.config.vocab_size, checkpoint or "the model")
        self._device = device  # LM.device reads it
        self.batch_size = int(batch_size)
        self.autocast_ctx = autocast_context(device, dtype)
        self.n_vocab = self.enc.n_vocab  # the model's vocabulary is padded beyond it

    @property
    def eot_token_id(self) -> int:
        return self.enc.eot_token

    @property
    def max_length(self) -> int:
        return self.model.config.block_size

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        return encode(string, self.enc)  # GPT-2 adds no special tokens either way, bytes none at all

    def tok_decode(self, tokens: list[int], **kwargs) -> str:
        return self.enc.decode(tokens)

    def _loglikelihood_tokens(
        self, requests: list[tuple[tuple[str, str] | None, list[int], list[int]]], disable_tqdm: bool = False,
        **kwargs,
    ) -> list[tuple[float, bool]]:
        pairs: list[TokenPair] = [(context, continuation) for _, context, continuation in requests]
        results = score_continuations(self.model, pairs, self.device, self.autocast_ctx, self.batch_size)
        for (request_strings, _, _), result in zip(requests, results):
            if request_strings is not None:
                self.cache_hook.add_partial("loglikelihood", request_strings, result)
        return results

    def loglikelihood_rolling(self, requests: list[Instance], disable_tqdm: bool = False) -> list[float]:
        """Log-likelihood of whole texts (perplexity tasks), in disjoint windows of
        block_size tokens as lm-eval's hf model computes it; all windows of all
        texts are batched together."""
        windows, owner = [], []
        for i, (string,) in enumerate(req.args for req in requests):
            token_windows = get_rolling_token_windows(
                token_list=self.tok_encode(string), prefix_token=self.prefix_token_id,
                max_seq_len=self.max_length, context_len=1,
            )
            for window in map(make_disjoint_window, token_windows):
                windows.append((None, *window))
                owner.append(i)
        totals = [0.0] * len(requests)
        for i, (logprob, _) in zip(owner, self._loglikelihood_tokens(windows)):
            totals[i] += logprob
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        """Greedy continuations, each cut before the first of its stop sequences
        (EOT always counts as one) or after its max_gen_toks tokens."""
        contexts, stops, max_new = [], [], []
        eot = self.tok_decode([self.eot_token_id])  # "" for bytes, whose EOT decodes to no text
        for context, gen_kwargs in (req.args for req in requests):
            if gen_kwargs.get("do_sample"):
                raise ValueError("this model generates greedily only (do_sample must be false)")
            max_gen_toks = int(gen_kwargs.get("max_gen_toks", DEFAULT_MAX_GEN_TOKENS))
            if max_gen_toks >= self.max_length:
                raise ValueError(f"max_gen_toks {max_gen_toks} leaves no room for context in block_size "
                                 f"{self.max_length}")
            until = gen_kwargs.get("until") or []
            # Keep room for the new tokens inside block_size, as lm-eval's hf model does.
            contexts.append(self.tok_encode(context)[-(self.max_length - max_gen_toks) :])
            stops.append(([until] if isinstance(until, str) else list(until)) + ([eot] if eot else []))
            max_new.append(max_gen_toks)
        order = sorted(range(len(requests)), key=lambda i: -len(contexts[i]))
        texts = [""] * len(requests)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            generated = self._greedy([contexts[i] for i in batch], [stops[i] for i in batch],
                                     [max_new[i] for i in batch])
            for i, text in zip(batch, generated):
                texts[i] = text
                self.cache_hook.add_partial("generate_until", requests[i].args, text)
        return texts

    @torch.no_grad()
    def _greedy(self, contexts: list[list[int]], stops: list[list[str]], max_new: list[int]) -> list[str]:
        """Greedy decoding of several contexts at once. Sequences are right-padded
        (causal attention keeps the padding out of real positions) and each row's
        next token is read at its own last position; a row leaves the batch when it
        produces EOT, reaches a stop sequence or its token limit."""
        self.model.eval()
        sequences = [list(c) for c in contexts]
        generated: list[list[int]] = [[] for _ in contexts]
        active = [r for r in range(len(contexts)) if max_new[r] > 0]
        while active:
            lengths = [len(sequences[r]) for r in active]
            idx = right_padded([sequences[r] for r in active])
            with self.autocast_ctx:
                logits, _ = self.model(idx.to(self.device), all_logits=True)
            last = logits[torch.arange(len(active)), torch.tensor(lengths) - 1]
            # Only real tokens: the ids padding the vocabulary to 50304 decode to nothing.
            next_tokens = last[:, : self.n_vocab].argmax(dim=-1).tolist()
            still_active = []
            for r, token in zip(active, next_tokens):
                sequences[r].append(token)
                generated[r].append(token)
                text = self.tok_decode(generated[r])
                # EOT by id too: the byte tokenizer's decodes to no text for a stop sequence to find.
                ended = token == self.eot_token_id or any(stop in text for stop in stops[r])
                if len(generated[r]) < max_new[r] and not ended:
                    still_active.append(r)
            active = still_active
        return [cut_at_stops(self.tok_decode(g), s) for g, s in zip(generated, stops)]


def cut_at_stops(text: str, stops: list[str]) -> str:
    """text up to the earliest stop sequence in it."""
    return text[: min([text.find(s) for s in stops if s in text], default=len(text))]


def results_path(checkpoint: str) -> str:
    """Where the CLI writes results: next to the checkpoint."""
    return os.path.splitext(checkpoint)[0] + "_lm_eval.json"


def paper_table(results: dict) -> str:
    """The paper's zero-shot table row (percent) for the tasks that were run; Avg.
    is over those columns."""
    values = paper_scores(results)
    header = [column for column, _ in PAPER_COLUMNS] + ["Avg."]
    cells = ["-" if v is None else f"{v:.2f}" for v in values]
    widths = [max(len(h), len(c)) for h, c in zip(header, cells)]

    def row(items: list[str]) -> str:
        return "| " + " | ".join(x.rjust(w) for x, w in zip(items, widths)) + " |"

    return "\n".join([row(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", row(cells)])


def task_names(tasks: str) -> list[str]:
    """--tasks as a list of names."""
    names = [t.strip() for t in tasks.split(",") if t.strip()]
    if not names:
        raise InputError(f"--tasks '{tasks}' names no task; give comma-separated lm-eval task names (e.g. hellaswag)")
    return names


def known_tasks(names: list[str], task_manager: TaskManager) -> list[str]:
    """The tasks to run: each name a task, group or tag lm-eval knows, a glob matching some (expanded,
    as lm-eval's own CLI does), or a task YAML file. An unknown one is named with its close matches."""
    tasks = []
    for name in names:
        matches = [name] if os.path.isfile(name) else task_manager.match_tasks([name])
        if not matches:
            close = difflib.get_close_matches(name, task_manager.all_tasks, n=5)
            suggestion = f"close matches: {', '.join(close)}" if close else "see `lm_eval ls tasks` for the names"
            raise InputError(f"--tasks: lm-eval knows no task, group or tag '{name}' ({suggestion}); "
                             "a local task needs --include_path FOLDER")
        tasks += matches
    return list(dict.fromkeys(tasks))


def task_index(names: list[str], include_path: str | None) -> TaskManager:
    """lm-eval's index of the tasks it knows: of include_path alone where that folder defines every task the
    names stand for (indexing lm-eval's own 14,683 takes 13 s of CPU), else of lm-eval's and include_path's."""
    if include_path is not None:
        local = TaskManager(include_path=include_path, include_defaults=False)
        if all(os.path.isfile(name) or defined_in(local, name) for name in names):
            return local
    return TaskManager(include_path=include_path)


def defined_in(index: TaskManager, name: str) -> bool:
    """Whether the index holds every task `name` stands for: a task, or a group whose members it holds too.
    Not a tag: lm-eval's own tasks may carry it as well."""
    matches = index.match_tasks([name])
    for match in matches:
        entry = index.task_index[match]
        if entry.kind.name == "GROUP":
            members = entry.cfg.get("task", [])
            members = [members] if isinstance(members, (str, dict)) else members
            if not all(isinstance(m, dict) or defined_in(index, m) for m in members):
                return False
        elif entry.kind.name not in ("TASK", "PY_TASK"):
            return False
    return bool(matches)


def check_output(output: str) -> None:
    """Fail before the evaluation, not after it, where the results could not be written."""
    folder = os.path.dirname(os.path.abspath(output))
    if os.path.isdir(output):
        raise InputError(f"--output {output} is a folder; give the results JSON file's path")
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise InputError(f"cannot write {output}: {folder} is not a writable folder; give another --output")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m eval.harness",
                                     description="lm-evaluation-harness tasks on a checkpoint.")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--tasks", required=True, help="comma-separated lm-eval task (or group) names")
    parser.add_argument("--batch_size", type=at_least(1), default=32, help="sequences per forward")
    parser.add_argument("--include_path", default=None, help="folder of extra task YAMLs")
    parser.add_argument("--limit", type=float, default=None, help="examples per task (a fraction if < 1)")
    parser.add_argument("--num_fewshot", type=at_least(0), default=None,
                        help="default: each task's own (0 for the paper's)")
    parser.add_argument("--device", type=device_arg, default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--output", default=None, help="results JSON (default: next to the checkpoint)")
    args = parser.parse_args(argv)

    with exit_on_input_error():
        if args.limit is not None and not args.limit > 0:
            raise InputError(f"--limit {args.limit:g}: give a positive number of examples (or a fraction < 1)")
        if args.include_path is not None and not os.path.isdir(args.include_path):
            raise InputError(f"--include_path {args.include_path} is not a folder; give the folder of task YAMLs")
        if not os.path.exists(args.checkpoint):
            load_checkpoint(args.checkpoint)  # its error names the missing file, now rather than after the task index
        output = args.output or results_path(args.checkpoint)
        check_output(output)
        names = task_names(args.tasks)
        task_manager = task_index(names, args.include_path)
        tasks = known_tasks(names, task_manager)  # before the model is loaded
        limit = int(args.limit) if args.limit is not None and args.limit >= 1 else args.limit
        try:
            results = simple_evaluate(
                model="mars_gpt",
                model_args={"checkpoint": args.checkpoint, "dtype": args.dtype},
                tasks=tasks,
                num_fewshot=args.num_fewshot,
                batch_size=args.batch_size,
                device=args.device,
                limit=limit,
                log_samples=False,
                task_manager=task_manager,
            )
        except ConnectionError as e:  # a task's dataset is downloaded from the hub
            raise InputError(f"cannot download a task's dataset ({e}); run where the Hugging Face hub is "
                             "reachable once (the datasets are cached), or give local task YAMLs "
                             "with --include_path") from e
        with atomic_write(output, "w") as f:  # a failed write leaves an earlier results file whole
            json.dump({"checkpoint": args.checkpoint, **results}, f, indent=2, default=handle_non_serializable)
    print(make_table(results))
    if "groups" in results:
        print(make_table(results, "groups"))
    print(paper_table(results))
    print(f"results written to {output}")
    return results


if __name__ == "__main__":
    main()
