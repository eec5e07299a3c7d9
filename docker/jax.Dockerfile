# Image for the JAX kit: python:3.11-slim-bookworm + jax, flax, optax from PyPI:
# the GPU image's jax-cuda12-plugin and jax-cuda12-pjrt, whose nvidia-*-cu12 wheels
# carry CUDA 12, cuDNN, NCCL (locks/jax-cuda.txt), or the CPU-only jaxlib
# (locks/jax-cpu.txt); the NVIDIA container toolkit injects the driver at run time.
#
# Build it with `nox -s images` (python -m reprokit.images build), which sends
# a minimal context (this file, docker/bases.toml, the lock file, and an
# optional extra CA as docker/extra-ca.pem) and tags the image by content.
# The kit code is NOT in the image: the runner mounts reprokit/kits/ read-only at
# /opt/reprokit/reprokit/kits (on the PYTHONPATH below, as the namespace package
# reprokit), so a code change needs no rebuild.
#
# The classic builder (what the Docker SDK uses) has no build secrets, so the
# extra CA lives in the builder stage only; the final stage copies the finished
# virtualenv and never sees the CA (tests/test_docker_runner.py checks the
# layers and `docker history`).

# Base image, pinned by digest; `nox -s pin` rewrites the next two lines.
# base-pin: index digest of python:3.11-slim-bookworm as listed in docker-library/repo-info@33a22f41ac7bf613bc03380b0317536a9a7fb5e8 repos/python/remote/3.11-slim-bookworm.md (Python 3.11.16)
ARG BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm@sha256:0bee7276f83efd4a1ee05bbbf4281d95ed28e079220a9457f25a93e3f1e3c31b

FROM ${BASE_IMAGE} AS builder
ARG LOCK_FILE=locks/jax-cuda.txt
COPY ${LOCK_FILE} /build/lock.txt
# bases.toml always exists, so the glob may match nothing: no CA, no error.
COPY docker/bases.toml docker/extra-ca.pe[m] /build/ca/
RUN set -eu; \
    cert=""; \
    if [ -s /build/ca/extra-ca.pem ]; then \
        cat /etc/ssl/certs/ca-certificates.crt /build/ca/extra-ca.pem > /build/ca/bundle.pem; \
        cert="--cert=/build/ca/bundle.pem"; \
    fi; \
    python3 -m venv /opt/venv; \
    # Wheels wherever the lock has one; the hashes pin every file (source builds only where
    # a pinned package has no wheel).
    /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check $cert \
        --require-hashes --no-deps --prefer-binary -r /build/lock.txt; \
    /opt/venv/bin/pip check

FROM ${BASE_IMAGE}
RUN echo 'reprokit:x:10001:10001:reprokit kit:/tmp:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'reprokit:x:10001:' >> /etc/group \
 && mkdir -p /opt/reprokit/reprokit/kits /data /results
COPY --from=builder /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONPATH=/opt/reprokit \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
ARG BASE_IMAGE
ARG BASE_DIGEST=
LABEL org.opencontainers.image.base.name="${BASE_IMAGE}" \
      org.opencontainers.image.base.digest="${BASE_DIGEST}" \
      org.reprokit.framework="jax"
USER 10001:10001
WORKDIR /tmp
CMD ["python", "-m", "reprokit.kits.run", "--help"]
