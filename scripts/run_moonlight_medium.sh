#!/usr/bin/env bash
# GPT-2 medium with Moonlight on OpenWebText, as the official MARS_M/scripts/run_moonlight_medium.sh.
# Settings (NGPU, MICRO_BATCH, TOKENS, DRY_RUN, ...): see scripts/common.sh.
source "$(dirname "$0")/common.sh"
launch gpt2_medium_moonlight config/gpt2_medium_moonlight.py "$@"
