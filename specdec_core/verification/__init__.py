"""Verification: the acceptance rule, the caches that roll back, and what a verifier call costs.

`sampling` holds the one acceptance rule (Leviathan, Kalman & Matias 2023, Algorithm 1) and the
processed distributions it compares; `kv` prefills, extends and rolls back KV caches (a tree's too);
`cost` models a verifier call's time by the rows it checks. May import the root vocabulary only.
"""
