#!/usr/bin/env bash
# GPT-2 small with MARS-exact (two gradients per step: twice the compute of MARS-approx) on OpenWebText.
# Settings (NGPU, MICRO_BATCH, TOKENS, DRY_RUN, ...): see scripts/common.sh.
source "$(dirname "$0")/common.sh"
launch gpt2_small_mars_exact config/gpt2_small_mars.py --is_approx=False "$@"
