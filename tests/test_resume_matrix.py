"""
Every optimizer resumes from every kind of checkpoint: each variant of the registry (every optimizer's
mini recipes, and each of them with every other value of each setting that shapes its state) x each
transition a preempted run may take (every optimizer's first recipe, on GPT-2; the 4-rank ones AdamW's for the
optimizers of element-wise state, ELEMENT_WISE), or those that change the state's layout between one process and
FSDP over 2 ranks (its other variants, or its only one again but for ELEMENT_WISE's, on the Llama),
train.py's own loop (train.train_on) running every leg.

A straight run of STEPS steps checkpoints on the way; each resume copies its folder cut back to the
step-2 checkpoint (as a preempted run's is), resumes it to the end, and its final weights are compared
with those of the run it continues (TRANSITIONS, CONTINUES):
  fsdp2 -> fsdp2                      bit for bit; its own saves asynchronous (async_checkpoint)
  fsdp2 async -> fsdp2                bit for bit, from the step-3 checkpoint written while step 4 trained
  fsdp2 <-> ddp2                      within 1e-6 (the same world size, another parallelism)
  fsdp2 -> fsdp4, fsdp2 <-> one       within 1e-5 (another world size: into uneven row splits, out of and
                                      into one's single file), or what the change of world size alone
                                      moves the straight run
and a corrupt newest checkpoint (a byte of rank 1's optimizer shard flipped; AdamW's and SOAP's) is skipped, by
name, for the one before it. The straight runs themselves end where one process ends: FSDP and DDP over 2 ranks
bit for bit, FSDP over 4 (with activation checkpointing) within 1e-5, their diagnostics alike.
Four launches in all (tests/ranks.py): 2 ranks, 4 ranks, one process, 2 ranks; the 4-rank launch also runs
tests/test_optim_ddp.py's matrix optimizers on 4 ranks.
"""

import dataclasses
import functools
import json
import os
import shutil

import pytest
import torch

from conftest import (
    cut_back, flip_middle_byte, relative_difference, run_scenarios, scenario_result, step_weights, without_key_bias,
)
from model import GPT, GPTConfig
from config.cells import MINI_RECIPES
from optim import OPTIMIZERS, build_optimizer, load_config
from optim.contract import EvaluationWeights
from test_optim_ddp import ROW_BLOCK_SUMS, check_against_one_process

STEPS, SOURCE_STEP = 4, 2
# How far a resumed run's final weights may be from those of the run it continues (the attention's key bias
# left out: conftest.without_key_bias): bit for bit at the same world size and parallelism; at the same
# world size under another parallelism, 1e-6 (gradients summed in another order; measured: at most 7e-8);
# at another world size, 1e-6 too (gloo's sum over 4 ranks rounds otherwise; measured: at most 2.6e-7, and
# 1.2e-6 for Muon, whose Newton-Schulz runs on other row splits: below what the change alone moves its run).
SAME, OTHER_PARALLELISM, OTHER_WORLD_SIZE = 0.0, 1e-6, 1e-6
# Except where the change of world size alone moves the uninterrupted run farther: SOAP takes its bases
# from rank-deficient statistics, whose null space eigh fills by rounding, so its straight runs over 2 and 4
# ranks end 0.11 apart (0.65 rotating 1-D parameters, rank-1 statistics); a resume across them may land no
# farther from the run it continues than that (measured: 2.9e-6 and 0.19).
# A tiny model whose matrices split unevenly over 2 and 4 ranks (c_attn: 102 rows, the position table:
# 30), the same 8-sequence batch at every world size (micro-batch 8 / world size, one micro-step). One
# block: every kind of parameter and two FSDP groups (the block's, the root's), and a third fewer tensors
# in each of the matrix's 247 sharded saves and its sharded loads (DCP's cost goes by tensors, not bytes).
SHAPE = ["--n_layer=1", "--n_head=2", "--n_embd=34", "--block_size=30", "--vocab_size=128", "--total_batch_size=240",
         "--dropout=0.0", "--warmup_iters=2", f"--max_iters={STEPS}", "--grad_clip=5.0", "--grad_multiplier=10",
         "--compile=False", "--device=cpu", "--ckpt_interval=2", "--ckpt_keep=10", f"--eval_interval={STEPS}",
         "--eval_sequences=8", f"--log_interval={STEPS}", "--sample_tokens=0"]
