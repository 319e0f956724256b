"""SWIM membership among speakers: who is alive, agreed without a coordinator."""
