#!/usr/bin/env bash
# GPT-2 small with MARS-approx on OpenWebText over several nodes. Run it on every node with the same
# rendezvous endpoint (a host:port of the first node that all can reach), e.g. on 4 nodes of 8 GPUs:
#   NNODES=4 RDZV_ENDPOINT=$HEAD_NODE:29500 bash scripts/run_mars_small_multinode.sh
# The global batch stays 480 x 1024 tokens (32 GPUs x 15 sequences: no gradient accumulation), and the
# run shares its out_dir with run_mars_small.sh, so either can resume the other's checkpoint.
# Other settings (NGPU, MICRO_BATCH, TOKENS, RDZV_ID, DRY_RUN, ...): see scripts/common.sh.
source "$(dirname "$0")/common.sh"
NNODES="${NNODES:-2}" launch gpt2_small_mars config/gpt2_small_mars.py "$@"
