"""Layer-2 mode's data plane: answer ARP and NDP for the addresses this node owns.

Pure modules: `packets` (codec), `filters` (BPF programs), `responding` (answer or not, and why),
`conflicts` (another machine claiming an owned address), `gratuitous` (announcement schedule),
`interfaces` (which interfaces answer), `metrics`.
I/O: `sockets` (AF_PACKET ports, interface scan), `announcing` (the asyncio data plane),
`probing` (a resolver that measures who answers and how fast), `__main__` (a runner for the lab).
"""
