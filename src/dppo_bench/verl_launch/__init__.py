"""The launcher of verl runs, in our own process: a run's verl config overrides (:mod:`.run_config`,
:mod:`.overrides`), verl's own config composed and checked here (:mod:`.compose`), one attempt of verl's trainer on
one node or across a SLURM allocation (:mod:`.launch`, :mod:`.slurm`), its logs folded into the run's records
(:mod:`.records`), and Fig. 2's probe run (:mod:`.probe`).

What runs inside verl's processes is :mod:`dppo_bench.verl_plugin`; of it, this package imports only
:mod:`dppo_bench.verl_plugin.contract` (environment variable names, config keys, the hyperparameter channel).
"""
