"""dppo-bench: the DPPO paper as a reproducible experiment suite."""
