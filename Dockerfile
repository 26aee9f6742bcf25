# syntax=docker/dockerfile:1
# One image for every idemgate process: the api (the default command), the
# worker (`worker`) and the operator CLI (`idemctl migrate`, `idemctl token
# create`, ...). docker-compose.yml runs the migrate, api and worker
# services from this one image with different commands.
#
# Stage 1 builds the three static binaries (CGO off: the SQLite engine is
# pure Go). .dockerignore keeps .git, .tmp (dev secrets and databases),
# node_modules and local binaries out of the build context.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/api ./cmd/worker ./cmd/idemctl

# Stage 2: Debian slim with CA certificates (Stripe over TLS) and curl (the
# compose health checks), the binaries in /usr/local/bin, run as the
# non-root user idemgate (uid 10001) in /var/lib/idemgate, where the
# SQLite default (./idemgate.db) would live. 8080: the api
# (IDEMGATE_API_ADDR); 9091: the worker's /metrics and /healthz
# (IDEMGATE_WORKER_ADDR). Both default to 127.0.0.1: set them to 0.0.0.0:PORT
# in a container, as docker-compose.yml does.
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home /var/lib/idemgate --create-home idemgate
COPY --from=build /out/ /usr/local/bin/
USER idemgate
WORKDIR /var/lib/idemgate
EXPOSE 8080 9091
CMD ["api"]
