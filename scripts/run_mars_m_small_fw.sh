#!/usr/bin/env bash
# GPT-2 small with MARS-M on FineWeb-Edu, as the official MARS_M/scripts/run_mars_m_small_fw.sh.
# Data: python -m data.prepare fineweb-edu (the 100BT sample, as the official runs).
# Settings (NGPU, MICRO_BATCH, TOKENS, DRY_RUN, ...): see scripts/common.sh.
source "$(dirname "$0")/common.sh"
launch gpt2_small_mars_m_fw config/gpt2_small_mars_m.py --dataset=fineweb-edu100B "$@"
