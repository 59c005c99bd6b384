#!/usr/bin/env bash
# GPT-2 large with MARS-M on OpenWebText, as the official MARS_M/scripts/run_mars_m_large.sh.
# Settings (NGPU, MICRO_BATCH, TOKENS, DRY_RUN, ...): see scripts/common.sh.
source "$(dirname "$0")/common.sh"
launch gpt2_large_mars_m config/gpt2_large_mars_m.py "$@"
