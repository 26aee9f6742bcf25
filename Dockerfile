# syntax=docker/dockerfile:1
# Multi-stage build of idemgate's three binaries; the runtime image is
# distroless-like (debian slim), runs as a non-root user.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/api ./cmd/api \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/worker ./cmd/worker \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/idemctl ./cmd/idemctl

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home /var/lib/idemgate --create-home idemgate
COPY --from=build /out/ /usr/local/bin/
USER idemgate
WORKDIR /var/lib/idemgate
EXPOSE 8080 9091
CMD ["api"]
