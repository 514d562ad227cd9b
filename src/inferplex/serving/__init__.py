"""How `inferplex serve` runs: one process, or a supervisor and N workers sharing one listening socket.

- `readiness`: `/health/ready`, which turns 503 the moment a process starts draining (a load balancer's cue).
- `drain`: the uvicorn server every process runs, which drains on SIGTERM instead of stopping at once.
- `worker`: one serving process (the whole server with `--workers 1`, or one of a supervisor's workers).
- `supervisor`: binds the socket once, runs migrations once, starts, restarts, reloads and drains workers.

Nothing is imported here, so that the app can import `readiness` without pulling in the server.
"""
