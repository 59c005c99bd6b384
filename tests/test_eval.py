"""
eval/ and sample.py on tiny random models, offline on CPU: the built-in HellaSwag
evaluator against lm-evaluation-harness (its own hellaswag preprocessing, run
through our adapter both by simple_evaluate and by our CLI), the scoring
conventions (length normalisation, left truncation, token splitting), the
adapter's rolling log-likelihood and greedy generation, the Hugging Face export
against transformers, each evaluator on the checkpoint's own tokenizer (a byte
model scored on bytes; a tokenizer beyond the model's vocabulary refused), and
sample.py.
"""

import dataclasses
import json
import os

import lm_eval
import pytest
import torch
from lm_eval.api.instance import Instance

import huggingface
import sample
from checkpoint import load_model
from conftest import run_train, scenario_result, tiny_run_args
from data.tokenizer import EOT_TOKEN, get_encoding
from eval import export_hf, harness, hellaswag
from eval.harness import GPTLM
from eval.hellaswag import evaluate_hellaswag, load_hellaswag, preprocess, query_choices_gold, score_examples
from eval.scoring import encode, score_continuations, split_context_continuation
from model import GPT, GPTConfig

NO_AUTOCAST = torch.autocast("cpu", enabled=False)
LM_EVAL_HELLASWAG_YAML = os.path.join(os.path.dirname(lm_eval.__file__), "tasks", "hellaswag", "hellaswag.yaml")

# HellaSwag's original schema; made-up text exercising preprocess ([title], [step],
# double spaces, empty ctx_b, lower-case ctx_b) and one context far longer than
# the tiny models' block_size.
HELLASWAG_EXAMPLES = [
    {"ind": 1, "activity_label": "Removing ice from car", "ctx_a": "Then, the man writes over the snow covering the window of a car, and a woman wearing winter clothes smiles.",
     "ctx_b": "then", "endings": [", the man adds wax to the windshield and cuts it.", ", a person board a ski lift, while two men supporting the head of the person wearing winter clothes snow as the we girls sled.", ", the man puts on a christmas coat, knitted with netting.", ", the man continues removing the snow on his car."],
     "label": 3, "split": "val", "source_id": "activitynet~v_-1IBHYS3L-Y"},
    {"ind": 2, "activity_label": "Baking cookies", "ctx_a": "A female chef in white uniform shows a stack of baking pans in a large kitchen presenting them.",
     "ctx_b": "the pans", "endings": ["contain egg yolks and baking soda.", "are then sprinkled with brown sugar.", "are placed in a strainer on the counter.", "are filled with pastries and loaded into the oven."],
     "label": 3, "split": "val", "source_id": "activitynet~v_-2dxp-mv2zo"},
    {"ind": 3, "activity_label": "Home and Garden", "ctx_a": "[header] How to grow a lemon tree [title] Choose a sunny spot. [step] Lemon trees need  eight hours of sun.",
     "ctx_b": "", "endings": ["[substeps] Water it daily. [title] Feed it in spring.", "Plant it  in the shade of a wall.", "[title] Prune it hard every week.", "Lemons grow best in cold soil."],
     "label": 0, "split": "val", "source_id": "wikihow~12345"},
    {"ind": 4, "activity_label": "Playing the drums", "ctx_a": "A boy sits behind a drum kit.",
     "ctx_b": "he", "endings": ["plays a fast beat with both sticks.", "eats a sandwich on the stage.", "closes the piano lid.", "swims across the pool."],
     "label": 0, "split": "val", "source_id": "activitynet~v_drums"},
    {"ind": 5, "activity_label": "Long story", "ctx_a": " ".join(["The weather was calm and the river ran slowly past the old mill."] * 12),
     "ctx_b": "finally the miller", "endings": ["opened the gates.", "sang to the fish in French.", "sold the mill to a cat.", "flew over the hills."],
     "label": 0, "split": "val", "source_id": "activitynet~v_long"},
    {"ind": 6, "activity_label": "Cleaning windows", "ctx_a": "A woman sprays a window with cleaner.",
     "ctx_b": "She", "endings": ["wipes it with a cloth.", "drinks the cleaner.", "paints the window red and then leaves the building in a hurry.", "laughs."],
     "label": 0, "split": "val", "source_id": "activitynet~v_clean"},
]
TINY = dict(n_layer=2, n_head=2, n_embd=32, dropout=0.0)
BYTE_VOCAB = 264  # config/mini.py's: 256 bytes + <|endoftext|>, padded


