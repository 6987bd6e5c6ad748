"""The checking layer - pytest-free: observed fields + a baseline record + the run's rules ->
outcomes. core.py judges a case (CaseCheck: Holm within the case, the run's rules); compare.py
and compare_stats.py judge one field by its kind; stats.py holds the tests and `SampleDesign`;
policy.py the tolerances of a comparison; findings.py groups outcomes into findings; humane.py
words them; claims.py checks release notes; regen.py diffs record sets; envs.py compares two
recorded environments."""
