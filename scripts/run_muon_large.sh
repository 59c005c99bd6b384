#!/usr/bin/env bash
# GPT-2 large with Muon on OpenWebText: a row of the paper's table and figures 1-3.
# Settings (NGPU, MICRO_BATCH, TOKENS, DRY_RUN, ...): see scripts/common.sh.
source "$(dirname "$0")/common.sh"
launch gpt2_large_muon config/gpt2_large_muon.py "$@"