def save_checkpoint(model: GPT, path: str, tokenizer: str = "gpt2") -> str:
    """A checkpoint as train.py writes one (the keys checkpoint.load_model and tokenizer_of read)."""
    torch.save({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config),
                "config": {"tokenizer": tokenizer}, "step": 0}, path)
    return path


def tiny_gpt(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(**{"block_size": 64, **TINY, **overrides})).eval()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    return save_checkpoint(tiny_gpt(), str(tmp_path_factory.mktemp("ckpt") / "ckpt.pt"))


@pytest.fixture(scope="module")
def byte_checkpoint(tmp_path_factory) -> str:
    """A model of config/mini.py's byte vocabulary, trained (as its checkpoint says) on byte shards;
    block_size fits HellaSwag's endings in bytes."""
    model = tiny_gpt(vocab_size=BYTE_VOCAB, block_size=256)
    return save_checkpoint(model, str(tmp_path_factory.mktemp("bytes") / "ckpt.pt"), tokenizer="bytes")


def write_hellaswag_jsonl(path: str) -> str:
    """HELLASWAG_EXAMPLES as a HellaSwag jsonl file at path; returns path."""
    with open(path, "w") as f:
        f.write("".join(json.dumps(example) + "\n" for example in HELLASWAG_EXAMPLES))
    return path


@pytest.fixture(scope="module")
def hellaswag_jsonl(tmp_path_factory) -> str:
    return write_hellaswag_jsonl(str(tmp_path_factory.mktemp("data") / "hellaswag_val.jsonl"))


def write_task_yaml(folder, jsonl: str, task: str) -> str:
    """A local lm-eval task: the harness's own hellaswag.yaml (its process_docs,
    prompt and metrics) pointed at a local jsonl."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{task}.yaml"), "w") as f:
        f.write(f"include: {LM_EVAL_HELLASWAG_YAML}\ntask: {task}\ndataset_path: json\n"
                f"dataset_kwargs:\n  data_files:\n    validation: {jsonl}\ntraining_split: null\n")
    return str(folder)


def builtin_result(checkpoint: str, jsonl: str) -> dict:
    model, _ = load_model(checkpoint)
    return evaluate_hellaswag(model, load_hellaswag(jsonl), "cpu", NO_AUTOCAST, batch_size=5)


# ----------------------------------------------------------------- HellaSwag definition


def test_preprocessing_matches_harness():
    import datasets
    from lm_eval.tasks.hellaswag import utils as harness_hellaswag

    for text in ["  a [title] b  [step] c  d ", "x [header] y  z", "plain text."]:
        assert preprocess(text) == harness_hellaswag.preprocess(text)
    harness_docs = harness_hellaswag.process_docs(datasets.Dataset.from_list(HELLASWAG_EXAMPLES))
    for example, doc in zip(HELLASWAG_EXAMPLES, harness_docs):
        assert query_choices_gold(example) == (doc["query"], doc["choices"], doc["gold"])


@pytest.mark.quick
def test_context_continuation_split_matches_template_lm():
    lm = GPTLM(model=tiny_gpt())
    pairs = [("Paris is the capital of", " France"), ("trailing space ", "word"), ("two spaces  ", " x"),
             ("Question: 2+2=", "4"), ("The cat sat on the mat.", " It purred")]
    for context, continuation in pairs:
        assert split_context_continuation(context, continuation) == lm._encode_pair(context, continuation)
    # The trailing space really moves: " word" is one token with its space.
    assert split_context_continuation("trailing space ", "word")[1] == encode(" word")


def test_scores_equal_model_cross_entropy():
    """Independent of the scoring code: the model's own loss over the same tokens."""
    model = tiny_gpt()
    context, continuation = encode("The quick brown fox"), encode(" jumps over the lazy dog")
    (logprob, greedy), = score_continuations(model, [(context, continuation)], "cpu", NO_AUTOCAST, 4)
    tokens = torch.tensor([context + continuation])
    targets = tokens[:, 1:].clone()
    targets[:, : len(context) - 1] = -1  # only the continuation counts
    _, loss = model(tokens[:, :-1], targets)
    assert logprob == pytest.approx(-loss.item() * len(continuation), abs=1e-4)
    assert not greedy
    # A continuation that is the model's own greedy choice is flagged as such.
    next_token = model(tokens, all_logits=True)[0][0, -1].argmax().item()
    assert score_continuations(model, [(context + continuation, [next_token])], "cpu", NO_AUTOCAST, 4)[0][1]


