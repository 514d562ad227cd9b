"""Durable media jobs (issue 22): video jobs that outlive the request that made them and the replica that
polls them. `rows.py` holds the table and its leases, `service.py` what the routes call (`services.jobs`),
`poller.py` the background task every replica runs."""
