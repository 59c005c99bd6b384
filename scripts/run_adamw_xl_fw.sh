#!/usr/bin/env bash
# GPT-2 xl with AdamW on FineWeb-Edu (python data/prepare.py fineweb-edu).
# Settings (NGPU, MICRO_BATCH, TOKENS, DRY_RUN, ...): see scripts/common.sh.
source "$(dirname "$0")/common.sh"
launch gpt2_xl_adamw_fw config/gpt2_xl_adamw.py --dataset=fineweb-edu "$@"
