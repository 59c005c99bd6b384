#!/usr/bin/env bash
# GPT-2 small with AdamW on FineWeb-Edu
# Data: python -m data.prepare fineweb-edu (the 100BT sample, as the official runs).
# Settings (NGPU, MICRO_BATCH, TOKENS, DRY_RUN, ...): see scripts/common.sh.
source "$(dirname "$0")/common.sh"
launch gpt2_small_adamw_fw config/gpt2_small_adamw.py --dataset=fineweb-edu100B "$@"
