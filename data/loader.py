"""
Batches of token windows from a split's memory-mapped shards.

Training batches are random windows (as nanoGPT and the official MARS code
sample them), and the global batch of step t depends only on (seed, t): each
rank takes its slice of it, each micro-step a slice of that. So a run sees the
same data whatever its world size or micro-batch size, and resuming at step t
needs nothing but t. Validation uses a fixed set of evenly spaced windows,
the same at every evaluation and in every run.
"""

import functools
import glob
import os

import numpy as np
import torch

from data.shards import ShardError, open_shard


LABEL_DRAW_RANGE = 2**24  # the draws of sampled labels (optim/sophia.py's sampled_labels): u = draw / 2^24, exact in fp32


class TokenWindows:
    """Windows of block_size + 1 tokens (inputs and shifted targets) over a split's shards.

    Every window gathered is checked to hold only ids below the model's vocab_size: an id beyond
    it would index past the embedding (an IndexError on the CPU, a device-side assert on CUDA that
    kills the process and hides the cause). The check is a max over the gathered rows on the host,
    so it costs no device sync and no scan of the (possibly 20 GB) shards at start-up."""

    def __init__(self, data_dir: str, split: str, block_size: int, vocab_size: int):
        self.paths = sorted(glob.glob(os.path.join(data_dir, f"*_{split}_*.bin")))
        if not self.paths:
            raise FileNotFoundError(
                f"no '{split}' token shards (*_{split}_*.bin) in {data_dir}; prepare the dataset first "
                "(python -m data.prepare <name>, or python -m data.quickstart for the quickstart corpus)"
            )
        self.block_size = block_size
        self.vocab_size = vocab_size
        self.shards = [open_shard(p) for p in self.paths]
        # A window may start anywhere that leaves block_size + 1 tokens in its shard.
        windows_per_shard = np.array([max(len(s) - block_size, 0) for s in self.shards], dtype=np.int64)
        if windows_per_shard.sum() == 0:
            raise ShardError(f"the '{split}' shards in {data_dir} hold no window of block_size + 1 = "
                             f"{block_size + 1} tokens; lower block_size or prepare more data")
        self.window_offsets = np.concatenate([[0], np.cumsum(windows_per_shard)])
        self.num_windows = int(self.window_offsets[-1])

    def fingerprint(self) -> list[tuple[str, int]]:
        """Shard names and sizes, stored in checkpoints so a resume notices changed data."""
        return [(os.path.basename(p), len(s)) for p, s in zip(self.paths, self.shards)]

    def gather(self, window_ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets (int64, shape (len(window_ids), block_size)) for global window ids."""
        shard_ids = np.searchsorted(self.window_offsets, window_ids, side="right") - 1
        rows = np.empty((len(window_ids), self.block_size + 1), dtype=np.int64)
        for row, (shard, start) in enumerate(zip(shard_ids, window_ids - self.window_offsets[shard_ids])):
            rows[row] = self.shards[shard][start : start + self.block_size + 1]
        if len(rows) and rows.max() >= self.vocab_size:
            self._refuse_out_of_vocabulary(rows, shard_ids, window_ids)
        rows = torch.from_numpy(rows)
        return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()

    def _refuse_out_of_vocabulary(self, rows: np.ndarray, shard_ids: np.ndarray, window_ids: np.ndarray) -> None:
        """A ShardError naming the first gathered id >= vocab_size: its shard, position and the likely fix."""
        row = int(np.flatnonzero(rows.max(axis=1) >= self.vocab_size)[0])
        column = int(np.argmax(rows[row] >= self.vocab_size))
        shard = shard_ids[row]
        position = int(window_ids[row] - self.window_offsets[shard]) + column
        path = self.paths[shard]
        raise ShardError(
            f"{path}: token id {rows[row, column]} at position {position} is outside the model's vocabulary "
            f"(vocab_size {self.vocab_size}: ids 0 to {self.vocab_size - 1}). Most likely the shards were "
            "tokenised with another tokenizer than the config's `tokenizer` setting (GPT-2 tokens need "
            "tokenizer=gpt2 and vocab_size of at least 50257): prepare them again with the config's tokenizer "
            "(python -m data.prepare ... --tokenizer NAME), or set the config's tokenizer and vocab_size to the "
            f"shards'. Else the shard is corrupt: check it with `python -m data.prepare verify "
            f"{os.path.dirname(path)}` and prepare it again"
        )


class TrainBatches:
    """Step-indexed random training batches, sliced per rank and micro-step."""

    def __init__(self, windows: TokenWindows, seed: int, sequences_per_step: int):
        self.windows = windows
        self.seed = seed
        self.sequences_per_step = sequences_per_step

    @functools.lru_cache(maxsize=2)  # drawn once per step, not once per micro-step
    def step_window_ids(self, step: int) -> np.ndarray:
        """The global batch of a step: a function of (seed, step) alone."""
        rng = np.random.default_rng([self.seed, step])
        return rng.integers(0, self.windows.num_windows, size=self.sequences_per_step)

    def first_row(self, micro_step: int, micro_batch_size: int, rank: int, world_size: int) -> int:
        """Where a rank's micro-batch starts in its step's global batch."""
        return rank * (self.sequences_per_step // world_size) + micro_step * micro_batch_size

    def micro_batch(
        self, step: int, micro_step: int, micro_batch_size: int, rank: int, world_size: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        first = self.first_row(micro_step, micro_batch_size, rank, world_size)
        return self.windows.gather(self.step_window_ids(step)[first : first + micro_batch_size])

    def label_draws(self, step: int, micro_step: int, micro_batch_size: int, rank: int, world_size: int,
                    device: torch.device) -> torch.Tensor:
        """A draw per position of a micro-batch (micro_batch_size x block_size): an integer in [0, 2^24), the
        uniform number draw / 2^24 at which the model's own next-token distribution is sampled (Sophia's Hessian
        estimate). Integers, because FSDP's mixed precision casts the floating-point inputs of a forward to bf16.
        Each row's draws are a function of (seed, step, the row's place in the global batch) alone, made on the
        device: any split of the batch over ranks and micro-steps samples the same labels, and a resumed run the
        labels it would have."""
        first = self.first_row(micro_step, micro_batch_size, rank, world_size)
        generator = torch.Generator(device=device)
        rows = []
        for row in range(first, first + micro_batch_size):
            generator.manual_seed(int(np.random.SeedSequence([self.seed, step, row]).generate_state(1)[0]))
            rows.append(torch.randint(0, LABEL_DRAW_RANGE, (self.windows.block_size,), generator=generator,
                                      device=device, dtype=torch.int32))
        return torch.stack(rows)


def validation_window_ids(windows: TokenWindows, count: int) -> np.ndarray:
    """count evenly spaced windows over the split: the fixed validation set."""
    return np.unique(np.linspace(0, windows.num_windows - 1, num=count).astype(np.int64))


def to_device(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Pinned, non-blocking host-to-device copies on CUDA."""
    if device.type == "cuda":
        return x.pin_memory().to(device, non_blocking=True)
    return x.to(device)
