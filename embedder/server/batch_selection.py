"""Which pending texts run together (docs/embedder.md §batching): ``select_batch`` and the
bounds on a batch's padding and size. Pure functions of token lengths.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["MAX_PADDED_RATIO", "MAX_RUN_TOKENS", "select_batch"]

# A batch whose padded size exceeds its real tokens by more than this costs more than
# running its texts in separate batches (attention and the per-token work on padding
# are wasted); measured on MiniLM and a bge-small-shaped model on 2 cores.
MAX_PADDED_RATIO = 1.3

# No batch runs more padded tokens than this, below the spec's max_batch_tokens (8192): a
# query arriving during a batch waits for all of it, and past a few hundred tokens a
# bigger batch embeds no more per second on CPU. MiniLM fp32 on 2 (loaded) cores: 192
# memory-like passages (23-226 tokens) took 0.7-0.8x the time in batches of at most
# 512-2048 padded tokens that they took at 8192, and 256-token texts cost the same per
# token alone as 32 at a time. 1024 still batches 64 short queries; bench/embedder.py
# --behind-max measures what a query waits.
MAX_RUN_TOKENS = 1024


def select_batch(
    lengths: Sequence[int],
    *,
    max_batch_tokens: int,
    max_batch_size: int,
    anchor: int = 0,
    ranks: Sequence[int] | None = None,
) -> list[int]:
    """Pick the next batch from pending items given oldest first, as sorted indices.

    The ``anchor`` item always goes in (the Batcher picks it: see ``Batcher._order``);
    then items by ``ranks`` (lower first: the Batcher ranks each item by its call's
    place in line, the anchor's call first), within a rank those closest to the anchor in
    token length, then the older, while the padded cost ``max_len * n`` stays within
    ``max_batch_tokens`` and ``n`` within ``max_batch_size``. Without ranks, nearness
    alone decides.
    """
    if not lengths:
        return []
    target = lengths[anchor]
    chosen = [anchor]
    longest = target
    real = target
    rank = ranks if ranks is not None else [0] * len(lengths)

    def place(i: int) -> tuple[int, int, int]:
        return rank[i], abs(lengths[i] - target), i

    for i in sorted((i for i in range(len(lengths)) if i != anchor), key=place):
        if len(chosen) >= max_batch_size:
            break
        new_longest = max(longest, lengths[i])
        padded = new_longest * (len(chosen) + 1)
        if padded > max_batch_tokens:
            if ranks is None:
                break  # by nearness: every later item is at least as far off
            continue  # a later rank may hold shorter items that still fit
        if padded > MAX_PADDED_RATIO * (real + lengths[i]):
            continue  # mostly padding: it runs in a later batch of its own length
        chosen.append(i)
        longest = new_longest
        real += lengths[i]
    return sorted(chosen)
