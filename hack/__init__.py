"""Developer and lab tooling: local control plane, network lab, demo."""
