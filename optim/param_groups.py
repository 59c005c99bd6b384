"""Which parameters an optimizer treats how: decay groups and the embedding tables."""

import torch.nn as nn


def split_decay_groups(model: nn.Module, decay_embeddings: bool) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(decayed, not decayed). 2-D+ parameters decay, except, without decay_embeddings, the embedding
    tables and the head tied to one (the official MARS code decays nn.Linear weights only); 1-D ones
    (biases, LayerNorm) never do."""
    exempt = set() if decay_embeddings else {id(p) for p in embedding_params(model)}
    params = [p for p in model.parameters() if p.requires_grad]
    decayed = [p for p in params if p.dim() >= 2 and id(p) not in exempt]
    return decayed, [p for p in params if not (p.dim() >= 2 and id(p) not in exempt)]


def embedding_params(model: nn.Module) -> list[nn.Parameter]:
    """The embedding tables (the lm_head is tied to the token embedding: one parameter)."""
    return [m.weight for m in model.modules() if isinstance(m, nn.Embedding)]
