"""
MARS-AdamW against its authors' own fused implementation: the official repository's
MARS/optimizers/mars_fused.py (AGI-Arena/MARS), its foreach path and its CUDA extension
(fused_mars/*.cu), beside ours and torch's fused AdamW, on GPT-2 small's parameters.

    python -m bench.official_mars PATH/TO/MARS/MARS/optimizers              # GPU
    python -m bench.official_mars PATH/TO/MARS/MARS/optimizers --build-only # just build the extension

Nothing of the official code is in this repository: the file is imported from the checkout named on
the command line, and its extension is built there for this GPU by torch.utils.cpp_extension.load, as
its setup_mars.py would (where the build fails, that row says why and the others still run).

First the numbers: `--steps` steps from the same float32 parameters and the same gradients (each
tensor's scale drawn so that some clip and some do not), each implementation's parameters against
ours (the largest relative difference over tensors, ‖x − ours‖ / ‖ours‖). Then the time of one step,
as bench.gpu's optimizer-alone comparison measures it (bench.gpu.time_optimizer_steps): the
kernels' own time from torch.profiler, and the median span between CUDA events, host launch gaps
included. Each implementation steps with its own gradients: the official fused path writes its
clipped c_t into the gradients it is given.
"""

if not __package__:  # run as a file: the repository's modules (model, data, ...) are not importable
    raise SystemExit("bench/official_mars.py is a module of the bench package: run it from the repository root as\n"
                     "    python -m bench.official_mars ...")

import argparse
import importlib.util
import os
import sys

import torch

from bench import print_header
from bench.gpu import MARS_ADAMW_FLOOR, time_optimizer_steps
from config.models import PRESETS
from model import GPT, GPTConfig
from optim import MARS

# The official constructor's arguments, which ours shares (GPT-2 small's paper values where they exist).
HYPERPARAMETERS = dict(lr=6e-3, betas=(0.95, 0.99), eps=1e-8, weight_decay=1e-2, gamma=0.025, is_approx=True,
                       mars_type="mars-adamw", optimize_1d=False, lr_1d=3e-3, betas_1d=(0.9, 0.95),
                       weight_decay_1d=0.1)
ADAMW = "torch fused AdamW"  # the ratios' denominator
EXTENSION_SOURCES = ("pybind_mars.cpp", "fused_mars_kernel.cu", "multi_tensor_mars_kernel.cu")


def build_extension(folder: str, build_dir: str) -> str:
    """Build (or load, when built already) the official fused_mars extension, importable as `fused_mars`
    as mars_fused.py imports it; '' when it loaded, else why not."""
    from torch.utils.cpp_extension import load

    os.makedirs(build_dir, exist_ok=True)
    try:
        sys.modules["fused_mars"] = load("fused_mars", [os.path.join(folder, "fused_mars", f) for f in EXTENSION_SOURCES],
                                         build_directory=build_dir, verbose=False)
        return ""
    except Exception as e:  # the row reports it; the other rows still run
        return f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:160] if str(e).strip() else ''}"