MICRO_BATCH = {1: 4, 2: 4, 4: 2}
# SOAP (and SOAP-Muon) refreshes its bases every 2 steps, so both sides of a resume do (the statistics and the
# bases are its state); a side over 40 is not rotated (the embedding's 128 rows); eps 1e-4 keeps the steps in the
# null space of its statistics (rounding noise, normalised) from moving its runs by O(lr) at another world size.
# Cautious AdamW runs without biases: the attention's key bias has a gradient of rounding noise (conftest.
# without_key_bias), whose sign, and so its mask, differs between world sizes, and the mask's mean rescales the
# whole bias tensor's update (its queries' and values' too), by O(1) at another world size.
# Shampoo computes its root inverses every 2 steps (its mini recipe's 5 would leave four steps to grafting alone);
# epsilon 1e-3 (as SOAP's eps 1e-4): its factors are rank-deficient (four steps of gradients), and their root
# inverses scale the rounding in their null space by epsilon^(-1/4), so that FSDP over 4 ranks (gloo's sums in
# another order) ended 0.02-0.07 from one process at the package's 1e-12, and 1.06e-5 at 1e-4 with every parameter
# on Shampoo (1-D ones too).
# Prodigy starts from a first step size of 1e-3, not 1e-6 (d0 x d_coef at its authors' learning rate 1, not its
# mini recipe's swept 0.25), so that its four steps move the weights (and a d estimated from one rank's blocks
# alone would move them elsewhere).
EXTRA_ARGS = {"soap": ["--precondition_frequency=2", "--max_precond_dim=40", "--eps=1e-4"],
              "soap-muon": ["--precondition_frequency=2"],
              "cautious-adamw": ["--bias=False"], "prodigy": ["--learning_rate=1.0", "--prodigy_d0=1e-5",
                                                                "--prodigy_d_coef=100"],
              "sophia": ["--sophia_hessian_interval=2"], "shampoo": ["--precondition_frequency=2", "--epsilon=1e-3"],
              # tau below the tiny model's largest logits (about 0.046): every step clips, by the maximum over
              # every rank's micro-batches
              "muonclip": ["--qk_clip_tau=0.04"],
              # its authors' re-initialisation (drawn whole on every rank, each keeping its rows under FSDP), at their
              # shallow GPT's radii: Sign's lmo of a near-zero momentum flips with the sums' order, and at the tied
              # radius 3000 a flip moves a weight 300 times as far (FSDP over 4 ended 1.3e-4 from one process)
              "scion": ["--scion_init=True", "--scion_hidden_scale=3", "--scion_output_scale=10"]}
# Settings that only move parameters between two param groups of one rule: no state of their own to lose; and
# settings that move only an untied head (hyperball_head: the matrix's models tie theirs, so it changes nothing here).
GROUPING_ONLY = {"decay_embeddings", "hyperball_head"}
# Choices that keep the same state as another choice of the same setting that runs: Shampoo's AdaGrad and RMSProp
# grafting keep one second moment per element, as its Adam grafting (its mini recipe's) does.
SAME_STATE = {("grafting", "adagrad"), ("grafting", "rmsprop")}

# Each transition's leg, the straight run it continues (the run it was cut from, or for fsdp2_from_async the
# run its source continues), and how far its final weights may be from that run's.
# (No fsdp4 -> fsdp2: a change of world size out of sharded files is fsdp2 -> one's, and out of 4 ranks' uneven
# splits it would add a 2-rank leg per optimizer for what DCP's resharding reads alike.)
CONTINUES = {"fsdp2_async": "fsdp2", "fsdp2_from_async": "fsdp2", "fsdp2_to_fsdp4": "fsdp2", "fsdp2_to_ddp2": "fsdp2",
             "ddp2_to_fsdp2": "ddp2", "fsdp2_to_one": "fsdp2", "one_to_fsdp2": "one"}
