"""
Optimizer step benchmark on a GPT-2-shaped set of tensors (124M parameters by default).

    python -m bench.optimizer_step                      # GPT-2 small, the element-wise optimizers
    python -m bench.optimizer_step --quick              # 2 layers, 3 repeats: a smoke run
    python -m bench.optimizer_step --optimizers adamw-fused,muon,mars-m,moonlight   # the NS5 ones (slow on CPU)

Every optimizer of the registry (optim.OPTIMIZERS) is here under its name, built as train.py builds
it (its hyperparameters' defaults, compiled rules), besides variants written out below. Prints, per
optimizer: the median time of one step (repeats interleaved across the optimizers, so that load on
the machine hits them alike), its ratio to torch's fused AdamW, the peak memory a step allocates
beyond what it starts with, and the optimizer state it keeps.
"official-style MARS" re-implements the official code's loop (per parameter, a
host sync on each norm, out-of-place temporaries) for the record.
"""

import argparse
import ctypes
import math
import statistics
import time
from collections.abc import Callable

import torch
from torch.optim import Optimizer

import bench
from model import GPT, GPTConfig, PRESETS
from optim import MARS, OPTIMIZERS, build_optimizer, load_config
from optim.sharding import balanced_owners, exchanged_bytes


class OfficialStyleMARS(Optimizer):
    """MARS-AdamW (approx) in the official code's style: a Python loop over
    parameters, `if norm > 1` on the host, a fresh tensor for every intermediate."""

    def __init__(self, params, lr=3e-3, betas=(0.95, 0.99), eps=1e-8, weight_decay=0.0, gamma=0.025):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, gamma=gamma))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p),
                                 last_grad=torch.zeros_like(p))
                state["step"] += 1
                g, m, v = p.grad, state["exp_avg"], state["exp_avg_sq"]
                c = (g - state["last_grad"]).mul(group["gamma"] * beta1 / (1 - beta1)).add(g)
                norm = torch.norm(c)
                if norm > 1:  # host sync
                    c = c / norm
                m.mul_(beta1).add_(c, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(c, c, value=1 - beta2)
                bias_correction1, bias_correction2 = 1 - beta1 ** state["step"], 1 - beta2 ** state["step"]
                denom = v.sqrt().mul(1 / math.sqrt(bias_correction2)).add(group["eps"]).mul(bias_correction1)
                p.add_(-group["lr"] * torch.mul(p, group["weight_decay"]).add(m.div(denom)))
                state["last_grad"] = g


def make_optimizers(model: torch.nn.Module, device: torch.device) -> dict[str, Callable[[], Optimizer]]:
    """Every registry optimizer by name, built from its defaults (a constant schedule, which every one
    accepts), and the variants of interest."""
    params = list(model.parameters())
    fused_ok = device.type in ("cpu", "cuda")

    def registry(name: str, *overrides: str) -> Callable[[], Optimizer]:
        cfg = load_config([f"--optimizer={name}", "--lr_schedule=constant", "--compile=True",
                           *overrides])
        return lambda: build_optimizer(model, cfg, device.type)

    return {name: registry(name) for name in OPTIMIZERS} | {
        "adamw-fused": lambda: torch.optim.AdamW(params, lr=6e-4, weight_decay=0.1, fused=fused_ok),
        "adamw-foreach": lambda: torch.optim.AdamW(params, lr=6e-4, weight_decay=0.1, foreach=True),
        "mars-adamw": lambda: MARS(params, weight_decay=0.1),
        "mars-lion": lambda: MARS(params, weight_decay=0.1, mars_type="mars-lion"),
        "mars-adamw-eager": lambda: MARS(params, weight_decay=0.1, compiled=False),
        "mars-lion-eager": lambda: MARS(params, weight_decay=0.1, mars_type="mars-lion", compiled=False),
        "official-style-mars": lambda: OfficialStyleMARS(params, weight_decay=0.1),
        "mars-shampoo": registry("mars", "--mars_type=mars-shampoo"),
        "mars-m-efficient": registry("mars-m", "--mars_m_efficient=True"),
    }


ELEMENTWISE = ("adamw-fused,adamw-foreach,mars-adamw,mars-lion,mars-adamw-eager,mars-lion-eager,official-style-mars,"
               "lion,nadamw,ademamix,schedule-free-adamw")


class PeakMemory:
    """Peak bytes allocated during a step beyond those live at its start.
    CUDA: the caching allocator's counters. CPU (Linux): the process's resident
    high-water mark, with glibc set to return every large block at free."""

    def __init__(self, device: torch.device):
        self.device = device
        if device.type == "cpu":
            ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 16)  # M_MMAP_THRESHOLD: large blocks mmapped, freed at once

    def start(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
        else:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current resident size
            self.base = self._status_kb("VmRSS") * 1024

    def peak_extra(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) - self.base
        return max(0, self._status_kb("VmHWM") * 1024 - self.base)

    def peak_reserved(self) -> int | None:
        """The caching allocator's largest reservation since start (CUDA; None on CPU)."""
        return torch.cuda.max_memory_reserved(self.device) if self.device.type == "cuda" else None

    @staticmethod
    def _status_kb(key: str) -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="small", choices=list(PRESETS))
    parser.add_argument("--n_layer", type=int, default=0, help="override the preset's layer count")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="2 layers, 3 repeats")
    parser.add_argument("--optimizers", default=ELEMENTWISE, help="comma-separated: a registry optimizer's name, "
                        "or adamw-fused, adamw-foreach, mars-adamw, mars-lion, mars-adamw-eager, mars-lion-eager, "
                        "official-style-mars, mars-shampoo, mars-m-efficient")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = parser.parse_args()
    if args.quick:
        args.n_layer, args.repeats = 2, 3
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    config = GPTConfig(**{**PRESETS[args.model], **({"n_layer": args.n_layer} if args.n_layer else {})})
    with torch.device(device):
        model = GPT(config)
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)
    # Two gradient sets used alternately: fresh tensors each step, as with zero_grad(set_to_none=True).
    gradient_sets = [[torch.randn_like(p) * 1e-3 for p in params] for _ in range(2)]
    factories = make_optimizers(model, device)
    names = args.optimizers.split(",")
    for name in names:
        if name not in factories:
            parser.error(f"unknown optimizer {name!r}; choose from {', '.join(factories)}")
    optimizers = {name: factories[name]() for name in names}
    memory = PeakMemory(device)

    def timed_step(name: str, step: int) -> tuple[float, int]:
        for p, g in zip(params, gradient_sets[step % 2]):
            p.grad = g
        memory.start()
        t0 = time.perf_counter()
        optimizers[name].step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0, memory.peak_extra()

    bench.print_header()
    print(f"{n_params / 1e6:.1f}M parameters in {len(params)} tensors, {device}, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}")
    for name in names:  # warm-up: state allocation, compilation
        for step in range(2):
            timed_step(name, step)
    times: dict[str, list[float]] = {name: [] for name in names}
    peaks: dict[str, int] = {name: 0 for name in names}
    for repeat in range(args.repeats):
        for name in names:
            seconds, peak = timed_step(name, repeat)
            times[name].append(seconds)
            peaks[name] = max(peaks[name], peak)

    reference = statistics.median(times["adamw-fused"]) if "adamw-fused" in times else None
    model_bytes = n_params * params[0].element_size()
    print(f"{'optimizer':<22} {'median step':>12} {'vs fused AdamW':>15} {'peak extra memory':>24} {'state':>10}")
    for name in names:
        median = statistics.median(times[name])
        ratio = f"{median / reference:.2f}x" if reference else "-"
        extra = f"{peaks[name] / 2**20:.0f} MiB ({peaks[name] / model_bytes:.2f} model)"
        state = sum(t.numel() * t.element_size() for s in optimizers[name].state.values()
                    for t in state_tensors(list(s.values())) if t.numel() > 1)  # (not the 0-d step counts)
        print(f"{name:<22} {median * 1e3:>10.1f}ms {ratio:>15} {extra:>24} {state / model_bytes:>8.2f}x")
    print_ns5_exchange([p.numel() for p in params if p.ndim == 2])


