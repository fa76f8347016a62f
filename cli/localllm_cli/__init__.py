"""The `localllm` command line."""