@pytest.mark.quick
def test_acc_norm_divides_by_ending_characters():
    """A model with zero embeddings gives every token the same probability 1/V,
    so an ending's log-likelihood is -(its tokens) * log V: acc prefers the ending
    with the fewest tokens, acc_norm the one with the fewest tokens per character."""
    model = tiny_gpt()
    with torch.no_grad():
        model.transformer.wte.weight.zero_()  # tied with lm_head: all logits 0
    endings = ["no", "yes", "absolutely and without any doubt whatsoever", "ok"]
    examples = [{"activity_label": "Q", "ctx_a": "Is it true?", "ctx_b": "", "endings": endings, "label": label}
                for label in (2, 2, 2, 0)]
    lls = score_examples(model, examples, "cpu", NO_AUTOCAST, 8)[0]
    n_tokens = [len(encode(" " + e)) for e in endings]
    assert lls == pytest.approx([-n * torch.log(torch.tensor(50304.0)).item() for n in n_tokens], rel=1e-5)
    # The length is the ending's WITHOUT the scored leading space: " chandelier" is 3
    # tokens and " yes" 1, and 3/10 < 1/3 while 3/11 > 1/4.
    assert [len(encode(" chandelier")), len(encode(" yes"))] == [3, 1]
    examples.append({"activity_label": "Q", "ctx_a": "Is it true?", "ctx_b": "", "endings": ["yes", "chandelier"],
                     "label": 1})
    result = evaluate_hellaswag(model, examples, "cpu", NO_AUTOCAST, 8)
    # acc picks "no"/"yes" (1 token, first of the ties); acc_norm the endings with most characters per token.
    assert result == {"acc": 0.2, "acc_norm": 0.8, "count": 5}


def test_long_context_is_cut_on_the_left():
    model = tiny_gpt(block_size=32)
    context = encode(" ".join(["The river ran past the mill."] * 20))
    continuation = encode(" The miller slept.")
    assert len(context) > 4 * model.config.block_size

    def score(ctx):
        return score_continuations(model, [(ctx, continuation)], "cpu", NO_AUTOCAST, 2)[0][0]

    window = model.config.block_size + 1 - len(continuation)  # context tokens that still fit
    assert score(context) == score(context[-window:])
    assert score(context) == score([EOT_TOKEN] * (len(context) - window) + context[-window:])
    assert score(context) != score(context[:-window] + [EOT_TOKEN] + context[-window + 1 :])
    # The whole evaluator runs on the long example with a small block_size.
    result = evaluate_hellaswag(model, HELLASWAG_EXAMPLES, "cpu", NO_AUTOCAST, 6)
    assert result["count"] == len(HELLASWAG_EXAMPLES)


# ----------------------------------------------------------------- built-in vs harness


def test_builtin_evaluator_equals_harness(checkpoint, hellaswag_jsonl, tmp_path):
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    model, _ = load_model(checkpoint)
    ours = evaluate_hellaswag(model, load_hellaswag(hellaswag_jsonl), "cpu", NO_AUTOCAST, batch_size=5)
    our_lls = score_examples(model, load_hellaswag(hellaswag_jsonl), "cpu", NO_AUTOCAST, 5)

    task_dir = write_task_yaml(tmp_path / "tasks", hellaswag_jsonl, "hellaswag_local")
    results = simple_evaluate(model=GPTLM(model=model, batch_size=3), tasks=["hellaswag_local"],
                              task_manager=TaskManager(include_path=task_dir, include_defaults=False))
    metrics = results["results"]["hellaswag_local"]
    assert metrics["acc,none"] == ours["acc"]
    assert metrics["acc_norm,none"] == ours["acc_norm"]
    assert ours["count"] == len(HELLASWAG_EXAMPLES)
    assert hellaswag.main(["--checkpoint", checkpoint, "--data", hellaswag_jsonl, "--device", "cpu"]) == ours
    samples = sorted(results["samples"]["hellaswag_local"], key=lambda s: s["doc_id"])
    harness_lls = [[ll for ll, _ in sample["filtered_resps"]] for sample in samples]
    for theirs, mine in zip(harness_lls, our_lls, strict=True):
        assert theirs == pytest.approx(mine, rel=1e-6)  # float32 sums, batched differently