TRANSITIONS = {"fsdp2_async": SAME, "fsdp2_from_async": SAME, "fsdp2_to_fsdp4": OTHER_WORLD_SIZE,
               "fsdp2_to_ddp2": OTHER_PARALLELISM, "ddp2_to_fsdp2": OTHER_PARALLELISM, "fsdp2_to_one": OTHER_WORLD_SIZE,
               "one_to_fsdp2": OTHER_WORLD_SIZE}
RESUMED_FROM = {"fsdp2_from_async": 3}  # the others resume from SOURCE_STEP
# The straight run at the other world size of a transition that changes it.
DESTINATION = {"fsdp2_to_fsdp4": "fsdp4", "fsdp2_to_one": "one", "one_to_fsdp2": "fsdp2"}


# A Llama variant (its name ends in @llama) runs the Llama block on the same shape, but with one head of 34
# (rotary embeddings pair a head's dimensions: an even head size) and no position table.
LLAMA, LLAMA_SHAPE = "@llama", ["--model=llama-124m", "--n_head=1"]
# Every Llama variant takes the transitions that change its state's layout between one process and FSDP over 2 ranks
# (LLAMA_TRANSITIONS): what a setting that shapes the state (MARS's mars_type, Kron's merged dimensions, SOAP's 1-D
# preconditioning, ...) puts through resharding. The asynchronous saves, DDP (whose checkpoint is one process's single
# file), the 4-rank legs (uneven row splits) and the corrupt checkpoint, which every state goes through alike, are
# taken on GPT-2, by every optimizer's first recipe.
# A Llama copy (its name ends in @llama-copy) is an optimizer's only recipe run again on the Llama, so that every
# family's state goes through the Llama block.
LLAMA_COPY = LLAMA + "-copy"
LLAMA_TRANSITIONS = ("fsdp2_to_one", "one_to_fsdp2")
LLAMA_STRAIGHT_RUNS = ("fsdp2", "one")  # the runs they continue
# Optimizers whose state is element-wise, each entry a function of its own element and of scalars alone (no norm,
# mean or product over a tensor's rows): resharding moves their state as it moves the weights, so AdamW stands for
# them in the 4-rank legs (uneven row splits) and on the Llama block, and they take the other transitions on GPT-2.
# (Cautious AdamW's mask mean, Prodigy's and Sophia's sums, MARS's norms, Adam-mini's block means reduce over rows:
# they take every leg.)
ELEMENT_WISE = {"lion", "nadamw", "ademamix", "schedule_free_adamw", "adopt", "signum"}  # (recipes)
# A corrupt checkpoint is found by its files' checksums before any state is read, whatever the optimizer: two
# stand for all, one of element-wise state and one whose state holds lists of tensors (SOAP's).
CORRUPTED = {"adamw", "soap"}  # (recipes)


