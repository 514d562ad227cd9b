"""Routing and resilience: which deployment serves a request, and what happens when one fails.

- `options`: the request's routing fields (`provider` preferences, `models`, `endpoint_id`, `service_tier`,
  `region`, `timeout`), validated into one value the router reads from the context;
- `strategies`: pure ranking of deployments (weighted, least busy, lowest latency, lowest cost, priority);
- `retry`: which failures are retried where, and how long to wait (backoff with jitter, `Retry-After`);
- `cooldown`: the circuit breaker, in memory or shared through Redis;
- `gate`: per-deployment concurrency where `flex` yields to `default`, and RPM/TPM windows;
- `stats`: moving averages of latency and in-flight counts the strategies read;
- `router`: the `Router` stage that ties them together.

Nothing is imported here, so `pipeline` can import `routing.options` without a cycle.
"""