def test_cli_writes_results_next_to_checkpoint(checkpoint, hellaswag_jsonl, tmp_path, capsys):
    # Named like the built-in task, so the paper table's HellaSwag column fills;
    # --include_path tasks take precedence over the built-in ones.
    task_dir = write_task_yaml(tmp_path / "tasks", hellaswag_jsonl, "hellaswag")
    harness.main(["--checkpoint", checkpoint, "--tasks", "hellaswag", "--batch_size", "7",
                  "--include_path", task_dir, "--device", "cpu"])
    with open(harness.results_path(checkpoint)) as f:
        metrics = json.load(f)["results"]["hellaswag"]
    ours = builtin_result(checkpoint, hellaswag_jsonl)
    assert (metrics["acc,none"], metrics["acc_norm,none"]) == (ours["acc"], ours["acc_norm"])
    table = capsys.readouterr().out
    assert "| ARC-E | ARC-C | BoolQ | HellaSwag | OBQA | PIQA |" in table
    assert f"{100 * ours['acc_norm']:.2f}" in table


def test_the_task_index_is_the_include_paths_alone_where_it_defines_every_task(hellaswag_jsonl, tmp_path):
    """eval.harness indexes --include_path alone when the tasks asked for are all defined there (a task, a
    glob, a group of them), instead of lm-eval's 14,683 tasks too (13 s a run); a local group holding one
    of lm-eval's own tasks, or a tag (lm-eval's tasks may carry it too), takes lm-eval's index as well."""
    from lm_eval.tasks import TaskManager

    task_dir = write_task_yaml(tmp_path / "tasks", hellaswag_jsonl, "hellaswag")
    write_task_yaml(tmp_path / "tasks", hellaswag_jsonl, "local_b")
    (tmp_path / "tasks" / "ours.yaml").write_text("group: ours\ntask:\n  - hellaswag\n  - local_b\n")
    (tmp_path / "tasks" / "mixed.yaml").write_text("group: mixed\ntask:\n  - local_b\n  - arc_easy\n")
    index = harness.task_index(["hellaswag", "local_*", "ours"], task_dir)
    assert index.all_tasks == ["hellaswag", "local_b", "mixed", "multiple_choice", "ours"]  # (the tag: hellaswag's)
    assert harness.known_tasks(["ours", "local_*"], index) == ["ours", "local_b"]
    local = TaskManager(include_path=task_dir, include_defaults=False)
    assert [harness.defined_in(local, name) for name in ("ours", "mixed", "multiple_choice", "arc_easy")] == \
        [True, False, False, False]


def test_harness_registration_keeps_builtin_models():
    from lm_eval.api.registry import get_model, model_registry

    assert get_model("mars_gpt") is GPTLM
    assert "hf" in model_registry and "vllm" in model_registry


def two_rank_scenarios(tiny_dataset: str, folder) -> list[tuple]:
    """For conftest.two_ranks: HellaSwag scored by 2 ranks, each its share of the examples."""
    return [("eval_sharded_hellaswag", "test_eval:sharded_hellaswag", dict(folder=str(folder / "eval_sharded")))]


def sharded_hellaswag(rt, folder: str) -> dict:
    """Rank 0 writes a checkpoint and the examples into folder; every rank scores its share; each rank's result."""
    from ranks import on_main_rank

    checkpoint, jsonl = os.path.join(folder, "ckpt.pt"), os.path.join(folder, "hellaswag_val.jsonl")

    def write() -> None:
        os.makedirs(folder)
        save_checkpoint(tiny_gpt(), checkpoint)
        write_hellaswag_jsonl(jsonl)

    on_main_rank(rt, write)
    model, _ = load_model(checkpoint)
    mine = evaluate_hellaswag(model, load_hellaswag(jsonl), "cpu", NO_AUTOCAST, 4, rt.rank, rt.world_size)
    results = [None] * rt.world_size
    torch.distributed.all_gather_object(results, mine)
    return dict(checkpoint=checkpoint, jsonl=jsonl, results=results)


