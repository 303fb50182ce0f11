"""Problem sets: what training and evaluation read, prepared from a spec's source.

``load`` (read a hub or local source, normalize to {id, problem, answer}, hash), ``pins`` (the sha256 a spec pins,
checked wherever a pinned file is read), ``prepare`` (``data prepare``: verl parquet, normalized rows, manifest).
Below ``eval/``, ``local/`` and the commands, above ``config/`` (the specs are config models).
"""
