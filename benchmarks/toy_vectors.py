"""A hashing-trick embedder for the vector benchmarks: a model's cost shape without a model.

No import of tortoise_sdk here: a benchmark measuring another revision's code (``--rev``) imports
this beside that code.
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ("hashing",)


def hashing(texts: list[str]) -> list[list[float]]:
    """A 384-dimension hashing-trick vector per text: a stand-in for a model's cost shape, not for its meaning."""
    out = []
    for text in texts:
        v = np.zeros(384, dtype=np.float32)
        for word in text.lower().split():
            h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
            v[h % 384] += 1.0 if h >> 63 else -1.0
        out.append((v / (np.linalg.norm(v) or 1.0)).tolist())
    return out


hashing.model_name = "hashing-384"  # type: ignore[attr-defined]
