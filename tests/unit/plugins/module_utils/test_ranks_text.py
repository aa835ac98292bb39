"""ranks_text: ranks in a message, as short as a fleet of 1024 ranks needs."""

from __future__ import annotations

from ansible_collections.gpuops.training.plugins.module_utils.ranks_text import ranks_phrase, ranks_text


def test_runs_of_three_or_more_are_ranges_and_the_rest_stay_numbers():
    assert ranks_text([5, 0, 1, 9, 6, 7, 8, 12]) == "0, 1, 5-9, 12"
    assert ranks_text(list(range(21)) + list(range(22, 1024))) == "0-20, 22-1023"


def test_past_twenty_parts_or_fewer_ranks_than_there_are_the_count_is_given():
    assert ranks_text(range(0, 100, 2)).endswith("38 ... (50 ranks)")
    assert ranks_text([1, 2, 3], total=5000) == "1-3 ... (5000 ranks)"


def test_the_phrase_is_singular_for_one_rank():
    assert ranks_phrase([21]) == "rank 21"
    assert ranks_phrase([40, 41, 42, 43]) == "ranks 40-43"
    assert ranks_phrase([]) == "no rank"
