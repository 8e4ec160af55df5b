"""The heads on the trunk, in one module (as HF's `modeling_esm.py` keeps `EsmLMHead`, the contact head and the
classifier heads beside `EsmModel`):

- the language-model head's transform, `HeadTransform` (the transformer holds it and the projection);
- the contact head, `ContactHead`, and its application to attention maps (`predict_contacts`, which
  `Transformer.predict_contacts` calls; `contact_features` and `attach_contact_head`, which fitting one uses);
- the task heads of fine-tuning, `TaskModel`, which holds a trunk.

The transformer imports this module for its own heads; the task heads name `Transformer` in signatures only (an
`if TYPE_CHECKING:` import), and the contact functions take the model as an `nn.Module`.

The language-model head: an optional masked-LM transform, the output projection and an optional logit bias.

    hidden -> [dense -> act -> norm]    (lm_head_transform: BERT, RoBERTa, ESM's `EsmLMHead`; act: lm_head_activation;
                                         with d_embed, ALBERT's, the dense maps d_model to d_embed)
           -> x @ W.T                   (W = the token embedding when tie_embeddings, else `lm_head.weight`)
           -> + bias                    (lm_head_bias: ESM's `lm_head.bias`, a vector of its own even when W is tied)

The transformer owns the projection matrix (tied or not) and the bias, so that their parameter names stay
`embed.weight` / `lm_head.weight` / `lm_head_bias`; `HeadTransform` is the transform alone.

The contact head: contacts from attention (Rao et al. 2020, "Transformer protein language models are
unsupervised structure learners"): every layer x head attention map, restricted to residue pairs, is symmetrised (A + A^T) and
corrected by the average product (APC: F - F_i. F_.j / F_..), and a logistic regression over the n_layers x
n_heads maps gives each residue pair's contact probability. ESM-2 checkpoints ship that regression
(`contact_head.regression`, `ContactHead`, which a Transformer holds when `contact_head: true`); HF's
`EsmForMaskedLM.predict_contacts` applies it, and so do `predict_contacts` and the method
`Transformer.predict_contacts`.

The maps are streamed: each layer's are reduced into the regression's sum before the next layer runs, so memory
holds one layer's batch x heads x T x T float32 maps (prediction reduces them in place, `weighted_features`; fitting
needs every head's features, `contact_features`, a few temporaries of that size), never n_layers'.

The task heads on the trunk (`Transformer.encode`): what fine-tuning on labelled sequences trains.

    classification  pool the content tokens -> linear -> one logit per class      (cross-entropy)
    regression      pool the content tokens -> linear -> one value per target      (MSE on standardised targets)
    token           each token's vector -> linear -> one logit per class           (cross-entropy; -100 = no label)

Pooling is that of `biotf embed` (`biotf.export.pooling`), computed here in torch so it is differentiable: mean
and max run over *content* tokens only (`content_mask`: real tokens that are not special tokens, as ESM's
extract.py excludes BOS/EOS), cls takes the first token (the tokenizer's <cls>/<bos>). A causal trunk's first token
attends to nothing after it, so its vector is the same for every record: cls is refused on causal models
(`check_pool`), whose sequence heads pool mean (the default) or max.

With a convolutional stem (`stem: conv`) the trunk computes bins. Sequence heads pool each token's bin vector
(`TrunkOutput.per_token`, as `biotf embed`); a token head works at one of two resolutions (`RESOLUTIONS`):
- base: each token's own vector, the bins upsampled (`Transformer.token_states`, what the LM head reads);
- bin: one logit vector per bin, trained on bin labels made from the token labels by majority (`stem.majority_bins`:
  the most frequent label among a bin's labelled tokens, ties to the smallest class id; a bin with none is
  unlabelled); its logits and predictions are handed back per token (each token its bin's), so metrics and
  prediction files stay per token.

Regression targets are standardised with the training split's mean and standard deviation, which the head keeps
as buffers: the loss is MSE in standard units (so its scale does not depend on the unit of the label), and
`predict` returns values in the label's own unit. The head is a single linear layer on purpose: with the trunk
frozen it is the linear probe of `biotf probe`, trained by gradient descent instead of closed form.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from biotf.conventions import IGNORE_INDEX
from biotf.errors import ConfigError, InputError
from biotf.model.config import TransformerConfig
from biotf.model.mlp import ACTIVATIONS
from biotf.model.norms import build_norm
from biotf.model.segments import by_segment
from biotf.model.stem import majority_bins

if TYPE_CHECKING:
    from biotf.model.transformer import Transformer, TrunkOutput


# --- the language-model head --------------------------------------------------------------------------------------
class HeadTransform(nn.Module):
    """dense (d_model -> d_model) -> activation -> norm, before the projection. The activation is GELU's exact erf
    form in ESM's and RoBERTa's heads whatever their MLP uses, and BERT's hidden_act in BERT's
    (`BertPredictionHeadTransform`)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.embed_width, bias=config.head_transform_has_bias)
        self.norm = build_norm(config, config.embed_width, bias=config.head_transform_has_bias)
        self.activation = ACTIVATIONS[config.lm_head_activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.activation(self.dense(x)))


