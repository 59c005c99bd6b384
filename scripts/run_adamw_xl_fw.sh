#!/usr/bin/env bash
# GPT-2 xl with AdamW on FineWeb-Edu
# Data: python -m data.prepare fineweb-edu (the 100BT sample, as the official runs).
# Settings (NGPU, MICRO_BATCH, TOKENS, DRY_RUN, ...): see scripts/common.sh.
source "$(dirname "$0")/common.sh"
launch gpt2_xl_adamw_fw config/gpt2_xl_adamw.py --dataset=fineweb-edu100B "$@"
