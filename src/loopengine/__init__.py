"""loopengine: durable tool-calling agents that pause for a human.

The package root imports nothing heavy: a Lambda route pays only for what it uses.
Core modules (messages, gate, checkpoint, loop, resolution) depend on the standard
library and each other; adapters (stores, models, notify) hold the SDKs.
"""

__version__ = "0.1.0"
