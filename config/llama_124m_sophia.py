# Sophia on Semenov et al.'s 124M Llama: their tuned scripts/124m/sophia.sh (lr 1e-3, betas 0.9/0.999, rho 0.04,
# weight decay 0.1, a Hessian estimate every 10 steps, unclipped). Their loop's estimate differs from this one's
# in scale: it takes one micro-batch of 32 sequences, its loss divided by their 8 accumulation steps, so its
# expected g_hat^2 is 1/8 of the global batch's (256 / (64 x 32)); and it scales h by 480 x 512 tokens whatever
# their batch. sophia_bs = 480 x 512 / 8 gives this loop's estimate their expected rho bs h.
include = ["llama_124m.py", "paper_sophia.py"]
out_dir = "out/llama_124m_sophia"
wandb_run_name = "llama_124m_sophia"
learning_rate = 1e-3
min_lr = 1e-5
beta1 = 0.9
beta2 = 0.999
sophia_rho = 0.04
weight_decay = 0.1
sophia_clip_hessian_gradient = False
sophia_bs = 480 * 512 // 8
