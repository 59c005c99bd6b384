"""
--init_from=hf:<folder or hub name> (huggingface.py): a run starts from a Hugging Face GPT2LMHeadModel or
LlamaForCausalLM, the exact inverse of eval/export_hf.py's mapping. Tiny models built with transformers and saved
with save_pretrained (no hub here): the model train.py builds from them computes their logits in float32 (atol
1e-5 over the real tokens; measured at most 2.3e-6, on logits up to 3), train.py's own run scores the validation
windows as the transformers model does and continues its checkpoint under the same command, the state_dicts
survive both round trips bit for bit, and each bad source is a named error through train.py's entry point.
"""

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from conftest import PRELOADED_BIN, PYTHON, REPO, run_train
from data.loader import TokenWindows, validation_window_ids
from eval import export_hf
from huggingface import from_hf_state_dict, hf_state_dict, load_hf_weights, to_hf_state_dict
from model import GPT, GPTConfig
from optim import load_config

GPT2_VOCAB = 50257  # GPT-2's tokenizer: padded to the run's vocab_size (50304)
TOLERANCE = dict(atol=1e-5, rtol=0)  # float32 logits of magnitude up to about 3

HF_MODELS = {  # what our model supports: GPT-2 (with the MARS runs' layer scaling), Llama tied and untied
    "gpt2": ("gpt2", {}),
    "gpt2-inverse-layer-scaling": ("gpt2", dict(scale_attn_by_inverse_layer_idx=True)),
    "llama-tied": ("llama", dict(tie_word_embeddings=True)),  # llm-baselines' MLP rule: 256 for n_embd 32
    "llama-untied": ("llama", dict(tie_word_embeddings=False, intermediate_size=128, rope_theta=500000.0,
                                   rms_norm_eps=1e-6)),  # Wen et al.'s 4 n_embd; Llama 3's theta
}


def hf_model(kind: str, vocab_size: int = GPT2_VOCAB, seed: int = 0, **overrides):
    """A tiny transformers model with random weights, biases and norm weights moved off their init."""
    torch.manual_seed(seed)
    if kind == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(**dict(vocab_size=vocab_size, n_positions=64, n_embd=32, n_layer=2,
                                                  n_head=2) | overrides))
    else:
        model = LlamaForCausalLM(LlamaConfig(**dict(
            vocab_size=vocab_size, hidden_size=32, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=4, max_position_embeddings=64) | overrides))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def saved(model, folder: Path) -> str:
    model.save_pretrained(str(folder))
    return str(folder)


def run_args(source: str, data_dir: str, out_dir: str, *extra: str) -> list[str]:
    return [f"--init_from=hf:{source}", f"--data_dir={data_dir}", f"--out_dir={out_dir}", "--device=cpu",
            "--block_size=32", "--total_batch_size=256", "--micro_batch_size=8", "--max_iters=1", "--eval_interval=1",
            "--eval_sequences=16", "--log_interval=1", "--warmup_iters=0", "--learning_rate=1e-3", "--min_lr=1e-4",
            *extra]


