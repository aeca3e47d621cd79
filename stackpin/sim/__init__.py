"""The simulator: an OpenAI-compatible endpoint whose timing follows a locked stack (README.md)."""