def state_variants() -> dict[str, list[str]]:
    """Every registry optimizer's mini recipes, and its first recipe with each other value of every
    setting that shapes its state (its Hyperparameters.state_keys: a boolean flipped, each other choice),
    one at a time (but SAME_STATE's); a variant whose settings equal an earlier one's is left out. The first recipe
    of each optimizer runs GPT-2; its other variants run the Llama, and an optimizer with no other variant runs its
    first recipe on the Llama too (a Llama copy): every optimizer family on both models."""
    variants, seen = {}, set()
    for spec in OPTIMIZERS.values():
        recipes = {name: recipe.args.split() for name, recipe in MINI_RECIPES[spec.name].items()}
        first_name, first_args = next(iter(recipes.items()))
        defaults = load_config(first_args).hyperparameters
        for key in spec.hyperparameters.state_keys:
            if key in GROUPING_ONLY:
                continue
            field = spec.hyperparameters.__dataclass_fields__[key]
            value = getattr(defaults, key)
            choices = [not value] if isinstance(value, bool) else field.metadata.get("choices", ())
            others = [c for c in choices if c != value and (key, c) not in SAME_STATE]
            for other in others:
                recipes[f"{first_name}+{key}={other}"] = first_args + [f"--{key}={other}"]
        own = []
        for i, (name, args) in enumerate(recipes.items()):
            settings = repr(dataclasses.asdict(load_config(args).hyperparameters) | {"optimizer": spec.name})
            if settings not in seen:
                seen.add(settings)
                own.append(name + (LLAMA if i else ""))
                variants[own[-1]] = args + EXTRA_ARGS.get(spec.name, [])
        if len(own) == 1 and first_name not in ELEMENT_WISE:  # no other variant to run the Llama
            variants[first_name + LLAMA_COPY] = variants[first_name]
    return variants


def recipe_of(variant: str) -> str:
    """The mini recipe a variant runs (its name less its settings and model)."""
    return variant.split("+")[0].split("@")[0]


# RESUME_MATRIX_ONLY=prodigy,mars_exact runs those mini recipes' variants alone (while working on one; CI runs all).
ONLY = [name for name in os.environ.get("RESUME_MATRIX_ONLY", "").split(",") if name]
VARIANTS = {v: args for v, args in state_variants().items()
            if not ONLY or recipe_of(v) in ONLY}
FULL = [v for v in VARIANTS if LLAMA not in v]  # the variants that take every transition: GPT-2's
FOUR_RANKS = [v for v in FULL if recipe_of(v) not in ELEMENT_WISE]  # ... and of those, the 4-rank legs too
CASES = [(v, t) for v in VARIANTS for t in TRANSITIONS
         if (v in FULL or t in LLAMA_TRANSITIONS) and (v in FOUR_RANKS or t != "fsdp2_to_fsdp4")]


def run_args(variant: str, data_dir: str, out_dir: str, world_size: int, data_parallel: str = "fsdp",
             **overrides) -> list[str]:
    settings = dict(data_dir=data_dir, out_dir=out_dir, micro_batch_size=MICRO_BATCH[world_size],
                    data_parallel=data_parallel) | overrides
    shape = SHAPE + (LLAMA_SHAPE if LLAMA in variant else [])
    return [*VARIANTS[variant], *shape, *(f"--{k}={v}" for k, v in settings.items())]


def straight(name: str, args: list[str]) -> tuple:
    return (name, "ranks:train", dict(args=args))


def resumed(name: str, source_run: str, step: int, args: list[str]) -> tuple:
    return (name, "test_resume_matrix:resume_leg", dict(source_run=source_run, step=step, args=args))


def out_dir_of(args: list[str]) -> str:
    return next(a for a in reversed(args) if a.startswith("--out_dir=")).removeprefix("--out_dir=")


def resume_leg(rt, source_run: str, step: int, args: list[str]) -> dict:
    """train.py resuming, in its own out_dir, a copy of source_run cut back to its checkpoint at `step`."""
    from ranks import on_main_rank, train

    on_main_rank(rt, lambda: cut_back(source_run, step, out_dir_of(args)))
    return train(rt, args)


def corrupt_newest(rt, source_run: str, args: list[str]) -> dict:
    """train.py scoring (eval_only) a copy of source_run whose newest checkpoint has a byte of rank 1's
    optimizer shard flipped."""
    from ranks import on_main_rank, train

    def copy_and_corrupt() -> None:
        shutil.copytree(source_run, out_dir_of(args), symlinks=True)
        flip_middle_byte(os.path.join(out_dir_of(args), f"ckpt_{STEPS:07d}", "optimizer", "__1_0.distcp"))

    on_main_rank(rt, copy_and_corrupt)
    return train(rt, args)