@pytest.mark.parametrize("name", list(HF_MODELS))
def test_the_model_train_py_builds_computes_the_checkpoints_logits(name, tmp_path):
    """The config train.py reads (--init_from=hf:<folder>) and the weights it loads give the transformers model's
    float32 logits over GPT-2's 50257 tokens; the 47 padded rows are the mean of the real ones."""
    kind, overrides = HF_MODELS[name]
    theirs = hf_model(kind, **overrides)
    folder = saved(theirs, tmp_path / "hf")
    cfg = load_config([f"--init_from=hf:{folder}", "--block_size=64", "--device=cpu"])
    assert cfg.model_args()["architecture"] == kind and cfg.model_args()["vocab_size"] == 50304
    model = GPT(GPTConfig(**cfg.model_args()))
    assert "its 50257 ids padded to 50304" in load_hf_weights(model, folder, "gpt2")
    model.eval()
    tokens = torch.randint(0, GPT2_VOCAB, (2, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = model(tokens, all_logits=True)[0]
        expected = theirs(tokens).logits
    torch.testing.assert_close(ours[..., :GPT2_VOCAB], expected, **TOLERANCE)
    for table in (model.transformer.wte.weight, model.lm_head.weight):
        torch.testing.assert_close(table[GPT2_VOCAB:], table[:GPT2_VOCAB].mean(0).expand(47, -1), atol=0, rtol=0)


@pytest.mark.parametrize("overrides", [
    dict(), dict(bias=False), dict(scale_attn_by_inverse_layer_idx=True), dict(architecture="llama", bias=False),
    dict(architecture="llama", bias=False, tie_embeddings=False, mlp_ratio=4, rope_theta=500000.0, norm_eps=1e-6),
], ids=["gpt2", "gpt2-no-bias", "gpt2-inverse-layer-scaling", "llama-tied", "llama-untied"])
def test_ours_to_hugging_face_and_back_is_exact(overrides):
    torch.manual_seed(0)
    config = GPTConfig(block_size=16, vocab_size=64, n_layer=2, n_head=2, n_embd=16, **overrides)
    model = GPT(config)
    back = from_hf_state_dict(hf_state_dict(model), config)
    ours = model.state_dict()
    assert back.keys() == ours.keys()
    for name, tensor in ours.items():
        assert torch.equal(back[name], tensor), name


@pytest.mark.parametrize("name", list(HF_MODELS))
def test_hugging_face_to_ours_and_back_is_exact(name, tmp_path):
    """A checkpoint of the run's vocabulary and positions: every tensor returns bit for bit (the tied head is the
    embedding), and the model built from its config is the one whose config.json the export writes."""
    kind, overrides = HF_MODELS[name]
    theirs = hf_model(kind, vocab_size=50304, **overrides)
    folder = saved(theirs, tmp_path / "hf")
    cfg = load_config([f"--init_from=hf:{folder}", "--block_size=64", "--device=cpu"])
    config = GPTConfig(**cfg.model_args())
    back = to_hf_state_dict(from_hf_state_dict(theirs.state_dict(), config), config)
    expected = {k: v for k, v in theirs.state_dict().items() if k != "lm_head.weight" or not config.tie_embeddings}
    assert back.keys() == expected.keys()
    for key, tensor in expected.items():
        assert torch.equal(back[key], tensor), key
    written = export_hf.hf_config(config)
    for key, value in written.items():
        if key not in ("architectures", "torch_dtype", "bos_token_id", "eos_token_id", "rope_theta", "rope_scaling",
                       "initializer_range", "n_ctx", "n_inner", "resid_pdrop", "embd_pdrop", "attn_pdrop"):
            assert getattr(theirs.config, key) == value, key


@pytest.mark.parametrize("overrides", [
    dict(bias=False), dict(architecture="llama", bias=False, tie_embeddings=False, mlp_ratio=4),
], ids=["gpt2-no-bias", "llama-untied"])
def test_an_exported_folder_starts_a_run_with_the_checkpoints_weights(overrides, tmp_path):
    """export_hf's folder (its GPT-2 tokenizer files checked against the run's) read back by --init_from=hf:
    gives the checkpoint's state_dict exactly; bias=False reads GPT-2's zero biases back as none."""
    torch.manual_seed(1)
    model = GPT(GPTConfig(block_size=32, n_layer=2, n_head=2, n_embd=32, **overrides))
    checkpoint = str(tmp_path / "ckpt.pt")
    torch.save({"model": model.state_dict(), "model_args": vars(model.config), "config": {"tokenizer": "gpt2"},
                "step": 0}, checkpoint)
    export_hf.main(["--checkpoint", checkpoint, "--out", str(tmp_path / "hf")])
    cfg = load_config([f"--init_from=hf:{tmp_path / 'hf'}", "--block_size=32", "--device=cpu", "--bias=False"])
    assert GPTConfig(**cfg.model_args()) == model.config
    loaded = GPT(GPTConfig(**cfg.model_args()))
    load_hf_weights(loaded, str(tmp_path / "hf"), "gpt2")
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


@pytest.mark.parametrize("name", ["gpt2", "llama-untied"])
def test_train_py_starts_from_the_checkpoint_and_continues_its_own(name, tiny_dataset, tmp_path):
    """train.py --init_from=hf:<folder>: its step-0 validation loss is the transformers model's on the same
    windows (a checkpoint of 50304 ids: nothing padded, so the softmax is the same), GPT-2's 64 positions cut
    to the run's 32; the same command with more steps resumes the run's checkpoint (as auto does)."""
    kind, overrides = HF_MODELS[name]
    theirs = hf_model(kind, vocab_size=50304, **overrides)
    folder = saved(theirs, tmp_path / "hf")
    out = tmp_path / "out"
    proc = run_train(run_args(folder, tiny_dataset, str(out)))
    assert f"starting from the {type(theirs).__name__} {folder} (fresh optimizer, step 0)" in proc.stdout
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    val_loss = next(row["val_loss"] for row in rows if row["type"] == "val" and row["step"] == 0)
    windows = TokenWindows(tiny_dataset, "val", 32, 50304)
    x, y = windows.gather(validation_window_ids(windows, 16))
    with torch.no_grad():
        logits = theirs(torch.as_tensor(x, dtype=torch.long)).logits
    expected = F.cross_entropy(logits.flatten(0, 1), torch.as_tensor(y, dtype=torch.long).flatten()).item()
    assert val_loss == pytest.approx(expected, abs=1e-5)

    again = run_train(run_args(folder, tiny_dataset, str(out), "--max_iters=2"))
    assert "resuming" in again.stdout and "starting from" not in again.stdout
    assert "step 2/2" in again.stdout


# ----------------------------------------------------------------------------- named errors, through train.py


def bad_sources(root: Path, data_dir: str) -> dict[str, tuple[list[str], list[str]]]:
    """Each case: train.py's arguments, and what its error must say."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import BertConfig, BertModel, GPTNeoXConfig, PreTrainedTokenizerFast

    gpt2 = saved(hf_model("gpt2"), root / "gpt2")
    biased = saved(hf_model("gpt2", seed=2), root / "biased")
    (root / "empty").mkdir()
    (root / "empty" / "model.safetensors").write_bytes(b"")
    BertModel(BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32)).save_pretrained(str(root / "bert"))
    GPTNeoXConfig(vocab_size=50304, hidden_size=32, num_hidden_layers=2, num_attention_heads=2).save_pretrained(
        str(root / "neox"))
    hf_model("gpt2").config.save_pretrained(str(root / "no_weights"))
    cut, garbled = saved(hf_model("gpt2"), root / "cut"), saved(hf_model("gpt2"), root / "garbled")
    weights = Path(cut) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a download cut short
    (Path(garbled) / "model.safetensors").write_bytes(os.urandom(4096))
    saved(hf_model("llama", vocab_size=32000), root / "llama2_vocab")
    other_tokenizer = saved(hf_model("gpt2"), root / "other_tokenizer")  # GPT-2's size, another tokenizer's ids
    words = Tokenizer(models.WordLevel({"[UNK]": 0, "Hello": 1, "world": 2}, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]").save_pretrained(other_tokenizer)

    def args(source: str, *extra: str) -> list[str]:
        return run_args(source, data_dir, str(root / "out" / os.path.basename(source)), *extra)

    return {
        "missing_folder": (args(str(root / "nothing")), [f"there is no folder {root / 'nothing'}", "hub name"]),
        "no_config": (args(str(root / "empty")), ["has no config.json", "save_pretrained"]),
        "bert": (args(str(root / "bert")), ["is a 'bert' model", "GPT2LMHeadModel", "LlamaForCausalLM"]),
        "gpt_neox": (args(str(root / "neox")), ["is a 'gpt_neox' model"]),
        "shape_mismatch": (args(gpt2, "--n_layer=3"), ["decides the model's shape", "n_layer=3 (it has 2)", "remove"]),
        "longer_than_positions": (args(gpt2, "--block_size=128", "--total_batch_size=1024"),
                                  ["block_size=128 is longer than the checkpoint's 64"]),
        "other_vocabulary": (args(str(root / "llama2_vocab")),
                             ["vocabulary of 32000 ids", "tokenizer 'gpt2' has 50257"]),
        "other_tokenizer": (args(other_tokenizer), ["the checkpoint's tokenizer splits text into other ids than the "
                                                    "run's 'gpt2' tokenizer"]),
        "biases_under_bias_false": (args(biased, "--bias=False"), ["non-zero biases", "bias=True"]),
        "no_weights": (args(str(root / "no_weights")), ["cannot load its weights as a GPT2LMHeadModel"]),
        "cut_safetensors": (args(cut), ["cannot load its weights as a GPT2LMHeadModel", "model.safetensors"]),
        "garbled_safetensors": (args(garbled), ["cannot load its weights as a GPT2LMHeadModel"]),
        "hub_unreachable": (args("gpt2-medium"), ["cannot read the model's config from the Hugging Face hub",
                                                   "no local folder has that name", "give a local folder"]),
        "empty_source": (args(""), ["config key 'init_from' is 'hf:'", "hf:<a Hugging Face model folder"]),
    }


@pytest.fixture(scope="module")
def bad_results(tmp_path_factory, tiny_dataset) -> dict[str, tuple[list[str], subprocess.CompletedProcess]]:
    root = tmp_path_factory.mktemp("bad_hf")
    cases = bad_sources(root, tiny_dataset)
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PATH=f"{PRELOADED_BIN}:{os.environ['PATH']}")

    def run(name: str):
        args, expect = cases[name]
        proc = subprocess.run([PYTHON, str(REPO / "train.py"), *args], capture_output=True, text=True, cwd=REPO,
                              env=env, timeout=300)
        return expect, proc

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(cases, pool.map(run, cases)))


@pytest.mark.parametrize("name", ["missing_folder", "no_config", "bert", "gpt_neox", "shape_mismatch",
                                  "longer_than_positions", "other_vocabulary", "other_tokenizer",
                                  "biases_under_bias_false", "no_weights", "cut_safetensors", "garbled_safetensors",
                                  "hub_unreachable", "empty_source"])
def test_a_bad_source_is_named_without_traceback(name, bad_results):
    expect, proc = bad_results[name]
    report = f"exit {proc.returncode}\nstdout:\n{proc.stdout[-2000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, report
    for text in expect:
        assert text in proc.stderr, f"{text!r} not in the error\n{report}"


def test_scion_init_refuses_to_discard_a_checkpoints_weights(tmp_path):
    from config import ConfigError
    source = saved(hf_model("gpt2"), tmp_path / "gpt2")
    with pytest.raises(ConfigError, match="scion_init=True re-initialises every matrix.*drop scion_init"):
        load_config([f"--init_from=hf:{source}", "--block_size=32", "--optimizer=scion", "--scion_init=True"])
