"""Fig. 2's mismatch probe: mu and pi of every generated token of one rollout batch at the same parameters."""
