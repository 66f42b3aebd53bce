# syntax=docker/dockerfile:1
# The M3 gRPC service. Build: docker build -t m3grpc .
# Run, configuration and compose with PostgreSQL: README.md ("Run it in a container").

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# -- build: the package and its server dependencies in a virtual environment ----------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/m3grpc
WORKDIR /src
# README.md: the package's long description (pyproject's readme).
COPY pyproject.toml LICENSE README.md ./
COPY m3grpc ./m3grpc
RUN /opt/m3grpc/bin/pip install ".[server,postgres,tracing]"

# -- runtime: the virtual environment, tini as PID 1, a non-root user -------------------
FROM ${PYTHON_IMAGE}
# tini reaps the stdio MCP servers' orphaned children and forwards SIGTERM to m3grpc.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 m3 \
    && useradd --system --uid 10001 --gid m3 --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin m3 \
    && mkdir -p /data /etc/m3grpc \
    && chown m3:m3 /data
COPY --from=build /opt/m3grpc /opt/m3grpc
COPY --chmod=0755 docker/entrypoint.sh /usr/local/bin/m3grpc-entrypoint
# The example MCP server a written configuration binds as `shipping` (M3_EXAMPLE_SERVER),
# so that a first run can show a whole round.
COPY examples/shipping_server.py /usr/local/share/m3grpc/examples/shipping_server.py
ENV PATH=/opt/m3grpc/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
WORKDIR /data
# The SQLite database (M3_DATABASE defaults to /data/m3.sqlite). With PostgreSQL
# the volume stays empty.
VOLUME ["/data"]
EXPOSE 50051
# grpc.health.v1 on the served port (M3_LISTEN, default 0.0.0.0:50051).
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["m3grpc", "health", "--timeout", "4"]
ENTRYPOINT ["tini", "--", "m3grpc-entrypoint"]
