"""Administration: keys, accounts and credits, usage. One set of operations, served over HTTP and the CLI."""
