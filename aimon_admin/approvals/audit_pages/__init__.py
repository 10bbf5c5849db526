"""The auditor's pages under /audit/ (URL namespace `audit:`, templates under audit/).

They live in approvals, not audit, because they read approvals' grants, sessions and
requests and runtimes' names: audit stays a leaf that other apps write to and that knows
no other app's models (tests/test_layers.py).
"""
