#!/usr/bin/env bash
# GPT-2 small with MARS-approx on OpenWebText: a row of the paper's table and figures 1-3.
# Settings (NGPU, MICRO_BATCH, TOKENS, DRY_RUN, ...): see scripts/common.sh.
source "$(dirname "$0")/common.sh"
launch gpt2_small_mars config/gpt2_small_mars.py "$@"
