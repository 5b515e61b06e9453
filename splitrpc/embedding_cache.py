"""embedding_cache.py: the native embedding cache (set-associative float32 vectors by int64 key, LRU per slabset; splitrpc_embed.h) that an embedding store puts in front of its tiers. Any number of threads may use one cache at once (calls release the GIL; the cache locks per slabset). The public face of splitrpc._native.embed."""
from splitrpc._native.embed import MAX_DIM, MAX_SLABS_PER_SET, SLAB, EmbeddingCache

__all__ = ["EmbeddingCache", "SLAB", "MAX_DIM", "MAX_SLABS_PER_SET"]