# --- the contact head ---------------------------------------------------------------------------------------------
class ContactHead(nn.Module):
    """The regression: one weight per (layer, head) map, layer-major as HF and fair-esm order them, and a bias."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.n_layers, self.n_heads = config.n_layers, config.n_heads
        self.regression = nn.Linear(config.n_layers * config.n_heads, 1)


def symmetrise(maps: torch.Tensor) -> torch.Tensor:
    """A + A^T over the last two dimensions (HF's and fair-esm's `symmetrize`: a sum, not a mean)."""
    return maps + maps.transpose(-1, -2)


def average_product_correct(maps: torch.Tensor) -> torch.Tensor:
    """F - F_i. F_.j / F_.. per map (the last two dimensions): removes what every position shares (Dunn et al. 2008).
    Rows and columns that are zero (padding, special tokens) add nothing to the sums and stay zero."""
    return maps - maps.sum(-1, keepdim=True) * maps.sum(-2, keepdim=True) / maps.sum((-1, -2), keepdim=True)


def esm_residues(attention_mask: torch.Tensor) -> torch.Tensor:
    """The residue positions of an ESM-tokenised batch (padded on either side): real tokens but each row's first and
    last (<cls> and <eos>), as HF's contact head removes them."""
    mask = attention_mask.bool()
    rank = mask.long().cumsum(-1)  # 1 at the first real token, the row's real length at its last
    return mask & (rank > 1) & (rank < mask.sum(-1, keepdim=True))


def _residue_pairs(residue_mask: torch.Tensor) -> torch.Tensor:
    """(batch, 1, T, T) float32: 1 where both positions are residues."""
    keep = residue_mask.to(torch.float32)
    return (keep[:, :, None] * keep[:, None, :])[:, None]