def load_official(folder: str):
    """The official mars_fused module, from the checkout."""
    spec = importlib.util.spec_from_file_location("official_mars_fused", os.path.join(folder, "mars_fused.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module.MARS, "_cuda_graph_capture_health_check"):  # a torch.optim.Optimizer method newer torch lacks
        module.MARS._cuda_graph_capture_health_check = lambda self: None
    return module


def factories(official, extension_error: str) -> dict:
    """Implementation name -> (function of a parameter list giving its optimizer, or None, why not)."""
    def theirs(**kwargs):
        return lambda params: official.MARS(params, **HYPERPARAMETERS, **kwargs)

    fused = (None, extension_error) if extension_error else (theirs(foreach=True, fused=True), "")
    single = (None, extension_error) if extension_error else (theirs(foreach=False, fused=True), "")
    return {
        ADAMW: (lambda params: torch.optim.AdamW(params, lr=6e-4, weight_decay=0.1, fused=True), ""),
        "ours (MARS-AdamW, compiled rule)": (lambda params: MARS(params, **HYPERPARAMETERS), ""),
        "official foreach (fused=False, foreach=True)": (theirs(foreach=True, fused=False), ""),
        "official CUDA extension, multi-tensor (fused=True, foreach=True)": fused,
        "official CUDA extension, per tensor (fused=True, foreach=False)": single,
    }


def gradient_stream(shapes: list[torch.Size], steps: int, device: torch.device, seed: int = 0) -> list[list]:
    """`steps` gradient sets; each tensor's scale log-uniform in [1e-5, 1e-3], so that the clipping of c_t
    to unit norm acts on some tensors and not on others."""
    generator = torch.Generator(device).manual_seed(seed)
    scales = torch.logspace(-5, -3, 97, device=device)
    return [[torch.randn(shape, device=device, generator=generator)
             * scales[torch.randint(0, 97, (), device=device, generator=generator)] for shape in shapes]
            for _ in range(steps)]


def final_parameters(make, initial: list[torch.Tensor], stream: list[list]) -> list[torch.Tensor]:
    """The parameters after stepping `make`'s optimizer from `initial` through the gradient stream."""
    params = [torch.nn.Parameter(p.clone()) for p in initial]
    optimizer = make(params)
    for gradients in stream:
        for p, g in zip(params, gradients):
            p.grad = g.clone()
        optimizer.step()
    return [p.detach() for p in params]


def largest_difference(params: list[torch.Tensor], reference: list[torch.Tensor]) -> float:
    return max(((p - r).norm() / r.norm()).item() for p, r in zip(params, reference))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.official_mars", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="the official repository's MARS/optimizers folder")
    parser.add_argument("--build-dir", default="/tmp/fused_mars_build")
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--steps", type=int, default=5, help="steps of the numbers' comparison")
    parser.add_argument("--repeats", type=int, default=100, help="timed steps of each implementation")
    args = parser.parse_args(argv)
    if not os.path.isfile(os.path.join(args.folder, "mars_fused.py")):
        print(f"error: {args.folder} has no mars_fused.py; give the MARS/optimizers folder of a checkout of "
              "github.com/AGI-Arena/MARS", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("bench.official_mars: the official fused MARS needs a CUDA device; none here")
        return 0
    extension_error = build_extension(args.folder, args.build_dir)
    if args.build_only:
        print(f"fused_mars: {extension_error or 'built'}")
        return 1 if extension_error else 0
    print_header()
    device = torch.device("cuda")
    official = load_official(args.folder)
    with torch.device(device):
        model = GPT(GPTConfig(**PRESETS["small"]))
    initial = [p.detach().clone() for p in model.parameters()]
    stream = gradient_stream([p.shape for p in initial], args.steps, device)
    makers = factories(official, extension_error)

    differences, ours = {}, None
    for name, (make, why_not) in makers.items():
        if make is None or name == ADAMW:
            continue
        try:
            final = final_parameters(make, initial, stream)
        except Exception as e:
            makers[name] = (None, f"{type(e).__name__}: {str(e)[:160]}")
            continue
        ours = final if ours is None else ours  # ours runs first
        differences[name] = largest_difference(final, ours)
        del final
    del stream

    params = list(model.parameters())
    runnable = {name: make for name, (make, _) in makers.items() if make is not None}
    optimizers = {name: make(params) for name, make in runnable.items()}
    gradients = {name: [[torch.randn_like(p) * 1e-3 for p in params] for _ in range(2)] for name in runnable}
    times = time_optimizer_steps(params, optimizers, gradients, device, args.repeats)
    adamw_events, adamw_kernels = times[ADAMW]

    print(f"GPT-2 small's parameters ({sum(p.numel() for p in params) / 1e6:.1f}M, fp32); {args.repeats} timed steps "
          f"each; MARS hyperparameters {HYPERPARAMETERS}")
    print("| implementation | kernels ms/step | x fused AdamW | between events ms | x fused AdamW | "
          f"parameters after {args.steps} steps vs ours (largest relative difference) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, (make, why_not) in makers.items():
        if make is None:
            print(f"| {name} | - | - | - | - | not run: {why_not} |")
            continue
        events, kernels = times[name]
        difference = differences.get(name)
        print(f"| {name} | {kernels:.3f} | {kernels / adamw_kernels:.2f} | {events:.3f} | {events / adamw_events:.2f} | "
              f"{'-' if difference is None else f'{difference:.2e}'} |")
    print(f"(memory-traffic floor of MARS-AdamW against AdamW: {MARS_ADAMW_FLOOR:.2f}x, its 10 tensor passes to 7)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
