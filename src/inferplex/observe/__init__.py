"""What operators see: metrics, traces, request logs and alerts, fed by one hub (`hub.Hub`)."""
