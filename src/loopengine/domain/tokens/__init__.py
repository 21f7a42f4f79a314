"""What model calls cost, and how much of the context window a session uses (usage, metering, policy)."""
