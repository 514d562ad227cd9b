"""Inferada's prompt templating and system prompt assembly (docs/dialects.md, "Inferada: system prompts").

`templates` renders text in a jinja2 sandbox and is what the config checks an operator's prompt with at
start-up; `assembly` is the pipeline's stage that builds the one system prompt an upstream receives. Kept
apart so the config can check a template without importing the stage (which imports the config).
"""
