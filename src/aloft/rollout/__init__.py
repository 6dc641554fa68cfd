"""Trajectory generation: env <-> engine, token-in/token-out, many trajectories in flight."""

from aloft.rollout.generator import ChatFormatter, EpisodeLimits, Generator

__all__ = ["ChatFormatter", "EpisodeLimits", "Generator"]
