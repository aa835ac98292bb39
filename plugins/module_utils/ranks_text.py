# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ranks in a message, as short as a fleet needs: ``0-20, 22-39`` for 39 ranks of 1024."""

from __future__ import annotations

# Parts (single ranks or ranges) a message lists before it gives the count instead.
MAX_PARTS = 20


def ranks_text(ranks, total=None, max_parts=MAX_PARTS):
    """``0, 1, 5-9, 12``: the ranks in order, each run of three or more as a range; past
    ``max_parts`` parts, or when ``total`` (the ranks there are) is more than those given,
    ``... (N ranks)``."""
    ranks = sorted(set(ranks))
    total = len(ranks) if total is None else total
    parts = []
    start = previous = None
    for rank in ranks:
        if previous is not None and rank == previous + 1:
            previous = rank
            continue
        if start is not None:
            parts.extend(_run(start, previous))
        start = previous = rank
    if start is not None:
        parts.extend(_run(start, previous))
    text = ", ".join(parts[:max_parts])
    if len(parts) > max_parts or total > len(ranks):
        text += " ... (%d ranks)" % total
    return text


def ranks_phrase(ranks, total=None):
    """``rank 3``, ``ranks 0, 1``, ``ranks 0-20, 22-39``; ``no rank`` for none."""
    ranks = sorted(set(ranks))
    if not ranks:
        return "no rank"
    total = len(ranks) if total is None else total
    return ("rank %s" if total == 1 else "ranks %s") % ranks_text(ranks, total)


def where_ranks_ran(places, noun="node", max_places=10):
    """``on node a``, or ``on nodes a (ranks 0-7), b (rank 9)``: ``places`` maps each rank to
    where it ran (its node, or its host); at most ``max_places`` of them, then how many more."""
    by_place = {}
    for rank, place in sorted(places.items()):
        by_place.setdefault(place or "an unknown %s" % noun, []).append(rank)
    if not by_place:
        return ""
    if len(by_place) == 1:
        return "on %s %s" % (noun, next(iter(by_place)))
    parts = ["%s (%s)" % (place, ranks_phrase(ranks)) for place, ranks in list(by_place.items())[:max_places]]
    more = len(by_place) - max_places
    return "on %ss %s%s" % (noun, ", ".join(parts), " and %d more" % more if more > 0 else "")


def _run(start, end):
    if end - start >= 2:
        return ["%d-%d" % (start, end)]
    return [str(rank) for rank in range(start, end + 1)]