def test_ddp_sharded_evaluation_equals_single_process(two_ranks):
    sharded = scenario_result(two_ranks, "eval_sharded_hellaswag")
    single = builtin_result(sharded["checkpoint"], sharded["jsonl"])
    assert sharded["results"] == [single, single]


# ----------------------------------------------------------------- harness: rolling, generation


def test_rolling_loglikelihood_equals_windowed_model_loss():
    """lm-eval's rolling windows: the tokens of <|endoftext|> + text are predicted
    block_size at a time, each block from the block_size tokens before its end
    (the last, partial block still sees a full window); here with the model's own loss."""
    block_size = 16
    model = tiny_gpt(block_size=block_size)
    lm = GPTLM(model=model, batch_size=4)
    texts = ["A short text.", " ".join(["Windows roll over a longer document, token after token."] * 5)]
    rolling = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (t,), 0) for t in texts])
    for text, value in zip(texts, rolling):
        sequence = torch.tensor([EOT_TOKEN] + encode(text))
        n_predicted = len(sequence) - 1
        expected = 0.0
        for start in range(0, n_predicted, block_size):
            end = min(start + block_size, n_predicted)  # this block predicts sequence[start + 1 : end + 1]
            first = max(0, end - block_size)
            targets = sequence[first + 1 : end + 1].clone()
            targets[: start - first] = -1  # already predicted by the previous block
            _, loss = model(sequence[first:end][None], targets[None])
            expected -= loss.item() * (end - start)
        assert value == pytest.approx(expected, abs=1e-3)
    assert len(encode(texts[1])) > 3 * block_size and len(encode(texts[1])) % block_size  # a partial last block


def reference_greedy(model: GPT, context: list[int], max_new_tokens: int, tokenizer: str = "gpt2") -> list[int]:
    """One sequence at a time, no padding; argmax over the tokenizer's real tokens."""
    tokens = list(context)
    for _ in range(max_new_tokens):
        logits, _ = model(torch.tensor([tokens]))
        tokens.append(logits[0, -1, : get_encoding(tokenizer).n_vocab].argmax().item())
    return tokens[len(context) :]