def built(variant: str) -> tuple[GPT, torch.optim.Optimizer]:
    """The model and optimizer train.py starts a run of this variant with (torch.manual_seed(seed), the model, then
    the optimizer's builder: scion_init draws the weights anew)."""
    cfg = load_config(run_args(variant, "unused", "unused", 1, "ddp"))
    torch.manual_seed(cfg.seed)
    model = GPT(GPTConfig(**cfg.model_args()))
    return model, build_optimizer(model, cfg, "cpu")


@functools.cache
def straight_ckpt_interval(variant: str) -> int:
    """How often a variant's straight runs save: at steps 2 and 4, as the resumes do; but at every step, as the
    asynchronous leg of a GPT-2 variant does, for an optimizer whose weights swap at a save (an EvaluationWeights:
    Schedule-Free's y -> x -> y rounds), so that the runs compared bit for bit save at the same steps."""
    if variant not in FULL:
        return SOURCE_STEP
    return 1 if isinstance(built(variant)[1], EvaluationWeights) else SOURCE_STEP


def legs(data_dir: str, root: str) -> dict[str, tuple[int, list[tuple]]]:
    """Each launch's (ranks, scenarios), in the order they run (0 ranks: one process)."""
    launches = {"first": (2, []), "four": (4, []), "one": (0, []), "last": (2, [])}
    for v in VARIANTS:
        run = {leg: os.path.join(root, v, leg) for leg in ("fsdp2", "ddp2", "fsdp4", "one", *TRANSITIONS, "corrupt")}

        def args(leg: str, world_size: int, data_parallel: str = "fsdp", **overrides) -> list[str]:
            return run_args(v, data_dir, run[leg], world_size, data_parallel, **overrides)

        def resume(leg: str, source: str, world_size: int, data_parallel: str = "fsdp", step: int = SOURCE_STEP,
                   **overrides) -> tuple:
            return resumed(f"{v}/{leg}", run[source], step,
                           args(leg, world_size, data_parallel, **overrides) + ["--init_from=resume"])

        taken = None if v in FULL else {*LLAMA_STRAIGHT_RUNS, *LLAMA_TRANSITIONS}  # (a Llama variant's legs)

        def add(launch: str, scenarios: list[tuple]) -> None:
            launches[launch][1].extend(s for s in scenarios if taken is None or s[0].split("/")[-1] in taken)

        straight_saves = straight_ckpt_interval(v)
        add("first", [
            straight(f"{v}/fsdp2", args("fsdp2", 2, ckpt_interval=straight_saves)),
            # asynchronous saves at steps 3 (written while step 4 trains) and 4
            resume("fsdp2_async", "fsdp2", 2, async_checkpoint=True, ckpt_interval=1),
            resume("fsdp2_from_async", "fsdp2_async", 2, step=3, ckpt_interval=1),
            straight(f"{v}/ddp2", args("ddp2", 2, "ddp", ckpt_interval=straight_saves)),
            resume("ddp2_to_fsdp2", "ddp2", 2),
            resume("fsdp2_to_ddp2", "fsdp2", 2, "ddp"),
        ])
        if recipe_of(v) in CORRUPTED:
            add("first", [(f"{v}/corrupt", "test_resume_matrix:corrupt_newest",
                           dict(source_run=run["fsdp2"], args=args("corrupt", 2, eval_only=True)))])
        if v in FOUR_RANKS:
            add("four", [
                straight(f"{v}/fsdp4", args("fsdp4", 4, activation_checkpointing=True)),
                resume("fsdp2_to_fsdp4", "fsdp2", 4),
            ])
        add("one", [
            straight(f"{v}/one", args("one", 1, "ddp", ckpt_interval=straight_saves)),
            resume("fsdp2_to_one", "fsdp2", 1, "ddp"),
        ])
        add("last", [
            resume("one_to_fsdp2", "one", 2),
        ])
    # the matrix optimizers on fixed gradients (tests/test_optim_ddp.py), in this launch for their 4 ranks
    launches["four"][1].append(("matrix_optimizers_four", "test_optim_ddp:results_of_ranks", {}))
    return launches


