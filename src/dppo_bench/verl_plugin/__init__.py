"""dppo-bench inside verl 0.9.1: every mask rule as a verl policy-loss mode, the Top-K plumbing, the mismatch
measurement, CPU support, and the launcher of verl runs.

Importing this package (or the string builders in it, such as :mod:`.overrides`) imports no verl and patches
nothing: that is what the plugin's entry point, :mod:`.entry`, does when verl loads it.
"""
