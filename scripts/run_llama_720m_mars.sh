#!/usr/bin/env bash
# Semenov et al.'s 720M Llama with MARS-approx on FineWeb (python -m data.prepare fineweb): a row of their
# benchmark's table.
# Settings (NGPU, MICRO_BATCH, TOKENS, DRY_RUN, SLURM=1, ...): see scripts/common.sh.
source "$(dirname "$0")/common.sh"
launch llama_720m_mars config/llama_720m_mars.py "$@"