def weighted_features(maps: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """sum_h weight_h APC(symmetrise(maps_h)): (batch, T, T) from one layer's (batch, heads, T, T) maps, without the
    per-head temporaries of `contact_features` (the head's sum of them, computed with one map-sized tensor, `maps`).
    Symmetrising and the weighted sum are linear, so they commute; APC's correction of head h is the outer product
    of S_h's row sums over its total (S_h = A_h + A_h^T is symmetric: row sums = column sums = A_h's row + column
    sums), so the weighted corrections are one (T, heads) x (heads, T) product."""
    summed = torch.einsum("bhij,h->bij", maps, weight)
    sums = maps.sum(-1) + maps.sum(-2)
    scaled = sums * (weight[None, :, None] / sums.sum(-1, keepdim=True))
    return summed + summed.transpose(-1, -2) - torch.einsum("bhi,bhj->bij", scaled, sums)


def contact_features(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                     residue_mask: torch.Tensor) -> Iterator[torch.Tensor]:
    """Per layer, its (batch, heads, T, T) float32 APC(symmetrised attention) maps over residue pairs (0 at every
    pair with a non-residue position), yielded one layer at a time."""
    pairs = _residue_pairs(residue_mask)
    for attention in model.attention_maps(input_ids, attention_mask):
        features = average_product_correct(symmetrise(attention * pairs))
        del attention  # not alive while the next layer runs
        yield features


@torch.no_grad()
def predict_contacts(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                     residue_mask: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Each sequence's (L, L) float32 contact probabilities over its L residues (`residue_mask`: which positions
    are residues; default `esm_residues`, ESM's <cls> ... <eos> layout), from the model's contact head."""
    head = model.contact_head
    if head is None:
        raise ConfigError("contact_head", False, "true", reason="this model has no contact head (ESM-2 checkpoints "
                                                                "ship one; other models need one fitted first)")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if residue_mask is None:
        residue_mask = esm_residues(attention_mask)
    weight = head.regression.weight.float().view(head.n_layers, head.n_heads)
    logits = torch.zeros(input_ids.shape[0], input_ids.shape[1], input_ids.shape[1], device=input_ids.device)
    pairs = _residue_pairs(residue_mask)
    layers = iter(weight)  # not enumerate(): its reused result tuple would keep a layer's maps alive into the next
    for attention in model.attention_maps(input_ids, attention_mask):
        logits += weighted_features(attention.mul_(pairs), next(layers))
        del attention  # not alive while the next layer runs
    probabilities = torch.sigmoid(logits + head.regression.bias.float())
    return [row[keep][:, keep] for row, keep in zip(probabilities, residue_mask.bool())]


def attach_contact_head(model: nn.Module, weight: torch.Tensor, bias: float) -> None:
    """Give `model` (in place) a contact head with these regression numbers, `weight` layer-major (n_layers x n_heads
    values, as `ContactHead` orders them), and `contact_head: true` in its config, so that an export holds both."""
    config = model.config.replace(contact_head=True)
    head = ContactHead(config).to(device=model.device)
    with torch.no_grad():
        head.regression.weight.copy_(torch.as_tensor(weight, dtype=torch.float32).view_as(head.regression.weight))
        head.regression.bias.fill_(float(bias))
    model.config, model.contact_head = config, head


# --- the task heads -----------------------------------------------------------------------------------------------
TASKS = ("classification", "regression", "token")
RESOLUTIONS = ("base", "bin")  # of a token head: each token's vector, or each bin's (a stem's)
SEQUENCE_POOLS = ("mean", "cls", "max")  # `biotf.export.pooling.POOLS` less "none" (one vector per record)


def check_pool(pool: str, task: str, causal: bool) -> None:
    """ConfigError for a pooling that `task` on a trunk that is (or is not) `causal` cannot mean."""
    if task == "token":
        return  # a token head reads every position; it pools nothing
    allowed = tuple(p for p in SEQUENCE_POOLS if not (causal and p == "cls"))
    if pool not in allowed:
        reason = ("the model is causal: its first token sees no later token, so every record would get the same "
                  "vector" if pool == "cls" and causal else None)
        raise ConfigError("finetune.pool", pool, " | ".join(allowed), reason=reason)


def check_resolution(resolution: str, task: str, factor: int) -> None:
    """ConfigError for a token-head resolution that `task` on a trunk of `factor` tokens per bin cannot mean."""
    if resolution not in RESOLUTIONS:
        raise ConfigError("finetune.resolution", resolution, " | ".join(RESOLUTIONS))
    if resolution == "bin" and task != "token":
        raise ConfigError("finetune.resolution", resolution, "base", reason=f"task={task} predicts one value per "
                          "record; only task=token has a resolution")
    if resolution == "bin" and factor == 1:
        raise ConfigError("finetune.resolution", resolution, "base", reason="the model has no stem (model.stem: "
                          "none), so its tokens are its bins")


def pool_tokens(hidden: torch.Tensor, content_mask: torch.Tensor, pool: str) -> torch.Tensor:
    """(B, T, D) token vectors -> (B, D): mean or max over content tokens, or the first token (cls)."""
    if pool == "cls":
        return hidden[:, 0]
    keep = content_mask.bool()
    if not bool(keep.any(dim=1).all()):
        row = int((~keep.any(dim=1)).nonzero()[0])
        raise InputError(f"batch row {row} has no content tokens to pool (only special tokens)")
    if pool == "mean":
        weights = keep.to(hidden.dtype).unsqueeze(-1)
        return (hidden * weights).sum(1) / weights.sum(1)
    if pool == "max":
        return hidden.masked_fill(~keep.unsqueeze(-1), float("-inf")).amax(1)
    raise ConfigError("finetune.pool", pool, " | ".join(SEQUENCE_POOLS))


@dataclass
class TaskOutput:
    """`logits` (classification, token) or standardised `logits` (regression), the loss with labels, and
    `predictions`: class ids, or values in the label's unit."""

    logits: torch.Tensor
    predictions: torch.Tensor
    loss: torch.Tensor | None = None


class TaskModel(nn.Module):
    """A trunk (`Transformer`, its LM head unused) and one task head.

    n_outputs: the number of classes (classification, token) or of regression targets. resolution: of a token head
    (see the module docstring); bin needs a trunk with a stem."""

    def __init__(self, trunk: Transformer, task: str, n_outputs: int, pool: str = "mean", dropout: float = 0.0,
                 resolution: str = "base"):
        super().__init__()
        if task not in TASKS:
            raise ConfigError("task", task, " | ".join(TASKS))
        check_pool(pool, task, trunk.config.causal)
        check_resolution(resolution, task, trunk.config.stem_factor)
        self.resolution, self.factor = resolution, trunk.config.stem_factor
        minimum = 1 if task == "regression" else 2
        if isinstance(n_outputs, bool) or not isinstance(n_outputs, int) or n_outputs < minimum:
            raise ConfigError("n_outputs", n_outputs, f"an integer >= {minimum}",
                              reason="a classifier needs two classes or more" if minimum == 2 else None)
        self.trunk, self.task, self.pool = trunk, task, pool
        self.dropout = nn.Dropout(dropout) if dropout > 0 else None
        self.head = nn.Linear(trunk.config.d_model, n_outputs)
        nn.init.normal_(self.head.weight, 0.0, trunk.config.init_std)
        nn.init.zeros_(self.head.bias)
        self.register_buffer("target_mean", torch.zeros(n_outputs))
        self.register_buffer("target_std", torch.ones(n_outputs))

    def set_target_scale(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """The training targets' mean and standard deviation (regression); a zero spread is refused."""
        if self.task != "regression":
            raise InputError("target standardisation belongs to regression heads")
        if bool((std <= 0).any()):
            raise InputError("the training targets do not vary (standard deviation 0): nothing to regress")
        self.target_mean.copy_(mean)
        self.target_std.copy_(std)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, content_mask: torch.Tensor,
                labels: torch.Tensor | None = None, segment_ids: torch.Tensor | None = None) -> TaskOutput:
        """labels: (B,) class ids, (B, n_outputs) values in the label's unit, or (B, T) token classes (-100: none).
        `segment_ids` (packed rows, instead of `attention_mask`; `biotf.model.segments`): a sequence head pools each
        record alone and returns one output per record, in row order then run order (`by_segment`); a token head
        returns one per position, as without packing."""
        trunk = self.trunk.encode(input_ids, attention_mask, segment_ids=segment_ids)
        bins = trunk.bins if self.resolution == "bin" else None
        if bins is not None:  # from_features reads bins from real tokens packed to the front of each row
            labels = None if labels is None else bins.pack(labels)
        out = self.from_features(self._features(trunk, content_mask, segment_ids), labels)
        return out if bins is None else TaskOutput(bins.unpack(out.logits), bins.unpack(out.predictions), out.loss)

    def features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                 content_mask: torch.Tensor) -> torch.Tensor:
        """What `from_features` takes, of a right-padded batch (as biotf's collators pad): (B, D) pooled vectors, or
        (B, T, D) per token (token task; at bin resolution each token its bin's vector)."""
        return self._features(self.trunk.encode(input_ids, attention_mask), content_mask)

    def _features(self, trunk: TrunkOutput, content_mask: torch.Tensor,
                  segment_ids: torch.Tensor | None = None) -> torch.Tensor:
        if self.task != "token":
            if segment_ids is None:
                return pool_tokens(trunk.per_token(), content_mask, self.pool)
            return pool_tokens(by_segment(trunk.per_token(), segment_ids), by_segment(content_mask, segment_ids),
                               self.pool)
        if self.resolution == "bin":
            return trunk.bins.repeat(trunk.last_hidden_state)  # packed: real tokens first in each row
        return self.trunk.token_states(trunk)

    def from_features(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> TaskOutput:
        """The head on the trunk's features: (B, D) pooled vectors, or (B, T, D) token vectors (token task; at bin
        resolution each token carries its bin's vector, the real tokens of each row first); what `forward` computes
        after the trunk, and what a frozen trunk's cached features train."""
        if self.resolution == "bin":
            return self._from_bins(x[:, ::self.factor], x.shape[1], labels)
        logits = self.head(x if self.dropout is None else self.dropout(x))
        if self.task == "regression":
            predictions = logits.detach() * self.target_std + self.target_mean
        else:
            predictions = logits.detach().argmax(-1)
        return TaskOutput(logits, predictions, None if labels is None else self.loss(logits, labels))

    def _from_bins(self, bins: torch.Tensor, length: int, labels: torch.Tensor | None) -> TaskOutput:
        """The head on each bin, its loss against the bins' majority labels; logits and predictions per token."""
        logits = self.head(bins if self.dropout is None else self.dropout(bins))
        loss = None
        if labels is not None:
            check_token_labels(labels, (bins.shape[0], length))
            loss = self.loss(logits, majority_bins(labels, self.factor, logits.shape[-1])[0])
        per_token = logits.repeat_interleave(self.factor, dim=1)[:, :length]
        return TaskOutput(per_token, per_token.detach().argmax(-1), loss)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.task == "regression":
            return F.mse_loss(logits.float(), ((labels - self.target_mean) / self.target_std).float())
        if self.task == "token":
            check_token_labels(labels, logits.shape[:-1])
            if not bool((labels != IGNORE_INDEX).any()):
                return logits.sum() * 0.0  # no labelled token in this batch: a zero that keeps the graph
            return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX)
        return F.cross_entropy(logits.float(), labels)


def check_token_labels(labels: torch.Tensor, shape: tuple[int, ...]) -> None:
    if labels.shape != shape:
        raise InputError(f"token labels must have the shape of input_ids {tuple(shape)}, got {tuple(labels.shape)}")
