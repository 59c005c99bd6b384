#!/usr/bin/env bash
# Any config's run, by the config's name: scripts/run.sh gpt2_small_lion launches config/gpt2_small_lion.py
# as run gpt2_small_lion, scripts/run.sh llama_124m_sophia config/llama_124m_sophia.py as llama_124m_sophia
# (every optimizer of the registry at every size its configs cover, GPT-2's and the Llama's, without a script
# of its own). Settings (NGPU, MICRO_BATCH, TOKENS, DRY_RUN, ...): see scripts/common.sh; more arguments go
# to train.py.
source "$(dirname "$0")/common.sh"
name="${1:-}"
[[ -n "$name" && -f "$REPO/config/$name.py" ]] || {
    echo "error: give a config's name, one of: $(cd "$REPO/config" && ls gpt2_*_*.py llama_*_*.py | sed 's/\.py$//' | tr '\n' ' ')" >&2
    exit 2
}
shift
launch "$name" "config/$name.py" "$@"
