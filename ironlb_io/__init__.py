"""The shell the programs share: the Kubernetes client, list-and-watch, retrying a start-up step,
and the log format.

The controller, the speaker, the `ironlb` command and the benches all talk to the apiserver and
all log; each used to borrow these from `controller/`, which made the speaker and the CLI look
built on the controller. They stand side by side on this package instead. `ironlb/` (pure)
never imports it; the import contracts in pyproject.toml check both rules.
"""
