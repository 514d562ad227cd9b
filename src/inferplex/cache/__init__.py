"""The response cache (issue 26, docs/caching.md): exact and semantic, tenant-isolated, streams replayed."""