def state_tensors(values: list) -> list[torch.Tensor]:
    """The tensors among optimizer state values, also inside lists (SOAP's statistics and bases)."""
    return [t for v in values for t in (state_tensors(v) if isinstance(v, (list, tuple)) else [v])
            if torch.is_tensor(t)]


def print_ns5_exchange(matrix_sizes: list[int]) -> None:
    """Bytes one rank receives per step when Muon, Moonlight, MARS-M or MARS-Shampoo share out Newton-Schulz
    (every matrix on the matrix rule, embeddings included, as the paper's Muon): the unequal-parts
    exchange in bf16 against an fp32 all-gather padded to the largest share (this code before 2026-11)."""
    print(f"Newton-Schulz results received per rank per step ({len(matrix_sizes)} matrices, "
          f"{sum(matrix_sizes) / 1e6:.1f}M elements):")
    for world_size in (2, 8, 32):
        padded_fp32 = (world_size - 1) * max(balanced_owners(matrix_sizes, world_size)[1]) * 4
        unequal_bf16 = exchanged_bytes(matrix_sizes, matrix_sizes, world_size, element_size=2)
        print(f"  {world_size:>2} ranks: {unequal_bf16 / 1e9:.3f} GB (bf16, unequal parts) vs {padded_fp32 / 1e9:.3f} GB "
              f"(fp32, padded): {padded_fp32 / unequal_bf16:.1f}x less")


if __name__ == "__main__":
    main()
