"""aloft: modular, fast reinforcement learning for language models on tool-use tasks."""

__version__ = "0.1.0"
