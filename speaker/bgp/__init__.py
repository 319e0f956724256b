"""BGP mode: what to announce to whom (pure), and ExaBGP driven to announce it (shell).

Pure: `peers` (sessions this node keeps), `routes` (desired routes per peer, minimal diffs),
`rendering` (ExaBGP configuration and API commands), `events` (parsing what ExaBGP reports),
`next_hops` (a dual-stack session's next hop of its other family), `bfd.machine` /
`bfd.packet` (RFC 5880). Shell: `exabgp` (one supervised ExaBGP process per peer),
`bfd.transport` (UDP), `local_addresses` (this node's addresses, for `next_hops`), `speaking`
(the speaker's async API tying them together).
See docs/bgp.md for the design choices and the measurements behind them.
"""
