"""The local backend: a single-process RL trainer for small causal LMs (CPU miniature, one GPU)."""