@pytest.fixture(scope="module")
def matrix(tiny_dataset, tmp_path_factory) -> tuple[str, dict]:
    """The four launches, in order; (the runs' folder, every scenario's result by name)."""
    root = str(tmp_path_factory.mktemp("matrix"))
    results = {}
    for launch, (nproc, plan) in legs(tiny_dataset, root).items():
        results |= run_scenarios(plan, os.path.join(root, f"launch_{launch}"), nproc=nproc, timeout=1800)
    return root, results


def test_every_matrix_optimizer_on_four_ranks_equals_one_process(matrix):
    """tests/test_optim_ddp.py's check on 4 ranks: plain and sharded parameters, each rank its share of NS5."""
    check_against_one_process(scenario_result(matrix[1], "matrix_optimizers_four"), 4)


@functools.cache  # each run's final checkpoint is read once, for all the tests that compare with it (read only)
def final_weights(run: str) -> dict:
    return step_weights(run, STEPS)


@pytest.mark.parametrize("variant, transition", CASES)
def test_resume_lands_where_the_straight_run_does(matrix, variant, transition):
    root, results = matrix
    straight = scenario_result(results, f"{variant}/{CONTINUES[transition]}")
    assert straight["status"] == 0, straight["output"][-3000:]
    resumed = scenario_result(results, f"{variant}/{transition}")
    step = RESUMED_FROM.get(transition, SOURCE_STEP)
    assert resumed["status"] == 0 and f"at step {step}" in resumed["output"], resumed["output"][-3000:]
    assert "resuming" in resumed["output"], resumed["output"][-3000:]
    want = final_weights(os.path.join(root, variant, CONTINUES[transition]))
    got = final_weights(os.path.join(root, variant, transition))
    if TRANSITIONS[transition] == SAME:
        assert all(torch.equal(want[k], got[k]) for k in want), [k for k in want if not torch.equal(want[k], got[k])]
    else:
        tolerance = TRANSITIONS[transition]
        if transition in DESTINATION:  # no farther than the change of world size alone moves the straight run
            destination = final_weights(os.path.join(root, variant, DESTINATION[transition]))
            tolerance = max(tolerance, relative_difference(without_key_bias(destination), without_key_bias(want)))
        difference = relative_difference(without_key_bias(got), without_key_bias(want))
        assert difference <= tolerance, (difference, tolerance)


@pytest.mark.parametrize("variant", [v for v in FULL if recipe_of(v) in CORRUPTED])
def test_a_corrupt_sharded_checkpoint_is_skipped_for_the_one_before(matrix, variant):
    """eval_only on a copy of the straight run whose newest checkpoint (step 4) has a flipped byte in rank 1's
    optimizer shard: skipped with its reason, the checkpoint before it (step 2) scored instead."""
    _, results = matrix
    scored = scenario_result(results, f"{variant}/corrupt")
    output = scored["output"]
    assert scored["status"] == 0, output[-3000:]
    assert "skipping checkpoint: " in output and "optimizer/__1_0.distcp's sha256 differs" in output, output[-3000:]
    before = STEPS - straight_ckpt_interval(variant)
    assert f"ckpt_{before:07d} at step {before}" in output, output[-3000:]


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_sharded_run_folder_holds_each_ranks_own_shards(matrix, variant):
    """The straight FSDP run's folder: a checkpoint per save, each with each rank's own files for the model
    and for the optimizer, listed in its manifest with meta.pt."""
    root, _ = matrix
    run = os.path.join(root, variant, "fsdp2")
    interval = straight_ckpt_interval(variant)
    checkpoints = [f"ckpt_{step:07d}" for step in range(interval, STEPS + 1, interval)]
    assert sorted(os.listdir(run)) == checkpoints + ["config.json", "metrics.jsonl", "run.lock"]
    for checkpoint in checkpoints:
        files = json.load(open(os.path.join(run, checkpoint, "manifest.json")))["files"]
        assert files.keys() == {f"{part}/{name}" for part in ("model", "optimizer")
                                for name in ("__0_0.distcp", "__1_0.distcp", ".metadata")} | {"meta.pt"}


