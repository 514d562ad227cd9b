"""Native providers (Anthropic, Gemini, Azure, Bedrock) and the Anthropic dialect."""
