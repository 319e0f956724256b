"""The ironlb speaker: one per node, makes allocated addresses reachable (L2 or BGP)."""
