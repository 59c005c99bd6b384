"""
Continuation log-likelihoods, the one scoring routine behind the built-in
HellaSwag evaluator and the lm-evaluation-harness adapter, so both produce the
same numbers from the same model.

The conventions follow lm-evaluation-harness (TemplateLM._encode_pair and
HFLM._loglikelihood_tokens): encode context + continuation together and take the
context's own tokens as the prefix (trailing context whitespace belongs to the
continuation); feed (context + continuation)[:-1] left-truncated to block_size;
score the continuation with log_softmax over the model's whole (padded)
vocabulary, as the exported Hugging Face model would.

Text is tokenised with the model's own tokenizer (model_encoding: GPT-2's BPE or
bytes, as the run trained), which is refused when it has ids beyond the model's
vocabulary.
"""

from typing import ContextManager

import torch
import torch.nn.functional as F

from data.tokenizer import Encoding, get_encoding
from model import GPT
from errors import InputError

# (context tokens, continuation tokens)
TokenPair = tuple[list[int], list[int]]


def model_encoding(tokenizer: str, vocab_size: int, model: str = "the model") -> Encoding:
    """The tokenizer a model was trained with (checkpoint.evaluation.tokenizer_of; the config's `tokenizer` in
    train.py), refused with an InputError when it has ids beyond the model's vocabulary: feeding one
    would index past the embedding (an IndexError on the CPU, a device-side assert on CUDA)."""
    enc = get_encoding(tokenizer)
    if enc.n_vocab > vocab_size:
        raise InputError(
            f"{model} has a vocabulary of {vocab_size} ids but its tokenizer '{tokenizer}' has {enc.n_vocab}: "
            "text would become ids the model has no embedding for. The tokenizer is the run's `tokenizer` "
            "setting; a run on byte shards must set tokenizer=bytes, and one on GPT-2 shards needs "
            "vocab_size of at least 50257; use a checkpoint whose tokenizer fits its vocabulary"
        )
    return enc


def encode(text: str, enc: Encoding | None = None) -> list[int]:
    """Tokens of text (GPT-2's unless enc is given). A literal <|endoftext|> becomes GPT-2's
    special token, as Hugging Face's GPT-2 tokenizer does (lm-eval's hf model sees the same ids)."""
    return (enc or get_encoding()).encode(text, allowed_special="all")


def split_context_continuation(context: str, continuation: str, enc: Encoding | None = None) -> TokenPair:
    """Tokens of a (context, continuation) pair (GPT-2's unless enc is given), split the way
    lm-eval's TemplateLM does for causal models: whitespace at the end of the context moves to the
    continuation, the whole string is encoded at once and the context's own tokens are cut off as
    the prefix (so BPE merges across the boundary stay)."""
    assert context, "an empty context has no tokens to condition on"
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
    whole = encode(context + continuation, enc)
    context_tokens = encode(context, enc)
    return context_tokens, whole[len(context_tokens) :]


def right_padded(sequences: list[list[int]]) -> torch.Tensor:
    """The sequences as one (len, longest) id batch, padded on the right with 0: with causal
    attention the padding after a sequence never reaches its real positions."""
    idx = torch.zeros(len(sequences), max(len(x) for x in sequences), dtype=torch.long)
    for row, x in enumerate(sequences):
        idx[row, : len(x)] = torch.tensor(x)
    return idx


@torch.no_grad()
def score_continuations(
    model: GPT, requests: list[TokenPair], device: str, autocast_ctx: ContextManager, batch_size: int
) -> list[tuple[float, bool]]:
    """For each (context, continuation) token pair: the summed log-probability of
    the continuation given the context, and whether greedy decoding would have
    produced exactly the continuation. batch_size sequences go through each
    forward, longest first so little of each batch is padding."""
    block_size = model.config.block_size
    for context, continuation in requests:
        if not context:
            raise ValueError("a request needs at least one context token (lm-eval puts EOT there)")
        if not continuation:
            raise ValueError("a request needs at least one continuation token to score")
        if len(continuation) > block_size:  # reachable from data: byte tokens are ~4x as many as GPT-2's
            raise InputError(f"a continuation of {len(continuation)} tokens does not fit the model's block_size "
                             f"{block_size}, so it cannot be scored; evaluate a model with a longer block_size")

    was_training = model.training
    model.eval()
    order = sorted(range(len(requests)), key=lambda i: -len(requests[i][0]) - len(requests[i][1]))
    results: list[tuple[float, bool]] = [(0.0, False)] * len(requests)
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        # The last token is only ever a target; at most block_size tokens are fed,
        # cutting the context on the left when the pair is longer.
        inputs = [(requests[i][0] + requests[i][1])[-(block_size + 1) : -1] for i in batch]
        idx = right_padded(inputs)
        with autocast_ctx:
            logits, _ = model(idx.to(device), all_logits=True)
        sums, greedy = [], []
        for row, i in enumerate(batch):
            continuation = torch.tensor(requests[i][1], device=device)
            end = len(inputs[row])
            logprobs = F.log_softmax(logits[row, end - len(continuation) : end].float(), dim=-1)
            sums.append(logprobs.gather(-1, continuation[:, None]).sum())
            greedy.append((logprobs.argmax(dim=-1) == continuation).all())
        # One device-to-host copy per batch, not one per sequence.
        for i, s, g in zip(batch, torch.stack(sums).tolist(), torch.stack(greedy).tolist()):
            results[i] = (s, g)
    model.train(was_training)
    return results
