"""Designs: what each suite observes of a case, and how many draws or samples a statistical or
timing field takes - one module per suite, each returning an `Observation` for the checking core
(outputs, caches, backends, contracts, sampling, one_step (the bias suite), latency)."""
