#!/usr/bin/env bash
# GPT-2 xl with Moonlight on FineWeb-Edu, as the official MARS_M/scripts/run_moonlight_xl_fw.sh.
# Data: python -m data.prepare fineweb-edu (the 100BT sample, as the official runs).
# Settings (NGPU, MICRO_BATCH, TOKENS, DRY_RUN, ...): see scripts/common.sh.
source "$(dirname "$0")/common.sh"
launch gpt2_xl_moonlight_fw config/gpt2_xl_moonlight.py --dataset=fineweb-edu100B "$@"
