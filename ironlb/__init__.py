"""The shared, pure core of ironlb: the metallb.io resource model, parsing, validation.

Nothing in this package performs I/O; the controller and the speaker feed it plain dicts from the
Kubernetes API and act on what it returns.
"""
