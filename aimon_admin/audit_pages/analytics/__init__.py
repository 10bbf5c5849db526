"""Decision analytics: how runtimes' approval requests fare, per day and per runtime.

Three modules, none with views or templates (the page is aimon_admin.audit_pages.analytics_views):

* figures: what is counted and the period it is counted over (`decision_report`);
* queries: the SQL that counts it, one pass per table;
* charts: those numbers as coordinates for server-drawn SVG, pure functions.
"""
