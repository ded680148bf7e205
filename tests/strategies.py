"""Reusable hypothesis strategies for phaze's inputs."""
from hypothesis import strategies as st

from phaze.models import ModelSpec


@st.composite
def model_specs(draw, max_layers: int = 4, max_head_dim: int = 16, max_heads: int = 8):
    """Small valid ModelSpecs covering every structural option (GQA, SwiGLU, RMSNorm,
    rotary/learned/no positions, biases on or off, an embedding projection, tied or not,
    encoder or decoder). Sizes stay small so graphs build in microseconds."""
    kv_heads = draw(st.sampled_from([1, 2, 4]))
    heads = kv_heads * draw(st.integers(1, max(1, max_heads // kv_heads)))
    head_dim = draw(st.integers(1, max_head_dim))
    hidden = heads * head_dim
    seq_len = draw(st.integers(1, 64))
    position = draw(st.sampled_from(["learned", "rotary", "none"]))
    return ModelSpec(
        name="hyp",
        n_layers=draw(st.integers(1, max_layers)),
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        ffn_hidden=draw(st.integers(1, 4 * hidden + 8)),
        vocab=draw(st.integers(1, 700)),
        seq_len=seq_len,
        activation=draw(st.sampled_from(["gelu", "relu", "swiglu"])),
        norm=draw(st.sampled_from(["layernorm", "rmsnorm"])),
        position=position,
        bias=draw(st.booleans()),
        embed_proj=draw(st.sampled_from([0, 0, 8, 24])),
        causal=draw(st.booleans()),
        tied_embeddings=draw(st.booleans()),
        max_positions=(seq_len + draw(st.integers(0, 3))) if position == "learned" else None,
        final_norm=draw(st.booleans()),
    )
