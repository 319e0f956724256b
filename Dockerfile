# syntax=docker/dockerfile:1
# Two images from one build: the controller and the speaker (which includes ExaBGP).
#
#   docker build --target controller -t ironlb/controller:0.1.0 .
#   docker build --target speaker    -t ironlb/speaker:0.1.0 .
#
# Both share one virtual environment, built once in the `build` stage; the final stages add
# nothing but a user and an entry point, so they cost one layer each.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: the project and its dependencies in /opt/ironlb ---------------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/ironlb
# Only what the distribution is built from (see .dockerignore): tests, docs and charts stay out.
COPY pyproject.toml README.md ./
COPY ironlb/ ironlb/
COPY ironlb_io/ ironlb_io/
COPY controller/ controller/
COPY speaker/ speaker/
COPY ironlb_cli/ ironlb_cli/
# A regular (non-editable) install: the image needs no source tree. ExaBGP is a dependency of
# the project, so its `exabgp` script lands in /opt/ironlb/bin, where the speaker looks first.
# Byte-compiled here, because the root file system is read-only at run time.
RUN /opt/ironlb/bin/pip install --no-cache-dir --no-compile /src \
    && /opt/ironlb/bin/python -m compileall -q /opt/ironlb/lib \
    && /opt/ironlb/bin/exabgp version

# --- runtime: the slim base plus the environment -------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="ironlb" \
      org.opencontainers.image.description="Bare-metal type LoadBalancer that speaks MetalLB's API" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/ironlb/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/ironlb /opt/ironlb
WORKDIR /tmp

# --- controller: unprivileged ---------------------------------------------------------------------
FROM runtime AS controller
# nobody:nogroup, as in MetalLB's controller image.
USER 65534:65534
EXPOSE 7472 9443
ENTRYPOINT ["ironlb-controller"]

# --- speaker: unprivileged by default -------------------------------------------------------------
FROM runtime AS speaker
# The image does not run as root by itself. Answering ARP/NDP needs CAP_NET_RAW in the effective
# set, which Kubernetes grants only to uid 0, so the chart's DaemonSet sets runAsUser: 0 together
# with `capabilities: {drop: [ALL], add: [NET_RAW]}` and no privilege escalation.
USER 65534:65534
EXPOSE 7472 7946/udp
ENTRYPOINT ["ironlb-speaker"]