def test_generate_until_is_batched_greedy_with_stop_sequences():
    model = tiny_gpt(seed=3)
    lm = GPTLM(model=model, batch_size=3)
    decode = get_encoding().decode
    contexts = ["Once upon a time", "The", "In a galaxy far, far away there lived"]
    references = [decode(reference_greedy(model, encode(c), 8)) for c in contexts]
    requests = [Instance("generate_until", {}, (c, {"until": [], "max_gen_toks": 8}), i)
                for i, c in enumerate(contexts)]
    assert lm.generate_until(requests) == references  # right padding changes nothing
    # A stop sequence cuts the text before its first occurrence.
    stop = references[0][len(references[0]) // 2 :][:3]
    stopped = lm.generate_until([Instance("generate_until", {}, (contexts[0], {"until": [stop], "max_gen_toks": 8}), 0)])
    assert stopped == [references[0][: references[0].find(stop)]]


def test_generate_until_on_bytes_runs_to_its_limit_and_stops_at_eot():
    """The byte tokenizer's EOT decodes to no text: as a stop sequence ("") it would end every
    generation after one byte, so EOT ends a sequence by its id instead."""
    model = tiny_gpt(seed=3, vocab_size=BYTE_VOCAB)
    lm = GPTLM(model=model, batch_size=2, tokenizer="bytes")
    context, enc = "Once upon a time", get_encoding("bytes")
    reference = reference_greedy(model, encode(context, enc), 8, "bytes")
    assert enc.eot_token not in reference  # (this seed) so the text runs to max_gen_toks
    request = Instance("generate_until", {}, (context, {"until": [], "max_gen_toks": 8}), 0)
    assert lm.generate_until([request]) == [enc.decode(reference)]
    with torch.no_grad():  # every position's likeliest next token is now EOT
        wte = model.transformer.wte.weight
        wte[enc.eot_token] *= 10
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.copy_(wte[enc.eot_token])
    forwards = []
    model.register_forward_hook(lambda *_: forwards.append(1))
    assert lm.generate_until([request]) == [""] and len(forwards) == 1


# ----------------------------------------------------------------- Hugging Face export


@pytest.mark.parametrize("overrides", [
    dict(scale_attn_by_inverse_layer_idx=True), dict(bias=False),
    dict(architecture="llama", bias=False),  # llm-baselines' Llama: tied head
    dict(architecture="llama", bias=False, tie_embeddings=False, init="fan_in", mlp_ratio=4),  # Wen et al.'s
], ids=["gpt2-inverse-layer-scaling", "gpt2-no-bias", "llama-tied", "llama-untied"])
def test_export_loads_in_transformers_with_equal_logits(overrides, tmp_path, capsys):
    """The exported folder (GPT2LMHeadModel, or LlamaForCausalLM with q_proj and k_proj in Hugging Face's rotary
    layout) computes our logits in float32."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = tiny_gpt(seed=1, n_layer=3, **overrides)
    with torch.no_grad():  # non-zero biases and norm weights, so their layout is tested
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
    checkpoint = save_checkpoint(model, str(tmp_path / "ckpt.pt"))
    export_hf.main(["--checkpoint", checkpoint, "--out", str(tmp_path / "hf")])
    expected = export_hf.HF_ARCHITECTURES[model.config.architecture]
    assert f"wrote {expected} folder" in capsys.readouterr().out
    modes = {f.name: f.stat().st_mode & 0o777 for f in (tmp_path / "hf").iterdir()}
    assert modes["model.safetensors"] == modes["config.json"], modes  # (readable as the others, not 0600)
    hf_model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf")).eval()
    assert type(hf_model).__name__ == expected
    if model.config.architecture == "gpt2":
        assert hf_model.config.scale_attn_by_inverse_layer_idx == model.config.scale_attn_by_inverse_layer_idx
    else:
        assert hf_model.config.tie_word_embeddings == model.config.tie_embeddings

    tokens = torch.randint(0, 50257, (2, model.config.block_size), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours, _ = model(tokens, all_logits=True)
        theirs = hf_model(tokens).logits
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=0)

    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    text = "Hello world!  It's 2024 - naïve café 日本語\n\n  tabs\tand   spaces<|endoftext|>'ll"
    assert tokenizer.encode(text) == encode(text)
    assert tokenizer.eos_token_id == EOT_TOKEN


def test_export_refuses_what_gpt2_cannot_express(monkeypatch):
    monkeypatch.setattr(huggingface, "EXPRESSIBLE_FIELDS", huggingface.EXPRESSIBLE_FIELDS - {"bias"})
    with pytest.raises(ValueError, match="bias"):
        export_hf.hf_config(GPTConfig(**TINY))


def test_export_refuses_a_byte_tokenizer_checkpoint(byte_checkpoint, tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        export_hf.main(["--checkpoint", byte_checkpoint, "--out", str(tmp_path / "hf")])
    error = capsys.readouterr().err
    assert stopped.value.code == 2 and f"{byte_checkpoint} was trained with the 'bytes' tokenizer" in error
    assert "the Hugging Face export writes GPT-2's tokenizer" in error
    assert not (tmp_path / "hf").exists()  # refused before anything is written


# ----------------------------------------------------------------- the checkpoint's own tokenizer


def test_hellaswag_and_harness_score_a_byte_model_on_its_bytes(byte_checkpoint, hellaswag_jsonl, tmp_path):
    """A byte-tokenizer checkpoint (config/mini.py's kind) is scored on its own tokens by both
    evaluators: GPT-2 ids would index past its 264-row embedding."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    ours = hellaswag.main(["--checkpoint", byte_checkpoint, "--data", hellaswag_jsonl, "--device", "cpu"])
    assert ours["count"] == len(HELLASWAG_EXAMPLES)
    enc = get_encoding("bytes")
    assert split_context_continuation("Hi there", " you", enc) == (list(b"Hi there"), list(b" you"))
    our_lls = score_examples(load_model(byte_checkpoint)[0], load_hellaswag(hellaswag_jsonl), "cpu", NO_AUTOCAST, 5, enc)

    task_dir = write_task_yaml(tmp_path / "tasks", hellaswag_jsonl, "hellaswag_local")
    results = simple_evaluate(model=GPTLM(checkpoint=byte_checkpoint, batch_size=3), tasks=["hellaswag_local"],
                              task_manager=TaskManager(include_path=task_dir, include_defaults=False))
    metrics = results["results"]["hellaswag_local"]
    assert (metrics["acc,none"], metrics["acc_norm,none"]) == (ours["acc"], ours["acc_norm"])
    samples = sorted(results["samples"]["hellaswag_local"], key=lambda s: s["doc_id"])
    for sample, mine in zip(samples, our_lls, strict=True):
        assert [ll for ll, _ in sample["filtered_resps"]] == pytest.approx(mine, rel=1e-6)


def test_a_tokenizer_beyond_the_models_vocabulary_is_refused(hellaswag_jsonl, tmp_path, capsys):
    """A checkpoint whose run says GPT-2 tokens but whose model has 264 ids (byte shards trained
    under the default tokenizer setting): each entry point names the mismatch, exit status 2,
    instead of an IndexError (on CUDA, a device-side assert)."""
    checkpoint = save_checkpoint(tiny_gpt(vocab_size=BYTE_VOCAB), str(tmp_path / "ckpt.pt"))
    task_dir = write_task_yaml(tmp_path / "tasks", hellaswag_jsonl, "hellaswag")
    commands = [
        lambda: hellaswag.main(["--checkpoint", checkpoint, "--data", hellaswag_jsonl, "--device", "cpu"]),
        lambda: harness.main(["--checkpoint", checkpoint, "--tasks", "hellaswag", "--include_path", task_dir,
                              "--device", "cpu"]),
        lambda: export_hf.main(["--checkpoint", checkpoint, "--out", str(tmp_path / "hf")]),
    ]
    for command in commands:
        with pytest.raises(SystemExit) as stopped:
            command()
        error = capsys.readouterr().err
        assert stopped.value.code == 2 and "vocabulary of 264 ids but its tokenizer 'gpt2' has 50257" in error
    assert sorted(os.listdir(tmp_path)) == ["ckpt.pt", "tasks"]  # no results, no export


def test_hellaswag_in_the_training_loop_uses_the_runs_tokenizer(tiny_dataset, hellaswag_jsonl, tmp_path):
    """train.py's HellaSwag tokenises with the run's `tokenizer`, refused where its ids do not fit
    the model (GPT-2 tokens, vocab_size 128): a named error, exit 2, no IndexError traceback."""
    args = tiny_run_args(tiny_dataset, str(tmp_path / "run"), vocab_size=128, hellaswag_interval=6,
                         hellaswag_file=hellaswag_jsonl)
    proc = run_train(args, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "vocabulary of 128 ids but its tokenizer 'gpt2' has 50257" in proc.stderr


# ----------------------------------------------------------------- sample.py


def test_sample_cli_is_reproducible(checkpoint, tmp_path, capsys):
    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text("The meaning of life is")
    args = ["--checkpoint", checkpoint, "--prompt", f"FILE:{prompt_file}", "--num_samples", "2",
            "--max_new_tokens", "12", "--temperature", "1.0", "--top_k", "50", "--device", "cpu"]
    first = sample.main(args + ["--seed", "1"])
    again = sample.main(args + ["--seed", "1"])
    other = sample.main(args + ["--seed", "2"])
    assert first == again != other
    assert len(first) == 2 and first[0] != first[1]
    assert all(s.startswith("The meaning of life is") for s in first)
    assert capsys.readouterr().out.count("---------------") == 6
    greedy = sample.main(["--checkpoint", checkpoint, "--prompt", "", "--num_samples", "2", "--max_new_tokens", "5",
                          "--temperature", "0", "--device", "cpu"])
    assert greedy[0] == greedy[1] and greedy[0].startswith("<|endoftext|>")
