# syntax=docker/dockerfile:1
# The one image of Bloomery: /bloomery serves both roles. The operator's Deployment runs
# `/bloomery operator ...` and the data-plane StatefulSets it creates run `/bloomery dataplane ...`
# (both set only args, so the entrypoint is the binary).
#
#   make docker-build        # tags ghcr.io/bloomery/bloomery:<the chart's appVersion>, the chart's default
#
# Where no base image can be pulled, Dockerfile.scratch builds the same image (make image).
#
# No registry publishes the image: load it into a kind cluster with `kind load docker-image`, or
# push it to a registry of yours (make docker-build docker-push IMG=<registry>/bloomery:<tag>).

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS builder
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
WORKDIR /src

# Modules first, in their own layer: it is rebuilt only when go.mod or go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download

COPY . .
# A static binary (no cgo), so that the distroless static image, which has no libc, runs it.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/bloomery .

# No shell, no package manager; runs as the nonroot user (uid and gid 65532), which the chart's
# and the operator's security contexts expect.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="bloomery" \
      org.opencontainers.image.description="Bloomery, a Kubernetes-native bloom filter service (operator and data plane)" \
      org.opencontainers.image.source="https://github.com/bloomery/bloomery" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=builder /out/bloomery /bloomery
USER 65532:65532
# The data plane: client API 8080, internal (operator and peers) 8090, probes and metrics 9090,
# RESP 6379 (dataplane/config's defaults and spec.resp.port's). The operator: probes 8081,
# metrics 8443. Dockerfile.scratch builds the same image without pulling; test/image checks both
# name the same ports.
EXPOSE 8080 8090 9090 6379 8081 8443
ENTRYPOINT ["/bloomery"]
