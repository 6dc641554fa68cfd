"""Agent programs for ``env=agent``. Each is an ordinary OpenAI-SDK program that imports nothing of
aloft: it finds its endpoint in ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` like any other."""