# The straight runs against one process: FSDP and DDP over 2 ranks (one micro-step of 4 sequences each) bit for
# bit, as one process's two micro-steps of 4 average the same (g1 + g2) / 2, but where torch's fused AdamW rounds
# a block's vector tail otherwise (FUSED_TAIL: FSDP within OTHER_PARALLELISM; measured 7e-8); FSDP over 4 ranks, with
# activation checkpointing, within 1e-5 (gloo's sum over 4 in its own order, four steps of it: measured at most
# 2.7e-7, and 1.6e-6 for the Newton-Schulz optimizers), but for SOAP and SOAP-Muon, whose bases turn rounding into
# O(1) differences (above; SOAP-Muon's fsdp4 ended 0.23 from one process, 0.0038 at soap_eps 1e-2); and Dion, whose sharded step sums its products over row blocks (test_optim_ddp.ROW_BLOCK_SUMS),
# FSDP over 2 within OTHER_PARALLELISM too (measured 2.2e-7). And the diagnostics of their last (log) step alike.
AGAINST_ONE_PROCESS = {"ddp2": SAME, "fsdp2": SAME, "fsdp4": 1e-5}
FUSED_TAIL, ROUNDING_CHAOTIC = {"adamw"}, {"soap", "soap_muon"}  # (recipes)


def initial_weights(variant: str) -> dict:
    """The weights train.py starts a run of this variant from."""
    return built(variant)[0].state_dict()


def last_diagnostics(run: str) -> dict:
    """The last training row's diagnostics (update and weight RMS by kind, MARS's clip fraction, ...)."""
    with open(os.path.join(run, "metrics.jsonl")) as f:
        row = [json.loads(line) for line in f if '"type": "train"' in line][-1]
    return {k: v for k, v in row.items() if "/" in k or k.endswith("_rms") or k == "grad_norm"}


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_sharded_ends_where_ddp_and_one_process_end(matrix, variant):
    """The straight runs themselves: FSDP over 2 and over 4 ranks (with activation checkpointing) and DDP over
    2 against one process (micro-batches of 4, so the same sums on 2 ranks): their final weights and their
    last step's diagnostics; and the runs moved."""
    root, _ = matrix
    one = final_weights(os.path.join(root, variant, "one"))
    assert relative_difference(one, initial_weights(variant)) > 1e-3  # the runs moved
    if variant in FOUR_RANKS:
        with open(os.path.join(root, variant, "fsdp4", "config.json")) as f:
            assert json.load(f)["config"]["activation_checkpointing"]
    one, one_diagnostics = without_key_bias(one), last_diagnostics(os.path.join(root, variant, "one"))
    assert {"update_rms", "weight_rms", "grad_norm"} <= one_diagnostics.keys(), one_diagnostics
    for run, tolerance in AGAINST_ONE_PROCESS.items():
        if variant not in FULL and run not in LLAMA_STRAIGHT_RUNS:
            continue
        if run == "fsdp4" and (variant not in FOUR_RANKS or recipe_of(variant) in ROUNDING_CHAOTIC):
            continue
        if run == "fsdp2" and recipe_of(variant) in FUSED_TAIL | ROW_BLOCK_SUMS:
            tolerance = OTHER_PARALLELISM
        weights = without_key_bias(final_weights(os.path.join(root, variant, run)))
        difference = relative_difference(weights, one)
        assert difference <= tolerance, (run, difference)
        diagnostics = last_diagnostics(os.path.join(root, variant, run))
        assert diagnostics.keys() == one_diagnostics.keys(), run
        for metric, value in one_diagnostics.items():
            assert diagnostics[metric] == pytest.approx(value, rel=1e-4, abs=1e-5), (run, metric)
