"""The admin web console at /ui (issue 24): server-rendered pages over the admin operations."""
