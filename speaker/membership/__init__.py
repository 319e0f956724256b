"""SWIM membership among speakers: who is alive, agreed without a coordinator.

Layers, pure first (none of the pure modules does I/O or reads a clock):
    config    timings, their validation, the detection-time model
    messages  the protocol's messages as values
    codec     their binary wire format; any bytes decode to messages or a named drop
    sealing   AES-GCM with a keyring and a replay window; any bytes open or drop
    gossip    the piggyback queue with bounded retransmission
    machine   the SWIM + Lifeguard state machine: events in, packets and changes out
and the thin shell around them:
    node      asyncio UDP transport and the async API the speaker uses
    metrics   Prometheus collector (ironlb_memberlist_*)
    logs      JSON-lines logging
    __main__  standalone member for tests and benchmarks
See docs/membership.md.
"""
