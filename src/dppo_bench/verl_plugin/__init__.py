"""dppo-bench inside verl 0.9.1's processes: every mask rule as a verl policy-loss mode, the Top-K plumbing, the
mismatch measurement, App. D's masked-token counts, the probe's dump, kept weights and CPU support.

Everything here runs in verl's driver, TaskRunner and Ray workers (and vLLM's processes: :mod:`.vllm_cpu`), loaded
by verl through the plugin's entry point, :mod:`.entry`. The launcher that starts verl (:mod:`dppo_bench.verl_launch`)
imports only :mod:`.contract`, the names both sides agree on; nothing here imports the launcher. Importing this
package (or :mod:`.contract`) imports no verl and patches nothing: that is what :mod:`.entry` does.
"""
