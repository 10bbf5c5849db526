"""The auditor's pages under /audit/ (URL namespace `audit:`, templates under audit/).

Pages that read several apps (approvals' grants, sessions and requests, runtimes' names,
the audit log) sit on top of the domain apps, never inside one: a plain package, no models,
that no domain app imports (tests/test_layers.py). The audit app stays a leaf that other apps
write to and that knows no other app's models.
"""
