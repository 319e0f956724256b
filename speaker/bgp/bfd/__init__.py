"""BFD (RFC 5880 asynchronous mode, RFC 5881 single hop) for the BGP sessions ExaBGP keeps.

ExaBGP has no BFD, so the speaker runs its own: `packet` (codec), `machine` (pure per-session
state machine on an injected clock), `transport` (asyncio UDP). When a session that was Up goes
Down (not by the peer's AdminDown), the BGP session to that peer is torn down.
"""
