"""
The experiment tools: each runs as `python -m experiments.<tool>` from the repository root.

    sweep          a grid or coordinate search of training runs over seeds (locally, or as a SLURM job array)
    tune           phase-1 tuning as Wen et al. (2025) tune: coordinate descent, then more seeds
    report         tables, significance tests, token-equivalent speedups and plots from runs' logs
    budget_ladder  AdamW's ladder of token budgets, which report inverts to price a loss in AdamW's tokens
    batch_ladder   the batch-size ladder: each optimizer tuned per tokens-per-step size
    rankings       the 2025 benchmarks' published rankings (results/rankings/) and Kendall's tau beside ours
    tables         the README's and docs' result tables, rewritten from the committed reports in results/

Their results go under results/ (gpu/, mini/, mini_llama/, tune/, ladders/, rankings/). The run scripts that
drive them (scripts/mini_paper.sh, mini_sweep.sh, tune_mini.sh) stay in scripts/, which holds only launchers.
"""
