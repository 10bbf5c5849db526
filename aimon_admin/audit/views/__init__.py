"""The auditor's pages (read-only): the log, escalated grants, export, analytics."""
