"""The real executor's model: a Llama-family decoder on the paged KV cache, and its weights."""

from engines.model.config import CheckpointError, DecoderConfig, RopeConfig, load_config
from engines.model.decoder import PagedDecoder
from engines.model.kv_cache import PagedKVCache

__all__ = [
    "CheckpointError",
    "DecoderConfig",
    "PagedDecoder",
    "PagedKVCache",
    "RopeConfig",
    "load_config",
]
