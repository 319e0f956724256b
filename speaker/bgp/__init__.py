"""BGP mode: what to announce to whom (pure), and ExaBGP driven to announce it (shell).

Pure: `peers` (sessions this node keeps), `routes` (desired routes per peer, minimal diffs),
`rendering` (ExaBGP configuration and API commands), `events` (parsing what ExaBGP reports),
`bfd.machine` / `bfd.packet` (RFC 5880). Shell: `exabgp` (one supervised ExaBGP process per
peer), `bfd.transport` (UDP), `speaking` (the speaker's async API tying them together).
See docs/bgp.md for the design choices and the measurements behind them.
"""
