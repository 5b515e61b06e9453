"""embedding_cache.py: the native embedding caches (set-associative float32 vectors by int64 key, LRU per slabset; splitrpc_embed.h) that an embedding store puts in front of its tiers: EmbeddingCache in host memory, DeviceEmbeddingCache in a GPU's (its calls run as kernels). Any number of threads may use one cache at once (calls release the GIL). The public face of splitrpc._native.embed."""
from splitrpc._native.embed import (DEVICE_BATCH, MAX_DIM, MAX_SLABS_PER_SET, SLAB, DeviceEmbeddingCache,
                                    EmbeddingCache)

__all__ = ["EmbeddingCache", "DeviceEmbeddingCache", "SLAB", "MAX_DIM", "MAX_SLABS_PER_SET", "DEVICE_BATCH"]
