# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric of a GPU fleet: finding the node (or the link) that makes nccl-tests slow.

- :mod:`.isolate` plans the rounds of an isolate run (every node alone, then disjoint pairs in
  parallel rounds, then the halves of each slow pair beside nodes proven good) and judges them
  against the fleet's own median and an expected bus bandwidth; pure functions on numbers.
- :mod:`.results` turns each test's nccl-tests log into the measurement the planner reads.
- :mod:`.profiles` computes the expected bus bandwidth of a fabric profile (the profiles are
  data: ``roles/nccl_tests/vars/fabric_profiles.yml``, each figure with its source).
"""
