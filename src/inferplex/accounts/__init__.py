"""Who pays and how much: API keys, signed tokens, prices, and the guard that reserves and settles credits."""
