"""Positional information, one class per `pos` value, behind one small interface.

A position scheme can act at three places, and each class overrides only the ones it uses:
- `embed(x, positions)`: add a vector to the token embeddings (learned, sinusoidal);
- `rotary(positions, offset)`: the (cos, signed sin) that attention uses to rotate queries and keys (rope);
- `attention_bias(query_positions, key_positions, causal)`: an additive bias on attention scores (alibi).
`positions` are integer position ids of shape (batch or 1, length); the transformer derives them
from the padding mask so that left padding does not shift absolute positions.

Register a new scheme with `@register_position("name")`: `pos` allows every registered name, and the
class checks the config fields it needs in its `check_config` classmethod.

Reading past the trained length (`reading_length`): a scheme that computes a position for any index (none,
sinusoidal, RoPE, ALiBi: `extends_past_training`) may read windows longer than the model's `max_seq_len`, with a
one-line warning naming that length, since how well a model carries past it is the model's own (measured in
docs/experiments/extrapolation.md: ALiBi holds its loss at 8x, RoPE and sinusoidal lose 0.1-8%; in genome annotation
RoPE at 38x loses half its F1, ALiBi nothing). A learned table has no row past it: refused, with how to train for it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import nn

import warnings

from biotf.errors import BiotfWarning, ConfigError

if TYPE_CHECKING:  # config.py imports this registry to know the allowed `pos` values
    from biotf.model.config import TransformerConfig

POSITION_CLASSES: dict[str, type[PositionEncoding]] = {}


def register_position(name: str):
    def decorator(cls: type[PositionEncoding]) -> type[PositionEncoding]:
        POSITION_CLASSES[name] = cls
        return cls

    return decorator


def build_positions(config: TransformerConfig) -> PositionEncoding:
    return POSITION_CLASSES[config.pos](config)


class PositionEncoding(nn.Module):
    """No positional information (`pos: none`); the base of every scheme. `biases_attention`: whether
    `attention_bias` returns a bias (so that the transformer knows before asking for one block of it);
    `extends_past_training`: whether positions past `max_seq_len` are computed (`reading_length`)."""

    biases_attention = False
    extends_past_training = True

    def __init__(self, config: TransformerConfig):
        super().__init__()

    @classmethod
    def check_config(cls, config: TransformerConfig) -> None:
        """Raise ConfigError where `config` lacks what this scheme needs (called when the config is built)."""

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return x

    def rotary(self, positions: torch.Tensor, offset: int | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
        return None

    def attention_bias(self, query_positions: torch.Tensor, key_positions: torch.Tensor,
                       causal: bool) -> torch.Tensor | None:
        return None


@register_position("learned")
class LearnedPositions(PositionEncoding):
    """A trained table of `max_seq_len` vectors added to the token embeddings (GPT-2, BERT), after `position_offset`
    rows that only HF's padding positions use (RoBERTa, ESM-1b: real tokens are numbered from pad id + 1). With a
    stem, positions count bins: ceil(max_seq_len / stem_factor) rows."""

    extends_past_training = False

    @classmethod
    def check_config(cls, config: TransformerConfig) -> None:
        if config.max_seq_len is None:
            raise ConfigError("max_seq_len", None, "an integer >= 1",
                              reason="pos=learned needs max_seq_len rows in its position table")

    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        rows = -(-config.max_seq_len // config.stem_factor)
        self.table = embedding_table(rows + config.position_offset, config.embed_width)
        self.offset = config.position_offset

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return x + self.table(positions + self.offset if self.offset else positions)


def embedding_table(rows: int, dim: int) -> nn.Embedding:
    """An nn.Embedding, left uninitialised on the meta device, where a checkpoint's model is built before its weights
    are assigned: its own normal_ there imports torch._dynamo (1.5-9 s of a job's start-up). Elsewhere it draws its
    initial weights as before, so that a seed gives the same model."""
    if torch.get_default_device().type == "meta":
        return nn.Embedding(rows, dim, _weight=torch.empty(rows, dim))
    return nn.Embedding(rows, dim)


def reading_length(config: TransformerConfig, requested: int | None, key: str = "max_length") -> int:
    """Tokens a window of `requested` length holds (special tokens included), by default the model's
    `max_seq_len`. Longer than `max_seq_len` only where the position scheme extends past it, with a `BiotfWarning`
    naming the trained length; a learned table is refused with how to train a model that reads that far."""
    trained = config.max_seq_len
    if requested is None:
        if trained is None:
            raise ConfigError(key, None, allowed="an integer >= 1",
                              reason="this model has no max_seq_len to default to")
        return trained
    if trained is None or requested <= trained:
        return requested
    if not POSITION_CLASSES[config.pos].extends_past_training:
        raise ConfigError(key, requested, allowed=f"1..{trained} (the model's max_seq_len)",
                          reason=f"pos={config.pos} has no position past the {trained} it was trained with; train "
                                 f"with model.max_seq_len={requested}, or with model.pos=alibi or rope, which read "
                                 "past their training length")
    warnings.warn(f"{key}={requested} reads past the {trained} tokens this model was trained with (its "
                  f"max_seq_len); pos={config.pos} extends, but accuracy that far is the model's own (ALiBi holds "
                  "it best)", BiotfWarning, stacklevel=3)
    return requested


def sinusoidal_table(positions: torch.Tensor, d_model: int) -> torch.Tensor:
    """Vaswani et al. 2017, section 3.5: PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(p / 10000^(2i/d)).

    Returns float32 of shape positions.shape + (d_model,), sines and cosines interleaved as in the paper (transformers'
    Marian and tensor2tensor put all sines first, then all cosines: the same values, columns permuted; the tests
    compare with both to 1e-6).
    """
    inverse_frequency = torch.exp(torch.arange(0, d_model, 2, device=positions.device, dtype=torch.float64)
                                  * (-math.log(10000.0) / d_model))
    angles = positions.to(torch.float64).unsqueeze(-1) * inverse_frequency
    table = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)
    return table.to(torch.float32)


@register_position("sinusoidal")
class SinusoidalPositions(PositionEncoding):
    """Fixed sines and cosines added to the token embeddings (Vaswani et al. 2017); no parameters."""

    @classmethod
    def check_config(cls, config: TransformerConfig) -> None:
        if config.embed_width % 2:
            key = "d_model" if config.d_embed is None else "d_embed"
            raise ConfigError(key, config.embed_width, "an even number",
                              reason="sinusoidal positions pair a sine and a cosine per frequency")

    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        self.d_model = config.embed_width
        self._table = torch.empty(0)  # cached rows 0..n-1, grown on demand; not a buffer (not saved)

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        needed = int(positions.max()) + 1 if positions.numel() else 0
        if self._table.shape[0] < needed or self._table.device != x.device:
            rows = max(needed, 2 * self._table.shape[0])
            self._table = sinusoidal_table(torch.arange(rows, device=x.device), self.d_model)
        return x + self._table[positions].to(x.dtype)


def rope_inverse_frequency(head_dim: int, theta: float) -> torch.Tensor:
    """theta^(-2i/d) for i < d/2, in float32, computed as HF's `compute_default_rope_parameters` does, on the CPU
    whatever device a model is built under (the tables follow the input's device): on the meta device, where a
    checkpoint's model is built before its weights are assigned, the division runs through torch's Python reference
    and imports torch._dynamo (1.5-5 s of a job's start-up)."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").to(torch.float32) / head_dim
    return 1.0 / (theta ** exponents)


@register_position("rope")
class RotaryPositions(PositionEncoding):
    """Rotary position embedding (Su et al. 2021), in the layout of HF Llama/Qwen2.

    Frequencies theta^(-2i/d) for i < d/2 (d = head size); dimension j and j + d/2 form a rotated
    pair ("rotate_half"), and cos/sin are repeated over both halves, exactly as `Qwen2RotaryEmbedding`
    and `apply_rotary_pos_emb` do, so HF weights load without permuting q/k rows.

    The frequencies are a saved buffer, `positions.inverse_frequency`, not recomputed from theta: a checkpoint's
    stored values win. Official ESM-2 checkpoints were trained in float16 and store frequencies rounded to it
    (1, 0.31616, 0.099976, ...); HF uses them, and recomputing exact ones moves logits by up to 0.1
    (transformers PR #19587). A state dict without the buffer (biotf checkpoints before it existed) gets the
    computed values. The buffer stays float32 whatever dtype the model is cast to, as HF keeps it.
    """

    @classmethod
    def check_config(cls, config: TransformerConfig) -> None:
        if config.head_dim % 2:
            raise ConfigError("pos", config.pos, " | ".join(p for p in POSITION_CLASSES if p != "rope"),
                              reason=f"RoPE rotates pairs of dimensions but the head size d_model/n_heads="
                                     f"{config.head_dim} is odd")

    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        self.head_dim, self.theta = config.head_dim, float(config.rope_theta)
        self.register_buffer("inverse_frequency", rope_inverse_frequency(self.head_dim, self.theta))
        self.register_load_state_dict_pre_hook(self._fill_missing_frequency)
        self._forget_tables()

    def _forget_tables(self) -> None:
        self._cos = self._signed_sin = torch.empty(0)  # cached float32 tables (rows, head_dim); not buffers

    def _fill_missing_frequency(self, module: nn.Module, state_dict: dict, prefix: str, *args) -> None:
        key = prefix + "inverse_frequency"
        if key not in state_dict:
            state_dict[key] = rope_inverse_frequency(self.head_dim, self.theta)
        self._forget_tables()

    def _apply(self, fn, recurse: bool = True):
        frequency = self.inverse_frequency
        super()._apply(fn, recurse)
        moved = self.inverse_frequency
        if frequency.is_meta or moved.is_meta:
            self.inverse_frequency = moved.float()
        else:  # the device follows the model, the dtype and values do not
            self.inverse_frequency = frequency.to(device=moved.device, dtype=torch.float32)
        self._forget_tables()
        return self

    def _tables(self, rows: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cos.shape[0] < rows or self._cos.device != device:
            rows = max(rows, 2 * self._cos.shape[0], 256)
            # float32 positions times float32 frequencies, as HF does, for bitwise-close parity.
            frequency = self.inverse_frequency.to(device=device, dtype=torch.float32)
            angles = torch.arange(rows, device=device, dtype=torch.float32)[:, None] * frequency
            sin = angles.sin()
            # rotate_half(x) * sin == cat(x2, x1) * cat(-sin, sin): fold rotate_half's sign into the table.
            self._cos, self._signed_sin = torch.cat((angles.cos(),) * 2, dim=-1), torch.cat((-sin, sin), dim=-1)
        return self._cos, self._signed_sin

    def rotary(self, positions: torch.Tensor, offset: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, signed sin) for `apply_rotary`, each (batch or 1, length, 1, head_dim): they broadcast over
        heads in (B, T, H, D) layout. `offset` says the positions are offset, offset + 1, ... (no padding):
        the tables are then sliced rather than gathered, without reading `positions`."""
        if offset is not None:
            length = positions.shape[-1]
            cos, sin = self._tables(offset + length, positions.device)
            return cos[offset:offset + length][None, :, None], sin[offset:offset + length][None, :, None]
        cos, sin = self._tables(int(positions.max()) + 1 if positions.numel() else 1, positions.device)
        return cos[positions].unsqueeze(2), sin[positions].unsqueeze(2)


def rotary_for_blocks(rotary: tuple[torch.Tensor, torch.Tensor], dtype: torch.dtype, batch: int,
                      heads: int) -> tuple[torch.Tensor, ...]:
    """The (cos, signed sin) tables made ready once per forward for every layer's `apply_rotary`, in the blocks'
    `dtype`. On the CPU, where a head has at most twice as many dimensions as there are heads rotated together
    (ESM-2's 16 dimensions x 40 query and key heads), as one (head_dim, head_dim) rotation matrix per token,
    (batch * length, head_dim, head_dim): the rotation is then one batched product instead of a swap, a product
    and a multiply-add (PyTorch's CPU kernels run a table broadcast over heads 16 numbers at a time), and the
    matrices take no more memory than two tables expanded over the heads would. 9 x 1,024 tokens x 40 heads x 16,
    2-core Xeon with AMX: 1.8 ms in bfloat16 against 5.4 (tables expanded) and 16.2 (broadcast), 1.3 ms in float32
    against 14.0 (broadcast)."""
    cos, sin = (table.to(dtype) for table in rotary)
    head_dim = cos.shape[-1]
    if cos.device.type != "cpu" or head_dim > 2 * heads:
        return cos, sin
    half, tokens = head_dim // 2, batch * cos.shape[1]
    cos, sin = (table.expand(batch, -1, -1, -1).reshape(tokens, head_dim) for table in (cos, sin))
    # x @ rotation: out[i] = x[i] * cos[i] + x[i +- half] * signed_sin[i] (rotate_half's pairs, HF's layout).
    rotation = cos.new_zeros(tokens, head_dim, head_dim)
    rotation.diagonal(dim1=1, dim2=2).copy_(cos)
    rotation.diagonal(-half, dim1=1, dim2=2).copy_(sin[:, :half])
    rotation.diagonal(half, dim1=1, dim2=2).copy_(sin[:, half:])
    return (rotation,)


def apply_rotary(x: torch.Tensor, *tables: torch.Tensor) -> torch.Tensor:
    """x * cos + rotate_half(x) * sin, where rotate_half(x) = cat(-x2, x1) (HF's layout); x is (B, T, heads,
    head_dim). `tables`: (cos, signed sin) of `RotaryPositions.rotary`, computed as x * cos + cat(x2, x1) *
    cat(-sin, sin) in three passes, or the one (B * T, head_dim, head_dim) rotation of `rotary_for_blocks`."""
    if len(tables) == 1:
        batch, length, heads, head_dim = x.shape
        rotated = torch.bmm(x.reshape(batch * length, heads, head_dim), tables[0].to(x.dtype))
        return rotated.view(batch, length, heads, head_dim)
    cos, signed_sin = tables
    first, second = x.chunk(2, dim=-1)  # a split: one cat in backward, no zero-filled slice gradients
    swapped = torch.cat((second, first), dim=-1)
    return torch.addcmul(x * cos.to(x.dtype), swapped, signed_sin.to(x.dtype))


def alibi_slope_values(n_heads: int) -> list[float]:
    """Head slopes of ALiBi (Press et al. 2022): for n a power of two, the geometric sequence starting at
    and multiplied by 2^(-8/n); otherwise the slopes of the closest smaller power of two n', followed by
    every other slope of 2n' (the authors' rule, as in their reference code and HF BLOOM's `_get_alibi_slopes`).
    Plain floats, so that a model built on the meta device (as checkpoints are loaded) has them."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_heads).is_integer():
        slopes = power_of_two(n_heads)
    else:
        closest = 2 ** math.floor(math.log2(n_heads))
        slopes = power_of_two(closest) + power_of_two(2 * closest)[0::2][: n_heads - closest]
    return slopes


@register_position("alibi")
class AlibiPositions(PositionEncoding):
    """Attention with linear biases (Press et al. 2022): score(i, j) -= slope_h * distance(i, j).

    Causal models use the paper's distance i - j (only j <= i is visible); bidirectional models use
    |i - j|, the symmetric form used by encoder adaptations (e.g. MosaicBERT).
    """

    biases_attention = True

    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        self.slopes = alibi_slope_values(config.n_heads)  # plain floats: no buffer to move or save

    def attention_bias(self, query_positions: torch.Tensor, key_positions: torch.Tensor,
                       causal: bool) -> torch.Tensor:
        """Float32 bias of shape (batch or 1, n_heads, query_length, key_length).

        The distances are subtracted in float32 (exact below 2^24 positions) and made absolute in place: chunked
        attention builds this bias for every chunk of every layer, and each pass over (queries x keys) counts."""
        distance = query_positions.to(torch.float32)[:, :, None] - key_positions.to(torch.float32)[:, None, :]
        if not causal:
            distance.abs_()
        slopes = torch.tensor([-slope for slope in self.slopes], dtype=torch.float32, device=distance.device)
        return distance[:, None] * slopes[None, :, None, None]


def t5_buckets(relative: torch.Tensor, bidirectional: bool, buckets: int, max_distance: int) -> torch.Tensor:
    """T5's bucket of each relative position (key - query), as transformers' `T5Attention._relative_position_bucket`
    and Mesh TensorFlow compute it: a bidirectional model gives each direction half the buckets (keys after the
    query in the upper half), a causal one sees only keys at or before the query; within a direction the first half
    of the buckets are exact distances and the rest logarithmically wider bins up to `max_distance`, beyond which all
    distances share the last bucket."""
    if bidirectional:
        buckets //= 2
        bucket = (relative > 0).long() * buckets
        distance = relative.abs()
    else:
        bucket = torch.zeros_like(relative)
        distance = (-relative).clamp(min=0)
    exact = buckets // 2
    # clamp(min=1): the log of distances below `exact` is never used (they are exact), but must not be log(0)
    wide = exact + (torch.log(distance.clamp(min=1).float() / exact) / math.log(max_distance / exact)
                    * (buckets - exact)).long()
    return bucket + torch.where(distance < exact, distance, wide.clamp(max=buckets - 1))


@register_position("t5")
class T5RelativePositions(PositionEncoding):
    """T5's relative position bias (Raffel et al. 2020, section 2.1): a learned scalar per head and bucket of the
    distance key - query (`t5_buckets`), added to the attention scores of every layer; one table, which transformers
    keeps in the first layer and hands to the others. Distances are those of the position ids, which count real
    tokens: transformers counts every index, the same on every real token of right-padded batches."""

    biases_attention = True

    @classmethod
    def check_config(cls, config: TransformerConfig) -> None:
        smallest = 2 if config.causal else 4
        if config.relative_buckets < smallest:
            raise ConfigError("relative_buckets", config.relative_buckets, f"an integer >= {smallest}",
                              reason="the buckets of each direction are half exact distances, half logarithmic bins")
        exact = config.relative_buckets // (2 if config.causal else 4)
        if config.relative_max_distance <= exact:
            raise ConfigError("relative_max_distance", config.relative_max_distance, f"an integer > {exact}",
                              reason=f"the first {exact} distances have exact buckets; the logarithmic ones span "
                                     "from there to relative_max_distance")

    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        self.buckets, self.max_distance = config.relative_buckets, config.relative_max_distance
        self.relative_bias = embedding_table(config.relative_buckets, config.n_heads)

    def attention_bias(self, query_positions: torch.Tensor, key_positions: torch.Tensor,
                       causal: bool) -> torch.Tensor:
        """Float32 bias of shape (batch or 1, n_heads, query_length, key_length)."""
        relative = key_positions.long()[:, None, :] - query_positions.long()[:, :, None]
        bucket = t5_buckets(relative, not causal, self.buckets, self.max_distance)
        return self.relative_bias(bucket).permute(0, 3, 1, 2).float()


# Registered last, so that it closes the list of allowed values (learned | sinusoidal | rope | alibi | t5 | none).
register_position("none")(PositionEncoding)
