"""The store layer: records.py keeps golden records per env key (atomic writes, locks, one-
transaction regens), files.py its durable file operations, env.py the environment's fingerprint
and key."""
