#!/usr/bin/env bash
# GPT-2 xl with MARS-M on OpenWebText, as the official MARS_M/scripts/run_mars_m_xl.sh.
# Settings (NGPU, MICRO_BATCH, TOKENS, DRY_RUN, ...): see scripts/common.sh.
source "$(dirname "$0")/common.sh"
launch gpt2_xl_mars_m config/gpt2_xl_mars_m.py "$@"
