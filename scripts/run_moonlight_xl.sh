#!/usr/bin/env bash
# GPT-2 xl with Moonlight on OpenWebText, as the official MARS_M/scripts/run_moonlight_xl.sh.
# Settings (NGPU, MICRO_BATCH, TOKENS, DRY_RUN, ...): see scripts/common.sh.
source "$(dirname "$0")/common.sh"
launch gpt2_xl_moonlight config/gpt2_xl_moonlight.py "$@"
